"""Agent commands: ``tether lineage ls|inspect|resolve``, ``tether reap``, and
``tether agent turn|heartbeat|authorize|handoff|hook`` (the agent protocol from a shell,
with ``TETHER_SESSION``/``TETHER_TOKEN``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from tether.cli import output as out
from tether.cli.context import check_fleet, client, die

if TYPE_CHECKING:
    from tether.agent.session import Session


@click.group()
@click.pass_context
def lineage(ctx: click.Context) -> None:
    """Agent lineages: stable identities across revivals (with --fleet, the agents placed
    on every host: ls, inspect and resolve)."""
    check_fleet(ctx)


@lineage.command("ls")
@click.option("-a", "--all", "all_", is_flag=True, help="include finished lineages")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def lineage_ls(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """List lineages with their state; with --fleet, the agent placements of every host."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_lineages

        fleet_lineages(ctx, all_, as_json)
        return
    rows = client(ctx).lineage_list(all=all_)
    if as_json:
        out.emit_json(rows)
    else:
        out.lineage_table(rows)


@lineage.command("inspect")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.argument("ref")
@click.pass_context
def lineage_inspect(ctx: click.Context, as_json: bool, ref: str) -> None:
    """Show one lineage (--json: its record); with --fleet, a placement (WORK or name) and
    its lineage on its host."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_lineage_inspect

        fleet_lineage_inspect(ctx, ref, as_json)
        return
    rec = client(ctx).lineage_get(ref)
    if as_json:
        out.emit_json(rec)
    else:
        import msgspec

        out.lineage_detail(msgspec.to_builtins(rec))


@lineage.command("resolve")
@click.option("--revive", "action", flag_value="revive", help="revive it from its snapshot")
@click.option("--reap", "action", flag_value="reap", help="discard it")
@click.argument("ref")
@click.pass_context
def lineage_resolve(ctx: click.Context, action: str | None, ref: str) -> None:
    """Decide what happens to a lineage waiting under the `ask` revival policy, or for its
    usage limit to reset (WAITING_LIMIT: --revive tries now, --reap gives up); with
    --fleet, a placement (WORK) whose host died under `ask`."""
    if action is None:
        raise click.UsageError("say --revive or --reap")
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_resolve

        fleet_resolve(ctx, ref, action)
        return
    rec = client(ctx).lineage_resolve(ref, "revive" if action == "revive" else "reap")
    click.echo(f"{rec.id} {rec.status}" + (f" (exec {rec.exec})"
                                          if rec.status == "ACTIVE" else ""))


@lineage.command("finish")
@click.option("--commit", is_flag=True, help="commit what the agent left uncommitted first")
@click.argument("ref")
@click.pass_context
def lineage_finish(ctx: click.Context, commit: bool, ref: str) -> None:
    """Stop a lineage (it finishes) and hand its branch off: commit (--commit, or the
    repository's handoff.commit), push to handoff.remote, run handoff.command."""
    rec = client(ctx).lineage_finish(ref, commit=commit)
    h = rec.handoff
    if h is None:
        click.echo(f"{rec.id} {rec.status}: handed off already")
        return
    for st in h.get("steps", []):
        click.echo(f"  {st['step']}: exit {st['exit_code']}")
    where = f" to {h['remote']}" if h.get("remote") else ""
    if h.get("ok"):
        click.echo(f"{rec.id} handed off: {h.get('branch')} at {h.get('head')}{where}")
        return
    bad = next((s for s in h.get("steps", []) if s["exit_code"] != 0), None)
    tail = (bad or {}).get("output_tail", "").strip()
    step = (bad or {}).get("step")
    said = out.printable(f"tether: {rec.id}: hand-off failed at {step}: {tail}", lines=True)
    click.echo(f"{said}\nfix it and run `tether lineage finish {rec.id}` again", err=True)
    sys.exit(1)


@click.command()
@click.pass_context
def reap(ctx: click.Context) -> None:
    """Sweep agent sessions without signalling: settle the dead, drop stale heartbeats."""
    r = client(ctx).agent_reap()
    click.echo(f"swept {r.swept} dead sessions, removed {r.heartbeat_files_removed} "
               "stale heartbeat files")


@click.group()
def agent() -> None:
    """Speak the agent protocol from a shell agent (uses TETHER_SESSION/TETHER_TOKEN)."""


def _session() -> Session:
    from tether.agent.session import NotAnAgent, Session

    try:
        return Session.from_env()
    except NotAnAgent as e:
        die(str(e), 2)


@agent.command("turn")
@click.option("--context-pct", type=click.FloatRange(0, 100), default=None,
              help="how full the context window is, in percent")
@click.option("--model", default=None, help="the model that ran the turn")
@click.option("--input-tokens", type=click.IntRange(min=0), default=None,
              help="the turn's input tokens")
@click.option("--output-tokens", type=click.IntRange(min=0), default=None,
              help="the turn's output tokens")
@click.option("-m", "--message", "messages", multiple=True, help="ROLE:TEXT (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
def agent_turn(context_pct: float | None, model: str | None, input_tokens: int | None,
               output_tokens: int | None, messages: tuple[str, ...], as_json: bool) -> None:
    """Report a completed turn; prints the lifecycle state (and what to do)."""
    usage = {k: v for k, v in (("input_tokens", input_tokens),
                               ("output_tokens", output_tokens)) if v is not None}
    msgs = [{"role": m.split(":", 1)[0], "content": m.split(":", 1)[1] if ":" in m else ""}
            for m in messages]
    r = _session().turn(context_pct=context_pct, usage=usage or None, model=model,
                        messages=msgs)
    if as_json:
        out.emit_json(r)
    else:
        click.echo(r.lifecycle + (f": {r.instructions}" if r.instructions else ""))


@agent.command("heartbeat")
def agent_heartbeat() -> None:
    """Refresh this session's heartbeat."""
    click.echo(_session().heartbeat().heartbeat)


@agent.command("authorize")
@click.argument("tool")
def agent_authorize(tool: str) -> None:
    """Ask whether a tool call is allowed: exit 0 and 'allowed', or exit 1 and why not."""
    r = _session().authorize_tool(tool)
    click.echo(r.reason if r.allowed else f"fenced: {r.reason}")
    sys.exit(0 if r.allowed else 1)


@agent.command("handoff")
@click.argument("text", required=False)
def agent_handoff(text: str | None) -> None:
    """Record a handoff for a successor (TEXT, or stdin)."""
    body = text if text is not None else sys.stdin.read()
    click.echo(_session().handoff(body).path)


@agent.command("hook", hidden=True)
@click.argument("provider")
@click.argument("event")
@click.argument("payload_arg", required=False)
def agent_hook(provider: str, event: str, payload_arg: str | None) -> None:
    """Called by an agent's own hooks: read the payload (stdin, or the last argument for
    agents that pass it so), answer in the agent's format."""
    from tether.agent.hook import run

    sys.exit(run(provider, event, payload_arg))
