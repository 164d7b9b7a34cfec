"""``tether digest``: what ran, rolled up by hour, day, week and month; or one agent's
story (``--lineage``)."""

from __future__ import annotations

import time
from typing import Literal

import click

from tether.cli import output as out
from tether.cli.context import client
from tether.client.replies import LineageStory
from tether.model.digest import DigestNode

LevelName = Literal["hour", "day", "week", "month"]


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _span(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _node_line(n: DigestNode, indent: str = "") -> str:
    text = n.summary.text if n.summary is not None else ""
    if n.error:
        text = f"{text} · summarizer failed: {n.error}" if text else n.error
    return f"{indent}{n.level} {n.label}  {n.state} v{n.version}  {text}".rstrip()


def _story(s: LineageStory) -> None:
    lin = s.lineage
    head = f"lineage {lin.id}" + (f" ({lin.name})" if lin.name else "")
    click.echo(f"{head}  {lin.provider}  {lin.status}  {lin.attempt} attempt(s), "
               f"{lin.revivals} revival(s), {lin.turns} turn(s)"
               + (f", context {lin.context_pct:.0f}%" if lin.context_pct is not None else ""))
    by_exec: dict[str, list[str]] = {}
    for ev in s.events:
        if ev.exec is None:
            continue
        if ev.type == "agent.turn":
            usage = ev.data.get("usage") or {}
            tokens = sum(int(v) for v in usage.values()) if isinstance(usage, dict) else 0
            pct = ev.data.get("context_pct")
            line = f"turn {ev.data.get('turn')}" + (f"  context {pct:.0f}%" if pct else "") \
                + (f"  {tokens} tokens" if tokens else "")
        elif ev.type in {"lineage.state", "agent.lifecycle", "agent.handoff"}:
            line = f"{ev.type} {ev.state}" + (f": {ev.reason}" if ev.reason else "")
        else:
            continue
        by_exec.setdefault(ev.exec, []).append(f"{_when(ev.time)}  {line}")
    for number, a in enumerate(s.attempts, 1):
        took = (a.ended_at or time.time()) - (a.started_at or a.created_at)
        end = (f"exit {a.exit_code}" if a.exit_code is not None
               else f"signal {a.signal}" if a.signal is not None else "")
        click.echo(out.printable(
            f"  attempt {number}  {a.id}  {_when(a.started_at or a.created_at)}  "
            f"{_span(max(0.0, took))}  {a.state} {end}".rstrip()
            + (f"  ({a.reason})" if a.reason else "")))
        for line in by_exec.get(a.id, []):
            click.echo(out.printable(f"      {line}"))


@click.command()
@click.option("--hour", "hour", default=None, metavar="LABEL",
              help="one hour, labelled like 2026-11-23T14:00+01:00")
@click.option("--day", "day", is_flag=False, flag_value="", default=None, metavar="[DATE]",
              help="a day and its hours (default: today)")
@click.option("--week", "week", is_flag=False, flag_value="", default=None, metavar="[2026-W47]",
              help="an ISO week and its days (default: this week)")
@click.option("--month", "month", is_flag=False, flag_value="", default=None,
              metavar="[2026-11]", help="a month and its days (default: this month)")
@click.option("--lineage", default=None, help="one agent's story: attempts, turns, revivals")
@click.option("--build", is_flag=True, help="run a rollup pass first (closed periods only)")
@click.option("--summarizer", default=None, metavar="CMD",
              help="with --build: a command that reads the node's JSON on stdin and "
              "prints its summary (e.g. 'claude -p \"Summarise this\"')")
@click.option("--versions", is_flag=True, help="every version of the node, oldest first")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def digest(ctx: click.Context, hour: str | None, day: str | None, week: str | None,
           month: str | None, lineage: str | None, build: bool, summarizer: str | None,
           versions: bool, as_json: bool) -> None:
    """What your agents and commands did, by hour, day, week and month.

    Without a period: the last seven days. A period closes an hour after it ends
    (an hour: ten minutes); until then its node is a DRAFT.
    """
    c = client(ctx)
    if summarizer and not build:
        raise click.UsageError("--summarizer needs --build")
    if build:
        done = c.digest_build(summarizer=summarizer)
        if not as_json:
            click.echo(f"rollup: {done.built} built, {done.failed} failed, {done.drafts} "
                       f"draft(s), {done.unchanged} unchanged", err=True)
    if lineage is not None:
        story = c.digest_lineage(lineage)
        if as_json:
            out.emit_json(story)
        else:
            _story(story)
        return
    chosen = [(lv, v) for lv, v in (("hour", hour), ("day", day), ("week", week),
                                    ("month", month)) if v is not None]
    if len(chosen) > 1:
        raise click.UsageError("give one of --hour, --day, --week, --month")
    if not chosen:
        nodes = c.digest_recent("day", 7)
        if not nodes and not build:  # the daemon's pass runs every 15 min: run one now
            c.digest_build()
            nodes = c.digest_recent("day", 7)
        if as_json:
            out.emit_json({"nodes": nodes})
            return
        if not nodes:
            click.echo("nothing has ended in the last seven days")
        for n in nodes:
            click.echo(_node_line(n))
        return
    level, label = chosen[0]
    tree = c.digest_show(level, label or None, versions=versions)  # type: ignore[arg-type]
    if tree.node is None and not build:  # not rolled up yet: a pass now
        c.digest_build()
        tree = c.digest_show(level, label or None, versions=versions)  # type: ignore[arg-type]
    if as_json:
        out.emit_json(tree)
        return
    if tree.node is None:
        click.echo(f"{tree.period.level} {tree.period.label}: nothing ended in it yet")
    else:
        click.echo(_node_line(tree.node))
    for child in tree.children:
        click.echo(_node_line(child, "  "))
    for v in tree.versions or []:
        click.echo(f"  version {v.version}  {v.state}  {_when(v.updated_at)}  "
                   f"{len(v.children)} children")
