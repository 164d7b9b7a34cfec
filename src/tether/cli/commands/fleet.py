"""Fleet commands: ``tether fleet init URL``, ``tether --fleet URL hosts|drain|ps`` and
``run --host`` (placement). They speak to the fleet's PostgreSQL directly
(``tether.fleet.store``); psycopg is imported only here, only with a fleet URL."""

from __future__ import annotations

import uuid
from typing import Any

import click

from tether.cli import output as out
from tether.cli.context import die


def _url(ctx: click.Context) -> str:
    url: str | None = ctx.obj.fleet
    if not url:
        die("this command needs the fleet's PostgreSQL: tether --fleet URL ...", 2)
    return url


def _connect(url: str) -> Any:
    import psycopg

    from tether.fleet import store as fs

    try:
        return fs.connect(url)
    except psycopg.Error as e:
        die(f"cannot reach the fleet database: {str(e).strip()}", 125,
            hint="check the URL and that PostgreSQL is up")


def _ready(url: str) -> Any:
    from tether.fleet import schema

    conn = _connect(url)
    if schema.version(conn) == 0:
        die("the fleet database is not initialised", 1, hint=f"tether fleet init {url}")
    return conn


@click.group()
def fleet() -> None:
    """Fleet mode: many hosts' daemons sharing one PostgreSQL."""


@fleet.command("init")
@click.argument("url")
def fleet_init(url: str) -> None:
    """Create or upgrade the fleet's schema in PostgreSQL URL (safe to run again)."""
    from tether.fleet import schema

    with _connect(url) as conn:
        try:
            applied = schema.migrate(conn)
        except RuntimeError as e:
            die(str(e), 1)
        v = schema.version(conn)
    click.echo(f"fleet schema at version {v}" +
               (f" (applied {', '.join(map(str, applied))})" if applied else " (up to date)"))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def hosts(ctx: click.Context, as_json: bool) -> None:
    """The fleet's hosts: their lease, capacity, load, version."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        rows = fs.hosts(conn)
    if as_json:
        out.emit_json(rows)
        return
    click.echo(f"{'HOST':<16} {'STATE':<9} {'LEASE':<12} {'LOAD':>9} {'TOKEN':>6}  "
               "VERSION  LABELS")
    for r in rows:
        lease = f"{r['lease_left']:.1f}s left" if r["live"] else "expired"
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "-"
        click.echo(f"{r['name']:<16} {r['state']:<9} {lease:<12} "
                   f"{r['load']:>4}/{r['capacity']:<4} {r['token']:>6}  "
                   f"{r['version']:<8} {labels}")


@click.command()
@click.argument("host")
@click.pass_context
def drain(ctx: click.Context, host: str) -> None:
    """Place no new work on HOST; what runs there finishes there."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        try:
            changed = fs.drain(conn, host)
        except fs.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} draining" if changed else f"host {host} was not ACTIVE")


def fleet_ps(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """``ps`` with ``--fleet``: every placement on every host."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        rows = fs.work(conn, all_=all_)
    if as_json:
        out.emit_json(rows)
        return
    click.echo(f"{'WORK':>6} {'KIND':<6} {'HOST':<16} {'STATE':<8} {'GEN':>3} {'LOCAL':<12} "
               "COMMAND")
    for r in rows:
        cmd = " ".join(r["argv"] or [])
        click.echo(f"{r['id']:>6} {r['kind']:<6} {r['host'] or '-':<16} {r['state']:<8} "
                   f"{r['generation']:>3} {r['local_id'] or '-':<12} {cmd[:60]}")


def place_run(ctx: click.Context, kind: str, params: dict[str, Any], host: str | None,
              labels: dict[str, str], revival: str) -> None:
    """``run`` with ``--fleet``: place the work on a host and print where it went."""
    from tether.fleet import store as fs

    want = None if host in (None, "auto") else host
    with _ready(_url(ctx)) as conn:
        try:
            row = fs.place(conn, kind, params, labels=labels, host=want,
                           revival=revival if kind == "agent" else "reap",
                           request_key=uuid.uuid4().hex)
        except fs.NoHost as e:
            die(str(e), 1)
    click.echo(f"{row['id']}  placed on {row['host']}")
