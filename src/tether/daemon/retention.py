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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.daemon.clock import Clock
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.model.errors import RpcCode, TetherError
from tether.model.layout import HomeLayout
from tether.model.records import ExecRecord
from tether.model.retention import RetentionPolicy
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE
from tether.store import Store
from tether.store.retention import Prune, RetentionStore

log = logging.getLogger("tether.retention")

REMOVED = "removed by exec.remove"
FIRST_PASS_DELAY = 5.0  # seconds after start: recovery and the first requests go first


@dataclass
class Plan:
    """What one pass would remove; ``retention.prune --dry-run`` shows it as it is."""

    logs: list[tuple[ExecRecord, int, str]] = field(default_factory=list)  # rec, bytes, why
    run_files: list[Path] = field(default_factory=list)
    run_bytes: int = 0
    events_bound: int = 0
    events: int = 0

    def view(self, dry_run: bool) -> dict[str, Any]:
        return {
            "dry_run": dry_run,
            "execs": [{"id": r.id, "sandbox": r.sandbox, "name": r.name, "bytes": n,
                       "ended_at": r.ended_at, "why": why} for r, n, why in self.logs],
            "log_bytes": sum(n for _, n, _ in self.logs),
            "run_files": len(self.run_files), "run_bytes": self.run_bytes,
            "events": self.events, "events_floor": self.events_bound,
        }


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


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

    # ------------------------------------------------------------------ files of an exec
    def _log_files(self, rec: ExecRecord) -> list[Path]:
        p = self.layout.exec_paths(rec.sandbox, rec.id)
        return [p.stdout, p.stderr, p.pty]

    def _run_files(self, exec_id: str) -> list[Path]:
        try:
            names = [n for n in os.listdir(self.layout.run) if n.split(".", 1)[0] == exec_id]
        except FileNotFoundError:
            return []
        return [self.layout.run / n for n in names]

    def _files(self, rec: ExecRecord, what: str) -> list[Path]:
        if what == "logs":
            return self._log_files(rec)
        return [*self._log_files(rec), self.layout.exec_paths(rec.sandbox, rec.id).exit,
                *self._run_files(rec.id)]

    def _carry_out(self, prune: Prune) -> None:
        rec = self.store.get_exec(prune.exec_id)
        if rec is not None:
            for path in self._files(rec, prune.what):
                _unlink(path)
        ev = self.rs.finish(prune, rec)
        if ev is not None:
            self.journal.commit_all([ev])

    def _remove(self, recs: list[tuple[ExecRecord, int]], what: str, reason: str) -> None:
        if not recs:
            return
        self.journal.commit_all(self.rs.mark(recs, what, reason, self.clock.now()))
        self.faults.hit("retention.after_mark")
        for rec, _ in recs:
            prune = self.rs.get_prune(rec.id)
            if prune is not None:
                self._carry_out(prune)

    def recover(self) -> int:
        """Finish the removals a killed daemon left marked but not done."""
        left = self.rs.unfinished()
        for prune in left:
            self._carry_out(prune)
        return len(left)

    def pruned(self, exec_id: str) -> Prune | None:
        return self.rs.get_prune(exec_id)

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
    def plan(self, older_than: float | None = None) -> Plan:
        pol = self.policy
        now = self.clock.now()
        plan = Plan()
        ended = self.rs.ended_execs()
        explicit = older_than is not None  # then 0 means "all", not "off"
        keep_logs = pol.keep_logs if older_than is None else older_than
        rest: list[tuple[ExecRecord, int]] = []
        for rec in ended:
            size = sum(_size(p) for p in self._log_files(rec))
            if (keep_logs or explicit) and now - (rec.ended_at or 0.0) >= keep_logs:
                plan.logs.append((rec, size, f"ended more than {_human(keep_logs)} ago"))
            else:
                rest.append((rec, size))
        if pol.logs_max_bytes and older_than is None:
            total = self.logs_bytes() - sum(n for _, n, _ in plan.logs)
            for rec, size in rest:  # oldest end first
                if total <= pol.logs_max_bytes:
                    break
                if size:
                    plan.logs.append((rec, size, f"logs/ above {pol.logs_max_bytes} bytes"))
                    total -= size
        keep_run = pol.keep_run_files if older_than is None else older_than
        old_ended = {r.id for r in ended if now - (r.ended_at or 0.0) > keep_run}
        old_ended |= {r.id for r, _, _ in plan.logs if now - (r.ended_at or 0.0) > keep_run}
        for path in self._all_run_files():
            if path.name.split(".", 1)[0] in old_ended:
                plan.run_files.append(path)
                plan.run_bytes += _size(path)
        keep_events = pol.keep_events if older_than is None else older_than
        if keep_events or explicit:
            live = [r.id for r in self.store.list_execs(states=("PENDING", "RUNNING"))]
            plan.events_bound = self.rs.compaction_bound(now - keep_events, live)
            plan.events = self.rs.count_compactable(plan.events_bound)
        return plan

    def _all_run_files(self) -> list[Path]:
        try:
            return [self.layout.run / n for n in sorted(os.listdir(self.layout.run))]
        except FileNotFoundError:
            return []

    def logs_bytes(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.layout.logs):
            total += sum(_size(Path(root) / f) for f in files)
        return total

    def apply(self, plan: Plan) -> None:
        by_why: dict[str, list[tuple[ExecRecord, int]]] = {}
        for rec, size, why in plan.logs:
            by_why.setdefault(why, []).append((rec, size))
        for why, recs in by_why.items():
            self._remove(recs, "logs", f"logs pruned: {why}")
        for path in plan.run_files:
            _unlink(path)
        if plan.events:
            n = self.rs.compact(plan.events_bound)
            if n:
                self.journal.record(None, "journal.compacted", reason=(
                    f"{n} journal events up to gseq {plan.events_bound} removed"),
                    data={"events": n, "floor": plan.events_bound})

    def prune(self, older_than: float | None, dry_run: bool) -> dict[str, Any]:
        plan = self.plan(older_than)
        if not dry_run:
            self.apply(plan)
        return plan.view(dry_run)

    async def loop(self) -> None:
        """The periodic pass, owned by the daemon's task group."""
        await self.clock.sleep_until(self.clock.now() + FIRST_PASS_DELAY,
                                     at_most=FIRST_PASS_DELAY)
        while True:
            try:
                out = self.prune(None, dry_run=False)
                if out["execs"] or out["run_files"] or out["events"]:
                    log.info("retention: %d execs' logs (%d bytes), %d run files, %d events",
                             len(out["execs"]), out["log_bytes"], out["run_files"],
                             out["events"])
            except Exception:
                log.exception("retention pass failed; retrying at the next one")
            await asyncio.sleep(self.policy.interval)

    # ------------------------------------------------------------------ tether rm
    def remove_execs(self, recs: list[ExecRecord]) -> list[dict[str, Any]]:
        """``exec.remove``: settled execs only, and none a live agent still stands on."""
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
            size = sum(_size(p) for p in self._files(rec, "exec"))
            out.append({"id": rec.id, "bytes": size})
            if self.rs.get_prune(rec.id) is None:
                todo.append((rec, size))
            else:  # its logs were pruned before: the rest goes now
                self.rs.escalate(rec.id, REMOVED)
                self._carry_out(self.rs.get_prune(rec.id) or _never(rec.id))
        self._remove(todo, "exec", REMOVED)
        return out

    # ------------------------------------------------------------------ tether df
    def df(self) -> dict[str, Any]:
        """Bytes under the home by kind, by sandbox and by lineage (apparent sizes)."""
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
        for rec in self.store.list_execs():
            size = per_exec.get(rec.id, 0)
            sb = sandboxes.setdefault(rec.sandbox, {"id": rec.sandbox, "bytes": 0, "execs": 0})
            sb["bytes"] += size
            sb["execs"] += 1
            if rec.lineage:
                per_lineage[rec.lineage] = per_lineage.get(rec.lineage, 0) + size
        for sb in sandboxes.values():
            rec_sb = self.store.get_sandbox(sb["id"])
            sb["name"] = rec_sb.name if rec_sb is not None else None
        lineages = []
        for ident, size in sorted(per_lineage.items()):
            lin = self.store.get_lineage(ident)
            lineages.append({"id": ident, "name": lin.name if lin else None, "bytes": size})
        return {"home": str(root), "total": sum(kinds.values()), "kinds": kinds,
                "sandboxes": sorted(sandboxes.values(), key=lambda s: -s["bytes"]),
                "lineages": sorted(lineages, key=lambda s: -s["bytes"]),
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
