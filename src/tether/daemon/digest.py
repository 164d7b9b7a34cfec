"""Activity digests: the rollup pass that turns finished execs into hours, days,
ISO weeks and months (source 004's table of contents), and its periodic loop.

A pass goes level by level. For each period with children it compares what the
children are now (their fingerprint) with the newest version of the node: an
open period gets a DRAFT; a closed one (its end plus the level's minimum age has
passed) is built (BUILDING, then COMPLETE or FAILED) unless its newest COMPLETE
version has the same children. Each build ends with one transaction that writes
the node, its ``digest.node`` event and the level's checkpoint, so a pass killed
anywhere resumes where it was: the next pass skips what is COMPLETE, builds again
what is BUILDING or FAILED, and starts its scan from the checkpoints.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shlex
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

import msgspec

from tether.daemon.clock import Clock
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.digest import periods, summary
from tether.digest.periods import Period
from tether.model.digest import LEVELS, DigestNode, DigestSummary, Level
from tether.model.layout import HomeLayout
from tether.model.states import DigestState
from tether.store.digest import DigestTables

log = logging.getLogger("tether.digest")

#: How long after its end a period is closed (late execs still land in it before).
MIN_AGE: dict[Level, float] = {"hour": 600.0, "day": 3600.0, "week": 3600.0, "month": 3600.0}
#: How far before its checkpoint a pass looks again for late children.
LOOKBACK: dict[Level, float] = {"hour": 2 * 86400.0, "day": 8 * 86400.0,
                                "week": 35 * 86400.0, "month": 62 * 86400.0}
SUMMARIZER_TIMEOUT = 300.0
SUMMARY_TEXT_MAX = 16384
INTERVAL = 900.0  # seconds between periodic passes


class SummarizerFailed(Exception):
    pass


@dataclass
class PassReport:
    built: int = 0
    failed: int = 0
    drafts: int = 0
    unchanged: int = 0
    nodes: list[str] = field(default_factory=list)


@dataclass
class _Step:
    """What a pass does with one period: ``draft`` (an open one: ``shell`` carries its
    figures), ``build`` (``figures``, written when the build ends) or nothing
    (``unchanged``); ``shell`` carries its children and their fingerprint."""

    action: str
    shell: DigestNode
    kids: list[DigestNode]
    figures: DigestSummary | None = None  # a build's (a draft's are in its shell)


def _fingerprint(items: Iterable[str]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(item.encode())
        h.update(b"\n")
    return h.hexdigest()[:32]


class DigestService:
    def __init__(self, tables: DigestTables, layout: HomeLayout, journal: Journal,
                 clock: Clock, faults: Faults, *, tz: tzinfo,
                 summarizer: str | None = None, interval: float = INTERVAL) -> None:
        self.tables = tables
        self.layout = layout
        self.journal = journal
        self.clock = clock
        self.faults = faults
        self.tz = tz
        self.summarizer = summarizer
        self.interval = interval
        self._lock = asyncio.Lock()  # one pass at a time (the loop, digest.build)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Pass every ``interval`` seconds of wall time; a failed pass is logged."""
        while True:
            await self.clock.sleep_until(self.clock.now() + self.interval,
                                         at_most=self.interval)
            try:
                await self.build()
            except Exception:
                log.exception("digest pass failed; the next one tries again")

    async def build(self, summarizer: str | None = None) -> PassReport:
        async with self._lock:
            return await self._pass(summarizer or self.summarizer)

    # ------------------------------------------------------------------ the pass
    # The reads of a pass (which periods have children, their fingerprints, the figures
    # of those to build) run in a worker thread with a read connection of its own
    # (``Store.reads``), a level at a time; the loop only writes each node (two short
    # transactions) and runs the summarizer. A first pass over 100,000 execs reads for
    # seconds, and the daemon serves meanwhile.
    def _since(self, db: sqlite3.Connection, level: Level) -> float:
        cp = self.tables.checkpoint(level, db)
        return 0.0 if cp is None else cp[0] - LOOKBACK[level]

    def _candidates(self, db: sqlite3.Connection, level: Level) -> list[Period]:
        since = self._since(db, level)
        found: dict[str, Period] = {}
        below = periods.child_level(level)
        if below is None:
            starts: Iterable[float] = self.tables.ended_times(since, float("inf"), db)
        else:
            starts = [n.period_start for n in self.tables.nodes(below, since, float("inf"), db)]
        # Every zone's offset is a multiple of 15 minutes, so instants in one quarter
        # hour share their periods: look each quarter up once, not each exec.
        for quarter in {int(t // 900) for t in starts}:
            p = periods.of(level, quarter * 900.0, self.tz)
            found.setdefault(p.id, p)
        for node in self.tables.unfinished(level, db):
            found.setdefault(node.id, Period(node.level, node.label, node.period_start,
                                             node.period_end))
        return sorted(found.values(), key=lambda p: p.start)

    def _children(self, db: sqlite3.Connection, p: Period,
                  ) -> tuple[list[str], str, list[DigestNode]]:
        below = periods.child_level(p.level)
        if below is None:
            ids = self.tables.exec_ids(p.start, p.end, db)
            return ids, _fingerprint(ids), []
        nodes = self.tables.nodes(below, p.start, p.end, db)
        return ([n.id for n in nodes],
                _fingerprint(f"{n.id} {n.version} {n.state}" for n in nodes), nodes)

    def _figures(self, db: sqlite3.Connection, p: Period,
                 kids: list[DigestNode]) -> DigestSummary:
        if periods.child_level(p.level) is not None:
            return summary.merge(n.summary for n in kids if n.summary is not None)
        leaves = self.tables.leaves(p.start, p.end, db)
        for leaf in leaves:
            if not (leaf.state == "FINISHED" and leaf.exit_code == 0):
                leaf.last_line = self._last_line(leaf.sandbox, leaf.id)
        return summary.of_leaves(leaves)

    def _plan(self, db: sqlite3.Connection, level: Level, now: float) -> list[_Step]:
        """In the worker: what a pass does at ``level`` (one snapshot of the store)."""
        steps: list[_Step] = []
        for p in self._candidates(db, level):
            ids, fp, kids = self._children(db, p)
            if not ids:
                continue
            cur = self.tables.latest(p.id, db)
            shell = DigestNode(id=p.id, level=p.level, label=p.label,
                               period_start=p.start, period_end=p.end, version=1,
                               state=DigestState.BUILDING, children=ids, fingerprint=fp)
            if p.end + MIN_AGE[level] > now:  # still open
                if cur is None or (cur.state == DigestState.DRAFT and cur.fingerprint != fp):
                    shell.summary = self._figures(db, p, kids)
                    steps.append(_Step("draft", shell, kids))
                continue
            if cur is not None and cur.state == DigestState.COMPLETE and cur.fingerprint == fp:
                steps.append(_Step("unchanged", shell, kids))
                continue
            steps.append(_Step("build", shell, kids, self._figures(db, p, kids)))
        return steps

    async def _pass(self, command: str | None) -> PassReport:
        report = PassReport()
        now = self.clock.now()
        for level in LEVELS:  # a level's plan reads the nodes the level below just wrote
            for step in await self.tables.reads(self._plan, level, now):
                if step.action == "draft":
                    self.tables.put_draft(step.shell)
                    report.drafts += 1
                elif step.action == "unchanged":
                    report.unchanged += 1
                else:
                    await self._build(self.tables.begin_build(step.shell), step, command,
                                      report)
                await asyncio.sleep(0)  # let requests in between nodes
        return report

    async def _build(self, node: DigestNode, step: _Step, command: str | None,
                     report: PassReport) -> None:
        figures = step.figures
        assert figures is not None
        error = None
        if command:
            try:
                figures.text = await self._summarize(command, node, figures, step.kids)
            except SummarizerFailed as e:
                error = str(e)
        done = self.journal.commit(self.tables.finish(
            node, summary=figures, error=error, summarizer=command or None, processed=1))
        report.nodes.append(f"{done.id} v{done.version} {done.state}")
        if error is None:
            report.built += 1
        else:
            report.failed += 1
            log.warning("digest %s: %s", done.id, error)
        self.faults.hit("digest.after_node")

    async def _summarize(self, command: str, node: DigestNode, figures: DigestSummary,
                         kids: list[DigestNode]) -> str:
        """Run the user's summarizer on the node: JSON on stdin, its text on stdout."""
        doc: dict[str, Any] = {
            "node": {"id": node.id, "level": node.level, "label": node.label,
                     "period_start": node.period_start, "period_end": node.period_end,
                     "version": node.version},
            "summary": msgspec.to_builtins(figures),
            "children": [{"id": k.id, "summary": msgspec.to_builtins(k.summary)}
                         for k in kids],
        }
        try:
            argv = shlex.split(command)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=self.layout.root, start_new_session=True)
        except (OSError, ValueError) as e:
            raise SummarizerFailed(f"summarizer {command!r} could not start: {e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(msgspec.json.encode(doc)),
                                              SUMMARIZER_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SummarizerFailed(f"summarizer {command!r} took longer than "
                                   f"{SUMMARIZER_TIMEOUT:.0f} s") from None
        except asyncio.CancelledError:  # the caller went away, or the daemon stops:
            proc.kill()  # the node stays BUILDING, and the next pass builds it
            await proc.wait()
            raise
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise SummarizerFailed(f"summarizer {command!r} exited {proc.returncode}"
                                   + (f": {tail[0][:300]}" if tail[0] else ""))
        text = out.decode(errors="replace").strip()
        if not text:
            raise SummarizerFailed(f"summarizer {command!r} printed nothing")
        return text[:SUMMARY_TEXT_MAX]

    def _last_line(self, sandbox: str, exec_id: str) -> str:
        """The last non-empty line a failed run printed (stderr, else its terminal)."""
        base = os.path.join(self.layout.logs, sandbox, exec_id)  # strings: one per failure
        for path in (f"{base}.stderr.log", f"{base}.pty.log", f"{base}.stdout.log"):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                    lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
            except OSError:
                continue
            lines = [ln for ln in lines if ln]
            if lines:
                return lines[-1][:300]
        return ""

    # ------------------------------------------------------------------ reads
    def show(self, level: Level, label: str | None, *, versions: bool = False
             ) -> dict[str, Any]:
        """A node and its children's newest versions (``label`` None: the current one)."""
        p = (periods.of(level, self.clock.now(), self.tz) if label is None
             else periods.parse(level, label, self.tz))
        node = self.tables.latest(p.id)
        below = periods.child_level(level)
        kids = [] if below is None else self.tables.nodes(below, p.start, p.end)
        out: dict[str, Any] = {
            "period": {"id": p.id, "level": level, "label": p.label, "start": p.start,
                       "end": p.end},
            "node": None if node is None else msgspec.to_builtins(node),
            "children": [msgspec.to_builtins(k) for k in kids],
        }
        if versions:
            out["versions"] = [msgspec.to_builtins(v) for v in self.tables.versions(p.id)]
        return out

    async def recent(self, level: Level, count: int) -> list[dict[str, Any]]:
        """The newest ``count`` periods of ``level`` that have a node, oldest first (read
        in a worker thread: years of hours are many nodes)."""
        def read(db: sqlite3.Connection) -> list[dict[str, Any]]:
            nodes = self.tables.nodes(level, 0.0, float("inf"), db)[-count:]
            return [msgspec.to_builtins(n) for n in nodes]
        return await self.tables.reads(read)
