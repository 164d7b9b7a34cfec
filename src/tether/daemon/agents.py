"""Agent lineages: start, turns, fencing, heartbeats, drain snapshots, revival.

A lineage is an agent's stable identity; each attempt is an exec of it. The
lineage record (category A) holds the intent and the counters; the
conversation lives in the drain snapshot (category D); heartbeats and the
message cache are memory (category C: a restarted daemon gives every live
session a fresh grace period and reloads messages from the snapshot).

Exactly once: an attempt's intent (its number and token) is committed before
its exec is started, and the exec carries the request key
``lineage-<id>-<attempt>``. A daemon that crashes anywhere in between finds the
lineage REVIVING and starts the same attempt again with the same key, which
the exec store turns into a no-op if the first try got through. Two daemons
never act at once: the home lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from tether.agent import lifecycle as lc
from tether.agent import snapshot
from tether.agent import worktree as wt
from tether.agent.confinement import _toolchain as _toolchain  # imported from here (tests)
from tether.agent.confinement import agent_view
from tether.agent.confinement import git_common_dir as git_common_dir  # and by api.py
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import HookEvent, SessionContext, Usage
from tether.daemon.events import EventBus
from tether.daemon.execs import ExecService
from tether.daemon.faults import Faults
from tether.daemon.sandboxes import SandboxService
from tether.hostio.untrusted import replace_at
from tether.model.errors import RpcCode, TetherError
from tether.model.layout import HomeLayout
from tether.model.records import AgentConfig, Event, ExecRecord, ExecSpec, LineageRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE, ExecState, LineageStatus
from tether.store import Store

log = logging.getLogger("tether.agents")

WORKTREE_HEARTBEAT_EVERY = 10.0
CRASH_LOOP_LIMIT = 3  # consecutive attempts that die within crash_loop_seconds
REAP_DELAY = 1.0  # seconds between a DEAD turn's reply and SIGTERM to the agent
# The daemon waits at most this long for a worktree's state.json lock (held by some other
# process, perhaps the agent's): it skips that update rather than freeze its event loop.
WORKTREE_LOCK_TIMEOUT = 0.2


def backoff(attempt: int) -> float:
    """Seconds before revival attempt ``attempt + 1``: 0.5, 1, 2, … capped at 30."""
    return float(min(30.0, 0.5 * 2 ** max(0, attempt - 1)))


def _write_private(directory: Path, path: str, content: bytes) -> None:
    """Write a file the daemon made for an agent into its state dir, which the agent may
    write too: never through a symlink it planted (a new file, then a rename)."""
    if Path(path).parent != directory:
        raise TetherError(RpcCode.INTERNAL_ERROR, "INTERNAL_ERROR",
                          f"a provider file outside the session's state dir: {path}")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        replace_at(dfd, os.path.basename(path), content, durable=False)
    finally:
        os.close(dfd)


class AgentService:
    def __init__(self, store: Store, layout: HomeLayout, bus: EventBus, execs: ExecService,
                 sandboxes: SandboxService, instance: str, faults: Faults) -> None:
        self.faults = faults
        self.store = store
        self.layout = layout
        self.bus = bus
        self.execs = execs
        self.sandboxes = sandboxes
        self.instance = instance
        self.tick_interval = float(os.environ.get("TETHER_AGENT_TICK", "2.0"))
        self._heartbeat: dict[str, float] = {}  # lineage -> last sign of life (C)
        self._hb_class: dict[str, lc.HeartbeatClass] = {}
        self._wt_written: dict[str, float] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}  # cache of the snapshot's
        self._hung_kills: set[str] = set()  # exec ids we cancelled as hung
        self._successor_wanted: list[str] = []  # DEAD lineages whose successor is due
        self._tool_calls: dict[str, int] = {}  # for heartbeat.json toolCallsCount
        # Interactive sessions whose last turn ended: waiting for their user, not hung.
        self._awaiting_user: dict[str, float] = {}
        # One per lineage: turns, revivals and resolutions of a lineage never interleave.
        self._locks: dict[str, asyncio.Lock] = {}
        self.wake = asyncio.Event()
        execs.on_terminal.append(self._on_exec_terminal)

    # ------------------------------------------------------------------ helpers
    def _commit(self, result: tuple[LineageRecord, Event | None]) -> LineageRecord:
        rec, ev = result
        if ev is not None:
            self.bus.publish(ev)
        return rec

    def resolve(self, ref: str) -> LineageRecord:
        found = self.store.find_lineages(ref)
        if not found:
            raise TetherError(RpcCode.NOT_FOUND, "LINEAGE_NOT_FOUND",
                              f"no lineage matches {ref!r}; list them with `tether lineage ls`",
                              {"ref": ref})
        if len(found) > 1 and found[0].id != ref and found[0].name != ref:
            raise TetherError(RpcCode.AMBIGUOUS, "AMBIGUOUS",
                              f"{ref!r} matches {len(found)} lineages; give more of the id",
                              {"ref": ref})
        return found[0]

    def authenticate(self, session: str, token: str) -> LineageRecord:
        """A session may only speak for itself, with the current attempt's token."""
        rec = self.store.get_lineage(session)
        if rec is None or not token or not secrets.compare_digest(rec.token, token):
            raise TetherError(RpcCode.INVALID_PARAMS, "BAD_TOKEN",
                              "unknown session or wrong token (TETHER_SESSION/TETHER_TOKEN); "
                              "a revived session gets a new token", {"session": session})
        if rec.status not in LINEAGE_LIVE:
            raise TetherError(RpcCode.INVALID_STATE, "LINEAGE_ENDED",
                              f"lineage {rec.id} is {rec.status}; this session is over",
                              {"session": session, "status": rec.status})
        return rec

    def view(self, rec: LineageRecord) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": rec.id, "name": rec.name, "provider": rec.config.provider,
            "status": rec.status, "lifecycle": rec.lifecycle, "exec": rec.exec_id,
            "attempt": rec.attempt, "revivals": max(0, rec.attempt - 1), "turns": rec.turns,
            "context_pct": rec.context_pct, "model": rec.model, "usage": rec.usage,
            "provider_session_id": rec.provider_session_id, "reason": rec.reason,
            "revival": rec.config.revival, "heartbeat": self.heartbeat_class(rec),
            "revive_at": rec.revive_at, "has_handoff": rec.handoff is not None,
            "snapshot": str(snapshot.path_for(self.layout.root, rec.id)),
            "worktree": rec.config.worktree, "created_at": rec.created_at,
            "predecessor": rec.predecessor,
        }
        return out

    def summary_for_exec(self, exec_id: str, lineage_id: str) -> dict[str, Any] | None:
        rec = self.store.get_lineage(lineage_id)
        if rec is None:
            return None
        return {"lineage": rec.id, "status": rec.status, "lifecycle": rec.lifecycle,
                "heartbeat": self.heartbeat_class(rec) if rec.exec_id == exec_id else None,
                "context_pct": rec.context_pct, "turns": rec.turns,
                "revivals": max(0, rec.attempt - 1)}

    def heartbeat_class(self, rec: LineageRecord) -> str | None:
        if rec.status != LineageStatus.ACTIVE:
            return None
        last = self._last_sign_of_life(rec)
        th = lc.HeartbeatThresholds(rec.config.stale_after, rec.config.crashed_after)
        return str(lc.classify_heartbeat(time.time() - last, th))

    def _last_sign_of_life(self, rec: LineageRecord) -> float:
        last = self._heartbeat.setdefault(rec.id, time.time())
        if rec.exec_id:
            x = self.store.get_exec(rec.exec_id)
            if x is not None:
                paths = self.execs.paths(x)
                for p in (paths.pty if x.spec.tty else paths.stdout, paths.stderr):
                    with contextlib.suppress(FileNotFoundError):
                        last = max(last, p.stat().st_mtime)  # output is activity too
        return last

    def touch(self, rec: LineageRecord, *, activity: bool = True) -> None:
        self._heartbeat[rec.id] = time.time()
        if activity:  # e.g. an idle notification is a sign of life, not of work
            self._awaiting_user.pop(rec.id, None)

    # ------------------------------------------------------------------ start
    async def start(self, cfg: AgentConfig, name: str | None,
                    request_key: str | None = None) -> LineageRecord:
        if request_key:
            existing = self.store.lineage_by_request_key(request_key)
            if existing is not None:
                return existing  # a retry after a lost reply
        get_provider(cfg.provider)  # raises for an unknown provider before any intent
        lc.Thresholds(cfg.aging_pct, cfg.dying_pct)
        if cfg.revival not in ("revive", "reap", "ask"):
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"revival policy must be revive, reap or ask, not {cfg.revival!r}")
        sandbox = self.sandboxes.resolve(cfg.sandbox)
        # runtime-interface: whether a runtime can host an agent (docker cannot yet).
        if sandbox.spec.runtime == "docker":
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              "agents cannot run in docker sandboxes yet (their hooks need "
                              "tether's agent socket inside the container); use a bwrap or "
                              "process sandbox, e.g. the default one")
        cfg = msgspec.structs.replace(cfg, sandbox=sandbox.id)  # its event stream
        ident = self.store.reserve_id("lineage", nbytes=5)
        now = time.time()
        rec = LineageRecord(id=ident, name=name, config=cfg, created_at=now, updated_at=now,
                            request_key=request_key)
        rec = self._commit(self.store.create_lineage(rec))
        return await self._begin_attempt(rec, resume=False)

    async def _begin_attempt(self, rec: LineageRecord, *, resume: bool) -> LineageRecord:
        """Commit the next attempt's intent, then run it."""
        rec = self._commit(self.store.update_lineage(
            rec.id, status=LineageStatus.REVIVING if resume else None,
            attempt=rec.attempt + 1, token=secrets.token_hex(16), revive_at=None,
            event="lineage.attempt" if not resume else None,
            reason=f"reviving (attempt {rec.attempt + 1})" if resume else None))
        if resume:
            self.faults.hit("agent.after_attempt_commit")
        return await self._run_attempt(rec, resume=resume)

    def _context(self, rec: LineageRecord) -> SessionContext:
        state_dir = self.layout.root / "agents" / rec.id
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return SessionContext(
            home=str(self.layout.root), socket=str(self.layout.socket), session=rec.id,
            lineage=rec.id, state_dir=str(state_dir),
            hook_command=(sys.executable, "-m", "tether.cli.main", "--home",
                          str(self.layout.root), "agent", "hook"))

    async def _start_attempt_exec(self, rec: LineageRecord, *, resume: bool) -> ExecRecord:
        cfg = rec.config
        provider = get_provider(cfg.provider)
        ctx = self._context(rec)
        snap_path = snapshot.path_for(self.layout.root, rec.id)
        plan = (provider.resume(cfg.argv, rec.provider_session_id, str(snap_path), ctx)
                if resume else provider.launch(cfg.argv, ctx))
        for path, content in plan.files.items():
            _write_private(Path(ctx.state_dir), path, content)
        sandbox = self.sandboxes.resolve(cfg.sandbox)
        path_env = cfg.env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
        # runtime-interface: whether a runtime confines an agent to a view (bwrap does).
        view = (agent_view(state_dir=self.layout.root / "agents" / rec.id,
                           socket_dir=self.layout.agent_dir, config=cfg, snapshot=snap_path,
                           handoff=(self.layout.root / "drain" / f"{rec.predecessor}.handoff.md"
                                    if rec.predecessor else None),
                           argv0=plan.argv[0], path_env=path_env)
                if sandbox.spec.runtime == "bwrap" else None)
        sock = self.layout.agent_socket if view is not None else self.layout.socket
        env = {**cfg.env, **plan.env,
               "TETHER_HOME": str(self.layout.root), "TETHER_SOCKET": str(sock),
               "TETHER_SESSION": rec.id, "TETHER_TOKEN": rec.token, "TETHER_LINEAGE": rec.id,
               "TETHER_ATTEMPT": str(rec.attempt)}
        if snap_path.exists():
            env["TETHER_DRAIN_SNAPSHOT"] = str(snap_path)
        if rec.predecessor:
            handoff = self.layout.root / "drain" / f"{rec.predecessor}.handoff.md"
            if handoff.exists():
                env["TETHER_HANDOFF"] = str(handoff)
        spec = ExecSpec(argv=plan.argv, env=env, cwd=cfg.cwd, name=rec.name, tty=cfg.tty,
                        stdin=cfg.tty)
        return await self.execs.start(sandbox, spec, f"lineage-{rec.id}-{rec.attempt}",
                                      lineage=rec.id, agent_view=view)

    async def _run_attempt(self, rec: LineageRecord, *, resume: bool) -> LineageRecord:
        """Start attempt ``rec.attempt``; idempotent thanks to its request key."""
        try:
            # Everything that can refuse (its sandbox gone, say) fails the lineage, never
            # the daemon (this also runs inside recovery).
            x = await self._start_attempt_exec(rec, resume=resume)
        except Exception as e:  # TetherError, or the agent broke its state dir (OSError)
            why = e.message if isinstance(e, TetherError) else f"{type(e).__name__}: {e}"
            if not isinstance(e, TetherError):
                log.warning("lineage %s attempt %s: %s", rec.id, rec.attempt, why)
            return self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.FAILED, reason=f"could not start attempt "
                f"{rec.attempt}: {why}"))
        self.touch(rec)
        starts = [*rec.recent_starts, x.started_at or time.time()][-5:]
        rec = self._commit(self.store.update_lineage(
            rec.id, status=LineageStatus.ACTIVE if rec.status != LineageStatus.ACTIVE else None,
            exec_id=x.id, recent_starts=starts,
            reason=f"attempt {rec.attempt} running as exec {x.id}"))
        self._update_worktree(rec, pid=self.execs.pid_of(x.id))
        if x.state in EXEC_TERMINAL:  # it ended before we looked (e.g. instantly)
            self._on_exec_terminal(x)
        return self.store.get_lineage(rec.id) or rec

    # ------------------------------------------------------------------ exec ends
    def _on_exec_terminal(self, x: ExecRecord) -> None:
        if not x.lineage:
            return
        rec = self.store.get_lineage(x.lineage)
        if rec is None or rec.exec_id != x.id or rec.status != LineageStatus.ACTIVE:
            return
        # A hung kill from before a restart is recognised by its recorded reason.
        hung = x.id in self._hung_kills or (x.reason or "").startswith("hung:")
        self._hung_kills.discard(x.id)
        if rec.lifecycle == lc.Lifecycle.DEAD:
            self._finish(rec, "context exhausted (DEAD); the session was reaped")
            return
        if x.state == ExecState.CANCELLED and not hung:
            self._finish(rec, f"stopped: {x.reason or 'cancelled'}")  # `tether kill`
            return
        if x.state == ExecState.FINISHED and x.exit_code == 0:
            self._finish(rec, "the agent exited on its own (code 0)")
            return
        what = ("hung (no heartbeat or output), killed" if hung else
                f"died: {x.reason or x.state}" + (f" (exit {x.exit_code})"
                                                  if x.exit_code is not None else ""))
        self._orphan(rec, what, x)

    def _finish(self, rec: LineageRecord, reason: str) -> None:
        rec = self._commit(self.store.update_lineage(rec.id, status=LineageStatus.FINISHED,
                                                     reason=reason))
        self._update_worktree(rec, step="finished")
        self._forget(rec.id)
        if rec.config.successor == "auto" and rec.lifecycle == lc.Lifecycle.DEAD:
            self._successor_wanted.append(rec.id)
            self.wake.set()

    def _orphan(self, rec: LineageRecord, reason: str, x: ExecRecord | None) -> None:
        rec = self._commit(self.store.update_lineage(rec.id, status=LineageStatus.ORPHANED,
                                                     reason=reason))
        self._apply_policy(rec, x)

    def _apply_policy(self, rec: LineageRecord, x: ExecRecord | None) -> None:
        cfg = rec.config
        if cfg.revival == "reap":
            self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.REAPED, reason="revival policy reap: discarded"))
            self._forget(rec.id)
            return
        if cfg.revival == "ask":
            self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.ASK_PENDING,
                reason="revival policy ask: resolve with `tether lineage resolve "
                       f"{rec.id} --revive|--reap`"))
            return
        if rec.attempt - 1 >= cfg.max_revivals:
            self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.FAILED,
                reason=f"gave up after {cfg.max_revivals} revivals; last: {rec.reason}"))
            self._forget(rec.id)
            return
        if self._crash_looping(rec, x):
            self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.FAILED,
                reason=f"crash loop: the last {CRASH_LOOP_LIMIT} attempts each died within "
                       f"{cfg.crash_loop_seconds:g}s of starting; last: {rec.reason}"))
            self._forget(rec.id)
            return
        due = time.time() + backoff(rec.attempt)
        self._commit(self.store.update_lineage(rec.id, revive_at=due))
        self.wake.set()

    def _crash_looping(self, rec: LineageRecord, x: ExecRecord | None) -> bool:
        if len(rec.recent_starts) < CRASH_LOOP_LIMIT:
            return False
        ends = [e.ended_at or 0.0 for e in self.store.list_execs_of_lineage(rec.id)][
            -CRASH_LOOP_LIMIT:]
        starts = rec.recent_starts[-CRASH_LOOP_LIMIT:]
        return len(ends) == CRASH_LOOP_LIMIT and all(
            0 <= end - start < rec.config.crash_loop_seconds
            for start, end in zip(starts, ends, strict=True))

    def _forget(self, lineage: str) -> None:
        self._heartbeat.pop(lineage, None)
        lock = self._locks.get(lineage)
        if lock is not None and not lock.locked():
            self._locks.pop(lineage, None)
        self._awaiting_user.pop(lineage, None)
        self._hb_class.pop(lineage, None)
        self._messages.pop(lineage, None)

    def _lock(self, lineage: str) -> asyncio.Lock:
        return self._locks.setdefault(lineage, asyncio.Lock())

    async def resolve_ask(self, rec: LineageRecord, action: str) -> LineageRecord:
        async with self._lock(rec.id):
            fresh = self.store.get_lineage(rec.id)  # the caller's copy may be stale
            return await self._resolve_ask(fresh or rec, action)

    async def _resolve_ask(self, rec: LineageRecord, action: str) -> LineageRecord:
        if rec.status != LineageStatus.ASK_PENDING:
            raise TetherError(RpcCode.INVALID_STATE, "INVALID_STATE",
                              f"lineage {rec.id} is {rec.status}, not ASK_PENDING",
                              {"status": rec.status})
        if action == "reap":
            rec = self._commit(self.store.update_lineage(
                rec.id, status=LineageStatus.REAPED, reason="reaped by `lineage resolve`"))
            self._forget(rec.id)
            return rec
        return await self._begin_attempt(rec, resume=True)

    # ------------------------------------------------------------------ recovery & tick
    async def _recover_one(self, rec: LineageRecord, summary: dict[str, int]) -> None:
        if rec.status == LineageStatus.ACTIVE and rec.exec_id is None and rec.attempt:
            # The daemon died between committing this attempt and recording its
            # exec: the request key finds it if it was started; else start it now.
            summary["resumed"] += 1
            x = self.store.exec_by_request_key(f"lineage-{rec.id}-{rec.attempt}")
            if x is None:
                await self._run_attempt(rec, resume=rec.attempt > 1)
                return
            rec = self._commit(self.store.update_lineage(
                rec.id, exec_id=x.id, reason=f"attempt {rec.attempt} adopted as {x.id}"))
        if rec.status == LineageStatus.ACTIVE:
            x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
            if x is not None and x.state == ExecState.RUNNING:
                self.touch(rec)  # a fresh grace period for its heartbeat
                summary["running"] += 1
            elif x is not None and x.state == ExecState.PENDING:
                summary["running"] += 1
            else:
                summary["orphaned"] += 1
                if x is not None:
                    self._on_exec_terminal(x)
                else:
                    self._orphan(rec, "no process after a daemon restart", None)
        elif rec.status == LineageStatus.REVIVING:
            summary["resumed"] += 1  # an interrupted revival: same attempt, same key
            await self._run_attempt(rec, resume=True)
        elif rec.status == LineageStatus.ORPHANED and rec.revive_at is None:
            self._apply_policy(rec, None)

    async def recover(self) -> dict[str, int]:
        """After exec recovery: every live lineage without a live process is ORPHANED."""
        summary = {"running": 0, "orphaned": 0, "resumed": 0}
        for rec in self.store.list_lineages(tuple(LINEAGE_LIVE)):
            try:
                await self._recover_one(rec, summary)
            except Exception:  # one broken lineage must not keep the daemon from starting
                log.exception("recovering lineage %s failed", rec.id)
        # A successor that was due when the daemon died.
        lineages = self.store.list_lineages()
        has_successor = {r.predecessor for r in lineages if r.predecessor}
        for rec in lineages:
            if (rec.status == LineageStatus.FINISHED and rec.lifecycle == lc.Lifecycle.DEAD
                    and rec.config.successor == "auto" and rec.id not in has_successor):
                self._successor_wanted.append(rec.id)
        return summary

    async def tick_loop(self) -> None:
        while True:
            self.wake.clear()  # before the tick: a wake-up during it is not lost
            due: float | None = None
            try:
                due = await self.tick()
            except Exception:
                log.exception("agent tick failed")
            wait = self.tick_interval * (1 + random.uniform(-0.2, 0.2))  # jittered
            if due is not None:  # a revival is due sooner than the next tick
                wait = min(wait, max(0.0, due - time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), wait)

    async def tick(self) -> float | None:
        """One pass; returns when the next pending revival is due, if any."""
        now = time.time()
        next_due: float | None = None
        while self._successor_wanted:
            await self._start_successor(self._successor_wanted.pop(0))
        for rec in self.store.list_lineages(tuple(LINEAGE_LIVE)):
            if rec.status == LineageStatus.ORPHANED and rec.revive_at is not None:
                if rec.revive_at <= now:
                    async with self._lock(rec.id):
                        fresh = self.store.get_lineage(rec.id)
                        if fresh is not None and fresh.status == LineageStatus.ORPHANED:
                            await self._begin_attempt(fresh, resume=True)
                else:
                    next_due = min(next_due or rec.revive_at, rec.revive_at)
            elif rec.status == LineageStatus.ACTIVE and rec.exec_id:
                await self._check_heartbeat(rec, now)
        return next_due

    async def _check_heartbeat(self, rec: LineageRecord, now: float) -> None:
        th = lc.HeartbeatThresholds(rec.config.stale_after, rec.config.crashed_after)
        age = now - self._last_sign_of_life(rec)
        cls = lc.classify_heartbeat(age, th)
        if cls != self._hb_class.get(rec.id, lc.HeartbeatClass.ACTIVE):
            self.bus.publish(self.store.append_event(
                rec.config.sandbox, "agent.heartbeat", exec_id=rec.exec_id, state=str(cls),
                reason=f"last sign of life {age:.0f}s ago",
                data={"lineage": rec.id, "age": round(age, 1)}))
        self._hb_class[rec.id] = cls
        if now - self._wt_written.get(rec.id, 0.0) >= WORKTREE_HEARTBEAT_EVERY:
            self._write_worktree_heartbeat(rec, now)
        if cls != lc.HeartbeatClass.CRASHED:
            return
        waiting = self._awaiting_user.get(rec.id)
        if waiting is not None and self._last_sign_of_life(rec) <= waiting + 1.0:
            return  # an interactive agent idle at its prompt after a turn is not hung
        x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
        if x is None:
            return
        if x.state == ExecState.RUNNING and x.id not in self._hung_kills:
            # Alive but silent: hung. Kill it; its end applies the revival policy.
            self._hung_kills.add(x.id)
            await self.execs.cancel(x, signal.SIGTERM, 5.0,
                                    f"hung: no heartbeat or output for {age:.0f}s")
        elif x.state in EXEC_TERMINAL:
            self._on_exec_terminal(x)  # dead: reap

    async def _start_successor(self, lineage: str) -> None:
        prev = self.store.get_lineage(lineage)
        if prev is None:
            return
        handoff = self.layout.root / "drain" / f"{prev.id}.handoff.md"
        handoff.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handoff.write_text(prev.handoff or "")
        ident = self.store.reserve_id("lineage", nbytes=5)
        now = time.time()
        rec = LineageRecord(id=ident, name=None, config=prev.config, created_at=now,
                            updated_at=now, predecessor=prev.id)
        rec = self._commit(self.store.create_lineage(rec))
        await self._begin_attempt(rec, resume=False)

    def reap(self) -> dict[str, int]:
        """Sweep without signalling: settle dead sessions, drop stale heartbeat files."""
        swept = removed = 0
        for rec in self.store.list_lineages((LineageStatus.ACTIVE,)):
            x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
            if x is None or x.state in EXEC_TERMINAL:
                swept += 1
                if x is not None:
                    self._on_exec_terminal(x)
                else:
                    self._orphan(rec, "reap: no process", None)
        for rec in self.store.list_lineages():
            if rec.status not in LINEAGE_LIVE and rec.config.worktree:
                removed += int(self._remove_worktree_heartbeat(rec))
        return {"swept": swept, "heartbeat_files_removed": removed}

    # ------------------------------------------------------------------ agent protocol
    async def turn(self, rec: LineageRecord, *, context_pct: float | None,
                   usage: dict[str, int] | None, model: str | None,
                   messages: list[dict[str, Any]], config: dict[str, Any] | None = None,
                   ) -> dict[str, Any]:
        """A completed turn: lifecycle, snapshot (durable), counters, reply. Turns of one
        lineage are serialized (the hook program and the SDK may both report)."""
        async with self._lock(rec.id):
            fresh = self.store.get_lineage(rec.id)
            return await self._turn(fresh or rec, context_pct=context_pct, usage=usage,
                                    model=model, messages=messages, config=config)

    async def _turn(self, rec: LineageRecord, *, context_pct: float | None,
                    usage: dict[str, int] | None, model: str | None,
                    messages: list[dict[str, Any]], config: dict[str, Any] | None = None,
                    ) -> dict[str, Any]:
        self.touch(rec)
        th = lc.Thresholds(rec.config.aging_pct, rec.config.dying_pct)
        before = rec.lifecycle
        after = lc.on_turn_end(before, context_pct, th)
        total = dict(rec.usage)
        for k, v in (usage or {}).items():
            total[k] = total.get(k, 0) + int(v)
        # A new list, cached only once the snapshot is durable: a failed write followed
        # by the agent's retry must not record the turn's messages twice.
        convo = [*self._conversation(rec), *messages]
        turn_no = rec.turns + 1
        snap = snapshot.build(
            lineage=rec.id, instance=self.instance, provider=rec.config.provider,
            model=model or rec.model, usage=total, messages=convo, turn=turn_no,
            provider_session_id=rec.provider_session_id,
            loop_config={"argv": rec.config.argv, "revival": rec.config.revival,
                         "max_revivals": rec.config.max_revivals,
                         "thresholds": {"aging_pct": th.aging_pct, "dying_pct": th.dying_pct},
                         "tty": rec.config.tty, **(config or {})})
        await asyncio.get_running_loop().run_in_executor(
            None, snapshot.write, self.layout.root, snap)
        self._messages[rec.id] = convo
        rec = self._commit(self.store.update_lineage(
            rec.id, event="agent.turn", turns=turn_no, lifecycle=str(after),
            context_pct=context_pct if context_pct is not None else rec.context_pct,
            model=model or rec.model, usage=total, last_turn_at=time.time(),
            reason=f"turn {turn_no}" + (f" at {context_pct:.0f}% context"
                                        if context_pct is not None else ""),
            data={"turn": turn_no, "context_pct": context_pct}))
        if after != before:
            self._lifecycle_event(rec, before, after, "turn report")
        if rec.config.tty:
            self._awaiting_user[rec.id] = time.time()
        self._update_worktree(rec)
        if after == lc.Lifecycle.DEAD and rec.exec_id and self.execs.tasks is not None:
            # Reap after the reply has reached the agent, not before.
            self.execs.tasks.create_task(self._reap_dead(rec.exec_id))
        return {"lineage": rec.id, "turn": turn_no, "lifecycle": rec.lifecycle,
                "context_pct": rec.context_pct, "instructions": lc.turn_instructions(after),
                "snapshot": str(snapshot.path_for(self.layout.root, rec.id))}

    async def _reap_dead(self, exec_id: str) -> None:
        try:
            await asyncio.sleep(REAP_DELAY)
            x = self.store.get_exec(exec_id)
            if x is not None and x.state not in EXEC_TERMINAL:
                await self.execs.cancel(x, signal.SIGTERM, 5.0,
                                        "DEAD: context exhausted; reaping the session")
        except Exception:  # never into the daemon's TaskGroup
            log.exception("reaping DEAD exec %s failed", exec_id)

    def _conversation(self, rec: LineageRecord) -> list[dict[str, Any]]:
        convo = self._messages.get(rec.id)
        if convo is None:
            try:
                convo = list(snapshot.read(snapshot.path_for(self.layout.root, rec.id))
                             ["messages"])
            except (FileNotFoundError, snapshot.SnapshotError):
                convo = []
            self._messages[rec.id] = convo
        return convo

    def _lifecycle_event(self, rec: LineageRecord, before: str, after: str, why: str) -> None:
        self.bus.publish(self.store.append_event(
            rec.config.sandbox, "agent.lifecycle", exec_id=rec.exec_id, state=after,
            reason=f"{before} -> {after} ({why})",
            data={"lineage": rec.id, "from": before, "context_pct": rec.context_pct}))

    def authorize_tool(self, rec: LineageRecord, tool: str) -> dict[str, Any]:
        self.touch(rec)
        self._tool_calls[rec.id] = self._tool_calls.get(rec.id, 0) + 1
        decision = lc.authorize_tool(rec.lifecycle)
        if decision.next_state != rec.lifecycle:
            before = rec.lifecycle
            rec = self._commit(self.store.update_lineage(
                rec.id, lifecycle=str(decision.next_state)))
            self._lifecycle_event(rec, before, rec.lifecycle, f"finalization call: {tool}")
        if not decision.allowed:
            self.bus.publish(self.store.append_event(
                rec.config.sandbox, "agent.fenced", exec_id=rec.exec_id, state=rec.lifecycle,
                reason=decision.reason, data={"lineage": rec.id, "tool": tool}))
        return {"allowed": decision.allowed, "reason": decision.reason,
                "lifecycle": rec.lifecycle}

    def heartbeat(self, rec: LineageRecord) -> dict[str, Any]:
        self.touch(rec)  # it just spoke, so it is ACTIVE: no need to look further
        return {"lifecycle": rec.lifecycle, "heartbeat": str(lc.HeartbeatClass.ACTIVE)}

    def handoff(self, rec: LineageRecord, text: str) -> dict[str, Any]:
        self.touch(rec)
        path = self.layout.root / "drain" / f"{rec.id}.handoff.md"
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        from tether.hostio.atomic import atomic_write

        atomic_write(str(path), text.encode(), durable=True)
        self._commit(self.store.update_lineage(rec.id, handoff=text, event="agent.handoff",
                                               reason=f"handoff of {len(text)} characters"))
        return {"ok": True, "path": str(path)}

    async def hook(self, rec: LineageRecord, provider_name: str, event: str,
                   payload: dict[str, Any]) -> dict[str, Any]:
        """A provider's hook program calling back: translate, act, answer in its format."""
        provider = get_provider(provider_name)
        # In a thread: a turn-end hook reads the transcript file, which may be large.
        ev: HookEvent = await asyncio.to_thread(provider.parse_hook, event, payload)
        self.touch(rec, activity=ev.kind not in ("other", "turn_end"))
        allowed, reason = True, "ok"
        if ev.kind == "session_start" and ev.provider_session_id:
            rec = self._commit(self.store.update_lineage(
                rec.id, provider_session_id=ev.provider_session_id, event="agent.session",
                reason=f"{provider_name} session {ev.provider_session_id}"))
            self._update_worktree(rec)
        elif ev.kind == "turn_end":
            u: Usage | None = ev.usage
            usage = None if u is None else {
                "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_creation_tokens": u.cache_creation_tokens}
            if ev.provider_session_id and ev.provider_session_id != rec.provider_session_id:
                rec = self._commit(self.store.update_lineage(
                    rec.id, provider_session_id=ev.provider_session_id))
            await self.turn(rec, context_pct=u.context_pct if u else None, usage=usage,
                            model=ev.model, messages=ev.messages)
        elif ev.kind == "tool_request":
            decision = self.authorize_tool(rec, ev.tool_name or "?")
            allowed, reason = decision["allowed"], decision["reason"]
        reply = provider.reply(ev, allowed, reason)
        return {"kind": ev.kind, "allowed": allowed, "reason": reason,
                "stdout": reply.stdout, "exit_code": reply.exit_code}

    # ------------------------------------------------------------------ worktree files
    def _update_worktree(self, rec: LineageRecord, *, pid: int | None = None,
                         step: str | None = None) -> None:
        if not rec.config.worktree:
            return

        def change(st: wt.WorktreeState) -> wt.WorktreeState:
            st.provider_name = rec.config.provider
            st.provider_session_id = rec.provider_session_id or st.provider_session_id
            st.session_id = rec.id
            st.current_step = step or rec.lifecycle
            st.attempt_count = rec.attempt
            st.last_heartbeat = int(self._heartbeat.get(rec.id, time.time()) * 1000)
            st.status = rec.status
            st.recovery_attempts = max(0, rec.attempt - 1)
            st.tether_lineage = rec.id
            st.tether_home = str(self.layout.root)
            if not st.started_at:
                st.started_at = int(rec.created_at * 1000)
            if pid:
                st.pid = pid
            return st

        try:
            wt.update(rec.config.worktree, change, lock_timeout=WORKTREE_LOCK_TIMEOUT)
        except Exception as e:  # a broken worktree must not break the agent
            log.warning("cannot update %s/.agent/state.json: %s", rec.config.worktree, e)

    def _write_worktree_heartbeat(self, rec: LineageRecord, now: float) -> None:
        self._wt_written[rec.id] = now
        if not rec.config.worktree:
            return
        pid = self.execs.pid_of(rec.exec_id) if rec.exec_id else None
        x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
        try:
            wt.write_heartbeat(rec.config.worktree, wt.HeartbeatState(
                timestamp=int(now * 1000), pid=pid or 0,
                memory_usage_mb=_rss_mb(pid) if pid else 0.0,
                uptime=round(now - (x.started_at or now), 1) if x else 0.0,
                last_activity_type="thinking" if rec.last_turn_at else "idle",
                last_activity_timestamp=int(self._heartbeat.get(rec.id, now) * 1000),
                tool_calls_count=self._tool_calls.get(rec.id, 0),
                current_operation=rec.lifecycle))
        except Exception as e:
            log.warning("cannot write %s/.agent/heartbeat.json: %s", rec.config.worktree, e)

    def _remove_worktree_heartbeat(self, rec: LineageRecord) -> bool:
        try:
            return bool(wt.remove_heartbeat(rec.config.worktree or ""))
        except Exception:
            return False


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0
