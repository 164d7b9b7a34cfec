"""``tether hook add|ls|show|retry|rm``: webhooks, journal events delivered at least once
to a URL (HTTP POST, JSON) or to a command (JSON on stdin). Not ``tether agent hook``,
which is an agent's own hook program."""

from __future__ import annotations

import os
import shlex

import click

from tether.cli import output as out
from tether.cli.context import client
from tether.client.replies import DeliveryView, WebhookView


@click.group()
def hook() -> None:
    """Webhooks: tell a URL or a command when events happen (at least once)."""


def _target(h: WebhookView) -> str:
    if h.url is not None:
        return h.url + (" (signed)" if h.has_secret else "")
    return "exec: " + shlex.join(h.exec or [])


@hook.command("add", context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.argument("command", nargs=-1)
@click.option("--on", "on", multiple=True, required=True,
              help="event type glob, repeatable: exec.finished, exec.failed, exec.*, "
              "agent.waiting, lineage.*, …")
@click.option("--url", default=None, help="POST each event here (http:// or https://)")
@click.option("--exec", "use_exec", is_flag=True,
              help="run COMMAND (after --) with each event as JSON on its stdin")
@click.option("--secret-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="sign each try: X-Tether-Signature-256: t=TIME,v1=HMAC-SHA256 of "
              "TIME.KEY.BODY with the file's bytes (surrounding whitespace stripped)")
@click.option("--sandbox", default=None, help="only events of this sandbox (name or id)")
@click.option("--name", "match_name", default=None,
              help="only events of execs (or agents) whose name matches this glob")
@click.option("--nonzero", is_flag=True,
              help="only events of execs that exited non-zero or by a signal")
@click.option("--max-tries", type=click.IntRange(1, 100), default=8, show_default=True,
              help="tries (with exponential backoff) before a delivery is DEAD")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def hook_add(ctx: click.Context, name: str, command: tuple[str, ...], on: tuple[str, ...],
             url: str | None, use_exec: bool, secret_file: str | None, sandbox: str | None,
             match_name: str | None, nonzero: bool, max_tries: int, as_json: bool) -> None:
    """Add hook NAME: `--url URL`, or `--exec -- COMMAND [ARGS]...`."""
    if url is not None and not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r} is not an http:// or https:// URL",
                                 param_hint="--url")
    if use_exec == (url is not None):
        raise click.UsageError("give either --url URL or --exec -- COMMAND")
    if use_exec and not command:
        raise click.UsageError("--exec needs a command after --, e.g. --exec -- notify.sh")
    if command and not use_exec:
        raise click.UsageError(f"unexpected arguments {' '.join(command)!r} (a command "
                               "needs --exec)")
    h = client(ctx).hook_add(
        name, list(on), url=url, exec=list(command) if use_exec else None,
        cwd=os.getcwd() if use_exec else None,
        secret_file=os.path.abspath(secret_file) if secret_file else None,
        sandbox=sandbox, match_name=match_name, nonzero=nonzero, max_tries=max_tries)
    if as_json:
        out.emit_json(h)
    else:
        click.echo(f"hook {h.name}: {', '.join(h.on)} -> {_target(h)}")


@hook.command("ls")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def hook_ls(ctx: click.Context, as_json: bool) -> None:
    """List hooks with their deliveries by state."""
    hooks = client(ctx).hook_list()
    if as_json:
        out.emit_json(hooks)
        return
    rows = [("HOOK", "ON", "TARGET", "DELIVERIES")] + [
        (h.name, ",".join(h.on), _target(h),
         " ".join(f"{k}={v}" for k, v in sorted(h.counts.items())) or "none")
        for h in hooks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True))
                   + "  " + r[3])


def _line(d: DeliveryView) -> str:
    err = f"  {d.last_error}" if d.last_error else ""
    due = f" next {out.when(d.next_at)}" if d.state == "FAILED" else ""
    return f"{d.id}\t{d.key}\t{d.type}\t{d.state}\ttries={d.tries}{due}{err}"


@hook.command("show")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 10000), default=20, show_default=True,
              help="how many recent deliveries")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def hook_show(ctx: click.Context, name: str, limit: int, as_json: bool) -> None:
    """Show a hook, its newest deliveries and its dead letters."""
    h = client(ctx).hook_show(name, limit=limit)
    if as_json:
        out.emit_json(h)
        return
    click.echo(f"hook {h.name}: {', '.join(h.on)} -> {_target(h)}")
    filters = [f"sandbox={h.sandbox}" if h.sandbox else "",
               f"name={h.match_name}" if h.match_name else "",
               "nonzero" if h.nonzero else "", f"max-tries={h.max_tries}"]
    click.echo("filters: " + " ".join(f for f in filters if f))
    click.echo("deliveries (newest first):")
    for d in h.deliveries:
        click.echo("  " + _line(d))
    if h.dead:
        click.echo(f"dead letters (retry with `tether hook retry {h.name}`):")
        for d in h.dead:
            click.echo("  " + _line(d))


@hook.command("retry")
@click.argument("name")
@click.option("--delivery", type=click.IntRange(min=1), default=None,
              help="only this delivery (its id in `tether hook show`)")
@click.pass_context
def hook_retry(ctx: click.Context, name: str, delivery: int | None) -> None:
    """Try DEAD and FAILED deliveries again, now, from try 1."""
    r = client(ctx).hook_retry(name, delivery=delivery)
    click.echo(f"{r.retried} {'delivery' if r.retried == 1 else 'deliveries'} of {r.name} "
               "queued again")


@hook.command("rm")
@click.argument("name")
@click.pass_context
def hook_rm(ctx: click.Context, name: str) -> None:
    """Remove a hook; its undelivered deliveries are dropped."""
    r = client(ctx).hook_remove(name)
    click.echo(f"removed {r.name} ({r.undelivered} undelivered dropped)")
