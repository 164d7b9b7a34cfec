"""Fleet commands: ``tether fleet init URL``, ``tether --fleet URL hosts|drain|ps`` and
``run --host`` (placement). They speak to the fleet's PostgreSQL directly
(``tether.fleet.store``); psycopg is imported only here, only with a fleet URL."""

from __future__ import annotations

import os
import uuid
from typing import Any, NamedTuple

import click

from tether.cli import output as out
from tether.cli.context import die


def _url(ctx: click.Context) -> str:
    url: str | None = ctx.obj.fleet
    if not url:
        die("this command needs the fleet's PostgreSQL: tether --fleet URL ... (or "
            "TETHER_FLEET_URL, or --fleet-url-file FILE)", 2)
    return url


def _given(ctx: click.Context, url: str | None) -> str:
    """A command's own URL argument (warned about when it carries a password), else the
    fleet's."""
    if url is None:
        return _url(ctx)
    from tether.fleet import url as fleet_url

    if (warning := fleet_url.warn_argv(url)) is not None:
        out.note(warning)
    return url


def _connect(url: str) -> Any:
    import psycopg

    from tether.fleet import names
    from tether.fleet import store as fs

    if (bad := names.url_error(url)) is not None:
        die(bad, 2)

    try:
        return fs.connect(url)
    except psycopg.Error as e:
        die(f"cannot reach the fleet database: {str(e).strip()}", 125,
            hint="check the URL and that PostgreSQL is up")


def _ready(url: str) -> Any:
    from tether.fleet import schema

    conn = _connect(url)
    have = schema.version(conn)
    if have == 0:
        die("the fleet database is not initialised", 1,
            hint="tether --fleet URL fleet init (with the same URL)")
    if have < schema.LATEST:
        die(f"the fleet database is at schema {have}, older than this tether's "
            f"{schema.LATEST}", 1, hint="tether --fleet URL fleet init (with the same URL)")
    return conn


@click.group()
def fleet() -> None:
    """Fleet mode: many hosts' daemons sharing one PostgreSQL."""


@fleet.command("init")
@click.argument("url", required=False)
@click.pass_context
def fleet_init(ctx: click.Context, url: str | None) -> None:
    """Create or upgrade the fleet's schema in PostgreSQL URL (safe to run again); without
    URL, the fleet's (--fleet, TETHER_FLEET_URL, --fleet-url-file)."""
    from tether.fleet import schema

    url = _given(ctx, url)
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
@click.option("--now", is_flag=True, help="move its agents at once, mid-turn")
@click.argument("host")
@click.pass_context
def drain(ctx: click.Context, host: str, now: bool) -> None:
    """Place no new work on HOST and move its agents to other hosts, each after its
    current turn (--now: at once); its plain commands finish there. Undo: undrain."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            changed = admin.drain(conn, host, now=now)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} draining" + (" (agents move now)" if now else "")
               if changed else f"host {host} was not ACTIVE")


@click.command()
@click.argument("host")
@click.pass_context
def undrain(ctx: click.Context, host: str) -> None:
    """Undo a drain: HOST (DRAINING) takes new work again. Agents it already handed
    over stay where they went."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            admin.undrain(conn, host)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} ACTIVE")


@click.command()
@click.argument("host")
@click.pass_context
def forget(ctx: click.Context, host: str) -> None:
    """Remove HOST from the fleet: only once its lease expired and none of its work
    is live. Its ended placements keep its name."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            ended = admin.forget(conn, host)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} forgotten ({ended} ended placement(s) keep its name)")


@fleet.command("rotate-token")
@click.option("--grace", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="seconds the previous token is still accepted")
@click.argument("url", required=False)
@click.pass_context
def fleet_rotate_token(ctx: click.Context, url: str | None, grace: float) -> None:
    """Make a new token for the hosts' host-to-host API (logs, events, attach across
    hosts). Hosts pick it up within a third of a lease; the old one is accepted for
    --grace seconds more, and streams already open are never cut. Without URL, the
    fleet's (--fleet, TETHER_FLEET_URL, --fleet-url-file)."""
    from tether.fleet import admin

    with _ready(_given(ctx, url)) as conn:
        try:
            admin.rotate_token(conn, grace)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"fleet token rotated; the previous one is accepted for {grace:g} s more")


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


#: Seconds to wait for a host without a live lease to accept a connection: partitioned
#: from PostgreSQL it may still serve; down, it should not hold the command long.
GONE_CONNECT = 2.0


class Remote(NamedTuple):
    """Where a placement's (or a host's) logs and events are served, and how to ask."""

    api: str
    token: str  # the fleet's API token
    query: dict[str, str]  # names the local exec or lineage
    host: str
    live: bool  # the host holds a live lease (else: tried with a short connect timeout)


def gone(host: str, api: str, what: str) -> str:
    """The one line for a host without a live lease that does not answer either."""
    return (f"host {host} has no live lease and does not answer at {api}: its {what} "
            "until it comes back")


def _unanswered(e: OSError) -> bool:
    """Whether ``e`` means nothing answers at the address (not a refused certificate)."""
    import errno

    return isinstance(e, ConnectionError | TimeoutError) or e.errno in (
        errno.EHOSTUNREACH, errno.ENETUNREACH)


def _remote(ctx: click.Context, work_ref: str) -> Remote:
    """Where placement ``work_ref``'s logs and events live."""
    from tether.fleet import store as fs

    if not work_ref.isdigit():
        die(f"{work_ref!r} is not a placement: with --fleet, name the WORK number "
            "`tether --fleet URL ps -a` shows", 2)
    with _ready(_url(ctx)) as conn:
        w = fs.get_work(conn, int(work_ref))
        if w is None:
            die(f"no placement {work_ref} in the fleet", 1,
                hint="tether --fleet URL ps -a lists them")
        if not w["local_id"] or not w["host"]:
            die(f"placement {work_ref} has not started yet (it is {w['state']} on "
                f"{w['host'] or 'no host'})", 1, hint="try again in a moment")
        key = "lineage" if w["kind"] == "agent" else "exec"
        return _where(conn, w["host"], {key: w["local_id"]})


def _where(conn: Any, host: str, query: dict[str, str]) -> Remote:
    from tether.fleet import store as fs

    try:
        end, token = fs.endpoint(conn, host), fs.secret(conn)
    except fs.NoHost as e:
        die(str(e), 1)
    return Remote(end.api, token, query, host, end.live)


def _stream(at: Remote, path: str, query: dict[str, str], what: str) -> Any:
    """GET ``path`` on a host's API, streamed; yields the body's chunks. An error reply
    or an unreachable host ends the command with what to do (``what``: the
    ``logs are on its disk``, for a host without a lease that does not answer). The standard
    library's ``http.client`` (not httpx): a CLI run pays ~100 ms less of imports."""
    import http.client
    import json
    from urllib.parse import urlencode, urlsplit

    api, host = at.api, at.host
    u = urlsplit(api)
    conn: http.client.HTTPConnection
    wait = 10.0 if at.live else GONE_CONNECT
    try:
        if u.scheme == "https":
            import ssl

            conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=wait,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=wait)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(10)
        conn.request("GET", f"{u.path.rstrip('/')}{path}?{urlencode(query)}",
                     headers={"Authorization": f"Bearer {at.token}"})
        r = conn.getresponse()
    except (OSError, http.client.HTTPException) as e:
        if not at.live and isinstance(e, OSError) and _unanswered(e):
            die(gone(host, api, what), 1)
        die(f"cannot reach host {host}'s fleet API at {api}: {e}", 125,
            hint="is its daemon up, and TETHER_FLEET_LISTEN/ADVERTISE reachable from here?")
    try:
        if r.status != 200:
            body = r.read()
            try:
                msg = json.loads(body)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                msg = body[:200].decode(errors="replace")
            die(f"host {host}: {msg}", 1)
        if conn.sock is not None:
            conn.sock.settimeout(None)  # a follow waits as long as the exec runs
        while chunk := r.read1(1 << 16):
            yield chunk
    except (OSError, http.client.HTTPException) as e:
        die(f"lost host {host}'s fleet API at {api}: {e}", 125)
    finally:
        conn.close()


def fleet_logs(ctx: click.Context, work_ref: str, *, follow: bool, use_stderr: bool,
               offset: int) -> None:
    """``logs`` with ``--fleet``: a placement's output, streamed from its host's daemon."""
    import sys

    at = _remote(ctx, work_ref)
    query = {**at.query, "offset": str(offset), "follow": "1" if follow else "0"}
    if use_stderr:
        query["stream"] = "stderr"
    try:
        for data in _stream(at, "/v1/logs", query, "logs are on its disk"):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
    except KeyboardInterrupt:
        pass


def fleet_events(ctx: click.Context, *, work_ref: str | None, host: str | None,
                 follow: bool, since: int, as_json: bool) -> None:
    """``events`` with ``--fleet``: the fleet journal (PostgreSQL); with ``--work`` or
    ``--host``, that host's own journal streamed from its daemon."""
    import json
    import sys
    import time

    from tether.fleet import store as fs

    if work_ref is not None or host is not None:
        if work_ref is not None:
            at = _remote(ctx, work_ref)
        else:
            assert host is not None
            with _ready(_url(ctx)) as conn:
                at = _where(conn, host, {})
        query = {**at.query, "since": str(since), "follow": "1" if follow else "0"}
        buf = b""
        try:
            for data in _stream(at, "/v1/events", query, "events are on its disk"):
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    _show_event(json.loads(line), at.host, as_json)
        except KeyboardInterrupt:
            pass
        return
    cursor = since
    try:
        with _ready(_url(ctx)) as conn:
            while True:
                for row in fs.journal(conn, cursor):
                    cursor = row["gseq"]
                    if as_json:
                        out.emit_json(row)
                    else:
                        data = " ".join(f"{k}={v}" for k, v in row["data"].items())
                        if row.get("local_gseq") is not None:  # relayed from its host
                            t = time.strftime("%H:%M:%S", time.localtime(row["local_at"]))
                            data = f"local={row['local_gseq']}@{t} {data}"
                        click.echo(f"{row['gseq']:>6} {row['type']:<16} "
                                   f"{row['host'] or '-':<12} work={row['work'] or '-'} {data}")
                    sys.stdout.flush()
                if not follow:
                    return
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def _show_event(ev: dict[str, Any], host: str, as_json: bool) -> None:
    from tether.model.records import Event

    if as_json:
        out.emit_json({**ev, "host": host})
    else:
        import msgspec

        click.echo(f"{host}: {out.event_line(msgspec.convert(ev, Event))}")


def fleet_branch(branch: str, cwd: str) -> dict[str, str]:
    """``run --worktree BRANCH`` in a fleet: the host that runs the agent clones the
    repository's ``origin`` and works on BRANCH there, pushing it back as it goes, so
    the branch must travel through a remote every host reaches."""
    import subprocess

    ok = not branch.startswith("-") and subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True).returncode == 0
    if not ok or branch == ".":
        die(f"--worktree {branch!r}: in a fleet, name a branch (the worktree is made on "
            "the host that runs the agent)", 2)
    r = subprocess.run(["git", "-C", cwd, "remote", "get-url", "origin"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        die(f"--worktree {branch}: {cwd} has no `origin` remote, so its branch cannot "
            "reach another host", 2,
            hint="git remote add origin URL (a URL every host can fetch from and push to)")
    remote = r.stdout.strip()
    if os.path.isdir(os.path.join(cwd, remote)) and not os.path.isabs(remote):
        remote = os.path.abspath(os.path.join(cwd, remote))
    return {"remote": remote, "branch": branch}


def fleet_attach(ctx: click.Context, work_ref: str, keys: bytes, read_only: bool) -> int:
    """``attach`` with ``--fleet``: a placement's session, proxied by its host."""
    from tether.cli import fleet_attach as fa

    at = _remote(ctx, work_ref)
    grant = None
    if not read_only:  # typing: prove we may write to the fleet database (fleet_http)
        import hashlib
        import secrets

        from tether.fleet import store as fs

        grant = secrets.token_hex(32)
        with _ready(_url(ctx)) as conn:
            fs.grant_attach(conn, at.host, at.query,
                            hashlib.sha256(grant.encode()).hexdigest())
    return fa.attach(at.api, at.token, at.query, what=f"placement {work_ref} on {at.host}",
                     again=f"tether --fleet URL attach {work_ref}", keys=keys,
                     read_only=read_only, grant=grant,
                     gone=None if at.live else gone(at.host, at.api, "sessions cannot be attached"))


def fleet_resolve(ctx: click.Context, work_ref: str, action: str) -> None:
    """``lineage resolve`` with ``--fleet``: answer an ASK placement (its host died)."""
    from tether.fleet import store as fs

    if not work_ref.isdigit():
        die(f"{work_ref!r} is not a placement: with --fleet, name the WORK number "
            "`tether --fleet URL ps` shows (state ASK)", 2)
    with _ready(_url(ctx)) as conn:
        try:
            row = fs.resolve_ask(conn, int(work_ref), action)
        except fs.NoHost as e:
            die(str(e), 1)
    click.echo(f"{row['id']} {row['state']}" + (f" on {row['host']} (generation "
                                               f"{row['generation']})"
                                               if row["state"] == "PLACED" else ""))
