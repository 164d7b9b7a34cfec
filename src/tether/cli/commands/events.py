"""``tether events``: the event journal, paged or followed, resumable with ``--since``."""

from __future__ import annotations

import sys

import click

from tether.cli import output as out
from tether.cli.context import client, die
from tether.model.records import Event


@click.command()
@click.option("-f", "--follow", is_flag=True, help="keep printing new events")
@click.option("--since", type=click.IntRange(min=0), default=0,
              help="cursor: global seq, or the sandbox's seq with --sandbox")
@click.option("--sandbox", default=None, help="only this sandbox's events")
@click.option("--epoch", default=None,
              help="the journal epoch --since was read in (`tether status --json`): a "
              "reset journal is then refused instead of skipped")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@click.option("--work", default=None, help="fleet: the events of this placement, from its host")
@click.option("--host", default=None, help="fleet: this host's own journal")
@click.pass_context
def events(ctx: click.Context, follow: bool, since: int, sandbox: str | None,
           epoch: str | None, as_json: bool, work: str | None, host: str | None) -> None:
    """Print the event journal (resumable with --since); with --fleet, the fleet's."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_events

        fleet_events(ctx, work_ref=work, host=host, follow=follow, since=since,
                     as_json=as_json)
        return
    if work is not None or host is not None:
        die("--work and --host read a fleet: tether --fleet URL events ...", 2)
    c = client(ctx)

    def show(ev: Event) -> None:
        if as_json:
            out.emit_json(ev)
        else:
            click.echo(out.event_line(ev))
        sys.stdout.flush()

    try:
        if follow:
            for ev in c.subscribe(since=since, sandbox=sandbox, epoch=epoch):
                show(ev)
        else:
            cursor = since
            while True:
                page = c.events_list(since=cursor, sandbox=sandbox, limit=1000,
                                     epoch=epoch)
                for ev in page.events:
                    show(ev)
                if len(page.events) < 1000:
                    break
                cursor = page.next
    except KeyboardInterrupt:
        pass
