"""Space commands: ``tether rm`` (settled execs), ``tether prune`` (a retention pass
now) and ``tether df`` (what the home holds, by kind, sandbox and lineage)."""

from __future__ import annotations

import sys

import click

from tether.cli import output as out
from tether.cli.context import client
from tether.client.errors import TetherError
from tether.model.retention import parse_duration


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@click.command()
@click.argument("exec_refs", nargs=-1, required=True)
@click.pass_context
def rm(ctx: click.Context, exec_refs: tuple[str, ...]) -> None:
    """Remove settled execs: their record, logs and run files; with --fleet, ended
    placements (WORK or name) from the fleet database."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_rm

        fleet_rm(ctx, exec_refs)
    c = client(ctx)
    status = 0
    for ref in exec_refs:  # one at a time: a live one is refused, the others still go
        try:
            for x in c.exec_remove([ref]).removed:
                click.echo(f"{x.id}\t{human(x.bytes)}")
        except TetherError as e:
            out.fail(e.message)
            status = 1
    sys.exit(status)


@click.command()
@click.option("--older-than", "older_than", default=None, metavar="AGE",
              help="remove what ended more than AGE ago (7d, 12h…); default: the "
                   "daemon's policy (TETHER_KEEP_LOGS, TETHER_LOGS_MAX, TETHER_KEEP_EVENTS)")
@click.option("--dry-run", is_flag=True, help="list what would go; change nothing")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def prune(ctx: click.Context, older_than: str | None, dry_run: bool, as_json: bool) -> None:
    """Remove ended execs' logs and run files, and compact the old journal, now."""
    try:
        age = parse_duration(older_than) if older_than is not None else None
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--older-than") from None
    rep = client(ctx).prune(older_than=age, dry_run=dry_run)
    if as_json:
        import msgspec

        out.emit_json(msgspec.to_builtins(rep))
        return
    verb = "would remove" if dry_run else "removed"
    for x in rep.execs:
        click.echo(f"{x.id}\t{x.name or '-'}\t{human(x.bytes)}\t{x.why}")
    click.echo(f"{verb}: logs of {_count(len(rep.execs), 'exec')} ({human(rep.log_bytes)}), "
               f"{rep.run_files} run files ({human(rep.run_bytes)}), "
               f"{rep.events} journal events, {rep.schedule_runs} scheduled runs")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def df(ctx: click.Context, as_json: bool) -> None:
    """Space used under the home: by kind, by sandbox, by agent lineage."""
    du = client(ctx).df()
    if as_json:
        import msgspec

        out.emit_json(msgspec.to_builtins(du))
        return
    click.echo(f"{du.home}: {human(du.total)}")
    for kind, n in du.kinds.items():
        click.echo(f"  {kind:<10}{human(n):>12}")
    click.echo(f"scheduled runs kept: {du.schedule_runs} (pruned with the journal, "
               "TETHER_KEEP_EVENTS)")
    if du.sandboxes:
        click.echo("sandboxes (logs and run files):")
        for s in du.sandboxes:
            click.echo(f"  {_named(s.name, s.id):<36}{human(s.bytes):>12}  "
                       f"{_count(s.execs, 'exec')}")
    if du.lineages:
        click.echo("lineages (logs, run files and snapshots):")
        for s in du.lineages:
            click.echo(f"  {_named(s.name, s.id):<36}{human(s.bytes):>12}")


def _named(name: str | None, ident: str) -> str:
    """``bot (lin-3f2a9c1e04)``: two lineages may share a name, never an id."""
    return f"{name} ({ident})" if name and name != ident else ident


def _count(n: int, noun: str) -> str:
    """``1 exec``, ``2 execs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
