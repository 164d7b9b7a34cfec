"""Retention: remove what ended execs leave behind, and compact the old journal.

A pass (every ``policy.interval``, a few seconds after start, and on
``retention.prune``) removes, in this order:

1. the logs of execs that ended more than ``keep_logs`` ago;
2. then, while ``logs/`` holds more than ``logs_max_bytes``, the logs of the execs
   that ended first (a running exec's log is never cut: ``tether logs --offset``
   promises every byte of it, and a live writer holds it open);
3. the run files (claim, handles, monitor log, socket) of execs settled more than
   ``keep_run_files`` ago: nothing reads them once the exec is settled;
4. journal events older than ``keep_events`` (``store/retention.py``: a prefix,
   never past a live exec's first event, with per-stream floors).

Every exec is marked (and journaled ``exec.pruned``) before its files go, and the
mark finished after: a daemon killed in between finishes the removal at start
(:meth:`RetentionService.recover`), and ``tether logs`` says "pruned" meanwhile.
Time is the daemon's :class:`Clock`, so tests move it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tether.daemon.clock import Clock
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.model.errors import RpcCode, TetherError
from tether.model.layout import HomeLayout
from tether.model.records import ExecRecord
from tether.model.retention import RetentionPolicy
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE
from tether.store import Store
from tether.store.retention import ExecLike, Prune, RetentionStore

log = logging.getLogger("tether.retention")

REMOVED = "removed by exec.remove"
RUN_FILES_MIN_AGE = 60.0  # a settled exec's monitor may still be exiting for a moment
#: A pass's writes on the loop are batches of rows per transaction (execs marked and
#: finished, journal events deleted, scheduled runs deleted), each batch sized from the
#: last one's time to take about :data:`BATCH_SECONDS`, between these bounds; the loop
#: serves between two batches.
BATCH_SECONDS = 0.005
BATCH_MIN, BATCH_FIRST, BATCH_MAX = 20, 100, 5000
#: A pass writes hundreds of MB of WAL frames (each batch rewrites index pages all over
#: the journal, about 10 MB per second of writing). After this many seconds of its
#: batches it waits for a checkpoint (passive, in a worker thread) before the next one,
#: so that the next commit starts the WAL over instead of growing it for the whole pass:
#: a read of a page looks through the WAL's index, and a pass over 100,000 execs in one
#: ever-growing WAL slowed itself, and every request, down.
CHECKPOINT_AFTER = 2.0
LOG_SUFFIXES = (".stdout.log", ".stderr.log", ".pty.log", ".order")  # a logs prune's


@dataclass
class Plan:
    """What one pass would remove; ``retention.prune --dry-run`` shows it as it is."""

    logs: list[tuple[ExecLike, int, str]] = field(default_factory=list)  # exec, bytes, why
    #: the same, by why, each in exec id order: how ``apply`` carries them out
    by_why: list[tuple[str, list[tuple[ExecLike, int]]]] = field(default_factory=list)
    run_files: list[str] = field(default_factory=list)
    run_bytes: int = 0
    events_bound: int = 0
    events: int = 0
    keep: list[int] | None = None  # each stream's newest event (None: found per step)
    runs_before: float | None = None  # scheduled runs that ended before it go
    schedule_runs: int = 0
    run_ids: list[int] = field(default_factory=list)  # those runs

    def view(self, dry_run: bool) -> dict[str, Any]:
        return {
            "dry_run": dry_run,
            "execs": [{"id": r.id, "sandbox": r.sandbox, "name": r.name, "bytes": n,
                       "ended_at": r.ended_at, "why": why} for r, n, why in self.logs],
            "log_bytes": sum(n for _, n, _ in self.logs),
            "run_files": len(self.run_files), "run_bytes": self.run_bytes,
            "events": self.events, "events_floor": self.events_bound,
            "schedule_runs": self.schedule_runs,
        }


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class _Batches:
    """Batch sizes that keep each transaction of a pass near :data:`BATCH_SECONDS`
    (rows cost more or less as the journal, its indexes and the disk go), and the pass's
    WAL bounded (:data:`CHECKPOINT_AFTER`)."""

    def __init__(self, store: Store) -> None:
        self.size = BATCH_FIRST
        self.store = store
        self.writing = 0.0  # seconds of batches since the last checkpoint

    async def took(self, rows: int, seconds: float) -> None:
        """A batch of ``rows`` committed in ``seconds``: size the next one, checkpoint
        after :data:`CHECKPOINT_AFTER` seconds of batches, and let the loop serve."""
        if rows and seconds > 0:
            want = int(rows * BATCH_SECONDS / seconds)
            self.size = max(BATCH_MIN, min(BATCH_MAX, want, self.size * 4))
        self.writing += seconds
        if self.writing > CHECKPOINT_AFTER:
            self.writing = 0.0
            await asyncio.to_thread(self.store.checkpoint)  # the next commit starts it over
        else:
            await asyncio.sleep(0)


class RetentionService:
    def __init__(self, store: Store, layout: HomeLayout, journal: Journal, clock: Clock,
                 policy: RetentionPolicy, faults: Faults) -> None:
        self.store = store
        self.rs = RetentionStore(store)
        self.layout = layout
        self.journal = journal
        self.clock = clock
        self.policy = policy
        self.faults = faults
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ files of an exec
    def _paths(self, rec: ExecLike, what: str) -> list[str]:
        """What a prune removes: the logs; for ``exec``, the exit and run files too."""
        base = os.path.join(self.layout.logs, rec.sandbox, rec.id)
        out = [base + suffix for suffix in LOG_SUFFIXES]
        if what == "exec":
            out += [base + ".exit", base + ".exit.reserve"]
            run_dir = str(self.layout.run)
            out += [os.path.join(run_dir, n) for n in self._run_names()
                    if n.split(".", 1)[0] == rec.id]
        return out

    def _carry_out(self, prune: Prune) -> None:
        rec = self.store.get_exec(prune.exec_id)
        if rec is not None:
            _unlink_all(self._paths(rec, prune.what))
        ev = self.rs.finish(prune, rec)
        if ev is not None:
            self.journal.commit_all([ev])

    def _remove(self, recs: list[tuple[ExecRecord, int]], what: str, reason: str) -> None:
        """Mark, unlink, finish: inline, for the few execs of ``exec.remove``."""
        if not recs:
            return
        self.journal.commit_all(self.rs.mark(recs, what, reason, self.clock.now()))
        self.faults.hit("retention.after_mark")
        for rec, _ in recs:
            prune = self.rs.get_prune(rec.id)
            if prune is not None:
                self._carry_out(prune)

    async def _prune_logs(self, recs: list[tuple[ExecLike, int]], reason: str,
                          batches: _Batches) -> None:
        """Mark, unlink (in a worker thread), finish, a batch of execs at a time: the
        loop is never blocked by the unlinks, and a transaction holds a batch."""
        i = 0
        while i < len(recs):
            chunk = recs[i:i + batches.size]
            i += len(chunk)
            t0 = time.perf_counter()
            self.journal.commit_all(self.rs.mark(chunk, "logs", reason, self.clock.now()))
            took = time.perf_counter() - t0
            self.faults.hit("retention.after_mark")
            paths = [p for rec, _ in chunk for p in self._paths(rec, "logs")]
            await asyncio.to_thread(_unlink_all, paths)
            t0 = time.perf_counter()
            self.rs.finish_logs([rec.id for rec, _ in chunk])
            await batches.took(len(chunk), took + time.perf_counter() - t0)

    def recover(self) -> int:
        """Finish the removals a killed daemon left marked but not done."""
        left = self.rs.unfinished()
        for prune in left:
            self._carry_out(prune)
        return len(left)

    def logs_gone(self, rec: ExecRecord) -> None:
        """Refuse to read the logs of an exec whose logs were removed (or are being)."""
        prune = self.rs.get_prune(rec.id)
        if prune is not None:
            raise TetherError(RpcCode.INVALID_STATE, "LOGS_PRUNED",
                              f"the logs of exec {rec.id} were removed ({prune.reason}); "
                              "its record and exit status remain (`tether ps -a`). Keep "
                              "logs longer with TETHER_KEEP_LOGS / TETHER_LOGS_MAX",
                              {"exec": rec.id, "pruned_at": prune.pruned_at})

    # ------------------------------------------------------------------ plan and pass
    def plan(self, db: sqlite3.Connection, older_than: float | None, now: float,
             scan: tuple[dict[str, int], int], run_names: list[str]) -> Plan:
        """What a pass removes, from the store and a scan of ``logs/`` and ``run/``. In a
        worker thread, with a read connection of its own (``Store.reads``): a home of
        100,000 execs takes a while to read, and the loop serves meanwhile."""
        pol = self.policy
        plan = Plan()
        ended = self.rs.ended_execs(db)
        per_exec, logs_total = scan
        explicit = older_than is not None  # then 0 means "all", not "off"
        keep_logs = pol.keep_logs if older_than is None else older_than
        rest: list[tuple[ExecLike, int]] = []
        for rec in ended:
            size = per_exec.get(rec.id, 0)
            if (keep_logs or explicit) and now - (rec.ended_at or 0.0) >= keep_logs:
                plan.logs.append((rec, size, f"ended more than {_human(keep_logs)} ago"))
            else:
                rest.append((rec, size))
        if pol.logs_max_bytes and older_than is None:
            total = logs_total - sum(n for _, n, _ in plan.logs)
            for cand, size in rest:  # oldest end first
                if total <= pol.logs_max_bytes:
                    break
                if size:
                    plan.logs.append((cand, size, f"logs/ above {pol.logs_max_bytes} bytes"))
                    total -= size
        keep_run = max(RUN_FILES_MIN_AGE,
                       pol.keep_run_files if older_than is None else older_than)
        old_ended = {r.id for r in ended if now - (r.ended_at or 0.0) > keep_run}
        run_dir = str(self.layout.run)
        for name in run_names:
            if name.split(".", 1)[0] in old_ended:
                path = os.path.join(run_dir, name)
                plan.run_files.append(path)
                plan.run_bytes += _size(path)
        groups: dict[str, list[tuple[ExecLike, int]]] = {}
        for doomed, size, why in plan.logs:
            groups.setdefault(why, []).append((doomed, size))
        for why, recs in groups.items():
            # In id order: a batch then marks (and finishes) neighbours in the B-trees
            # keyed by exec id (exec_prunes, the journal's exec index), so a transaction
            # rewrites a few pages, not one per exec (ids are random: the pass's order
            # would scatter each batch over the whole tree, and the WAL by gigabytes).
            recs.sort(key=lambda r: r[0].id)
            plan.by_why.append((why, recs))
        keep_events = pol.keep_events if older_than is None else older_than
        if keep_events or explicit:
            live = self.rs.live_exec_ids(db)
            plan.events_bound = self.rs.compaction_bound(now - keep_events, live, db)
            plan.events = self.rs.count_compactable(plan.events_bound, db)
            plan.keep = self.rs.newest_events(db)
            # A scheduled run's history is journal-like: it goes at the journal's age.
            plan.runs_before = now - keep_events
            plan.run_ids = self.store.schedules.runs_before(plan.runs_before, db)
            plan.schedule_runs = len(plan.run_ids)
        return plan

    def _run_names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.layout.run))
        except FileNotFoundError:
            return []

    def _scan_logs(self) -> tuple[dict[str, int], int]:
        """Log bytes by exec id, and every byte under ``logs/``: one pass of ``scandir``
        (a pass over 10,000 execs builds no ``Path`` per file)."""
        per_exec: dict[str, int] = {}
        total = 0
        try:
            sandboxes = [e for e in os.scandir(self.layout.logs)
                         if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return per_exec, 0
        for sb in sandboxes:
            with os.scandir(sb.path) as entries:
                for e in entries:
                    try:
                        size = e.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        continue
                    total += size
                    if e.name.endswith(LOG_SUFFIXES):
                        stem = e.name.split(".", 1)[0]
                        per_exec[stem] = per_exec.get(stem, 0) + size
        return per_exec, total

    async def apply(self, plan: Plan) -> None:
        """Carry ``plan`` out on the loop, in batches of rows per transaction sized to
        take about :data:`BATCH_SECONDS` each, the loop serving in between."""
        batches = _Batches(self.store)
        for why, recs in plan.by_why:
            await self._prune_logs(recs, f"logs pruned: {why}", batches)
        await asyncio.to_thread(_unlink_all, plan.run_files)
        if plan.events:
            n = 0
            step = self.rs.floor()
            compact = _Batches(self.store)
            while step < plan.events_bound:  # a prefix per transaction, the loop between
                step = min(step + compact.size, plan.events_bound)
                t0 = time.perf_counter()
                gone = self.rs.compact(step, plan.keep)
                n += gone
                await compact.took(gone, time.perf_counter() - t0)
            if n:
                self.journal.record(None, "journal.compacted", reason=(
                    f"{n} journal events up to gseq {plan.events_bound} removed"),
                    data={"events": n, "floor": plan.events_bound})
        if plan.run_ids and plan.runs_before is not None:
            runs = _Batches(self.store)
            i = 0
            while i < len(plan.run_ids):
                chunk = plan.run_ids[i:i + runs.size]
                i += len(chunk)
                t0 = time.perf_counter()
                _, ev = self.store.schedules.delete_runs(chunk, plan.runs_before)
                self.journal.commit_all([ev] if ev else [])
                await runs.took(len(chunk), time.perf_counter() - t0)

    async def prune(self, older_than: float | None, dry_run: bool) -> Plan:
        """One pass (``retention.prune``, the periodic loop); passes never overlap. The
        plan is made in a worker thread (``plan``), its writes on the loop (``apply``)."""
        async with self._lock:
            scan = await asyncio.to_thread(self._scan_logs)
            run_names = await asyncio.to_thread(self._run_names)
            plan = await self.store.reads(self.plan, older_than, self.clock.now(), scan,
                                          run_names)
            if not dry_run:
                await self.apply(plan)
            return plan

    async def prune_reply(self, older_than: float | None, dry_run: bool) -> msgspec.Raw:
        """``retention.prune``'s reply, shaped and encoded in a worker thread: it names
        every exec pruned (tens of MB for 100,000)."""
        plan = await self.prune(older_than, dry_run)
        return await asyncio.to_thread(
            lambda: msgspec.Raw(msgspec.json.encode(plan.view(dry_run))))

    async def loop(self) -> None:
        """The periodic pass, owned by the daemon's task group."""
        # Real time: a test that moves the clock must not set off the first pass.
        await asyncio.sleep(self.policy.first_pass)
        while True:
            try:
                plan = await self.prune(None, dry_run=False)
                if plan.logs or plan.run_files or plan.events or plan.schedule_runs:
                    log.info("retention: %d execs' logs (%d bytes), %d run files, %d events, "
                             "%d scheduled runs", len(plan.logs),
                             sum(n for _, n, _ in plan.logs), len(plan.run_files),
                             plan.events, plan.schedule_runs)
            except Exception:
                log.exception("retention pass failed; retrying at the next one")
            await asyncio.sleep(self.policy.interval)

    # ------------------------------------------------------------------ tether rm
    async def remove_execs(self, recs: list[ExecRecord]) -> list[dict[str, Any]]:
        """``exec.remove``: settled execs only, and none a live agent still stands on."""
        async with self._lock:  # not while a pass is marking the same execs
            return self._remove_execs(recs)

    def _remove_execs(self, recs: list[ExecRecord]) -> list[dict[str, Any]]:
        for rec in recs:
            if rec.state not in EXEC_TERMINAL:
                raise TetherError(RpcCode.INVALID_STATE, "EXEC_LIVE",
                                  f"exec {rec.id} is {rec.state}; stop it first with "
                                  f"`tether kill {rec.id}`, then remove it",
                                  {"exec": rec.id, "state": rec.state})
            lin = self.store.get_lineage(rec.lineage) if rec.lineage else None
            if lin is not None and lin.status in LINEAGE_LIVE:
                raise TetherError(RpcCode.INVALID_STATE, "LINEAGE_LIVE",
                                  f"exec {rec.id} is an attempt of agent lineage {lin.id}, "
                                  f"which is {lin.status}; end the lineage first",
                                  {"exec": rec.id, "lineage": lin.id})
        out: list[dict[str, Any]] = []
        todo: list[tuple[ExecRecord, int]] = []
        for rec in recs:
            size = sum(_size(p) for p in self._paths(rec, "exec"))
            out.append({"id": rec.id, "bytes": size})
            if self.rs.get_prune(rec.id) is None:
                todo.append((rec, size))
            else:  # its logs were pruned before: the rest goes now
                self.rs.escalate(rec.id, REMOVED)
                self._carry_out(self.rs.get_prune(rec.id) or _never(rec.id))
        self._remove(todo, "exec", REMOVED)
        return out

    # ------------------------------------------------------------------ tether df
    async def df(self) -> dict[str, Any]:
        """Bytes under the home by kind, by sandbox and by lineage (apparent sizes): a walk
        of the home and a read of every exec, in a worker thread (``Store.reads``)."""
        return await self.store.reads(self._df)

    def _df(self, db: sqlite3.Connection) -> dict[str, Any]:
        root = self.layout.root
        kinds = {"logs": 0, "run": 0, "snapshots": 0, "store": 0, "agents": 0, "other": 0}
        top = {"logs": "logs", "run": "run", "drain": "snapshots", "agents": "agents"}
        per_exec: dict[str, int] = {}
        per_lineage: dict[str, int] = {}
        for dirpath, _dirs, files in os.walk(root):
            rel = Path(dirpath).relative_to(root).parts
            for name in files:
                size = _size(Path(dirpath) / name)
                if not rel:
                    kind = "store" if name.startswith("tether.db") else "other"
                else:
                    kind = top.get(rel[0], "other")
                kinds[kind] += size
                stem = name.split(".", 1)[0]
                if kind in ("logs", "run"):
                    per_exec[stem] = per_exec.get(stem, 0) + size
                elif kind == "snapshots":
                    per_lineage[stem] = per_lineage.get(stem, 0) + size
        sandboxes: dict[str, dict[str, Any]] = {}
        for exec_id, sandbox, lineage in self.rs.exec_owners(db):
            size = per_exec.get(exec_id, 0)
            sb = sandboxes.setdefault(sandbox, {"id": sandbox, "bytes": 0, "execs": 0})
            sb["bytes"] += size
            sb["execs"] += 1
            if lineage:
                per_lineage[lineage] = per_lineage.get(lineage, 0) + size
        sb_names = self.rs.names("sandboxes", list(sandboxes), db)
        for sb in sandboxes.values():
            sb["name"] = sb_names.get(sb["id"])
        lin_names = self.rs.names("lineages", list(per_lineage), db)
        lineages = [{"id": ident, "name": lin_names.get(ident), "bytes": size}
                    for ident, size in sorted(per_lineage.items())]
        return {"home": str(root), "total": sum(kinds.values()), "kinds": kinds,
                "sandboxes": sorted(sandboxes.values(), key=lambda s: -s["bytes"]),
                "lineages": sorted(lineages, key=lambda s: -s["bytes"]),
                "schedule_runs": self.store.schedules.count_all_runs(db),
                "policy": {"keep_logs": self.policy.keep_logs,
                           "logs_max_bytes": self.policy.logs_max_bytes,
                           "keep_events": self.policy.keep_events,
                           "keep_run_files": self.policy.keep_run_files}}


def _never(exec_id: str) -> Prune:
    raise AssertionError(f"exec {exec_id} lost its prune mark inside one call")


def _human(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)}{unit}"
    return f"{seconds:g}s"
