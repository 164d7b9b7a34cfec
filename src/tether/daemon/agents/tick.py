"""The ``agent-tick`` task: successors, due revivals, heartbeat classes,
``heartbeat.json`` and hung kills, every ``$TETHER_AGENT_TICK`` seconds (jittered)
or at once when ``core.wake`` is set."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time

from tether.agent import lifecycle as lc
from tether.daemon.agents.attempts import Attempts
from tether.daemon.agents.core import AgentCore
from tether.daemon.agents.turns import OutputTurns
from tether.daemon.agents.worktree import WorktreeFiles
from tether.model.records import LineageRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE, ExecState, LineageStatus

log = logging.getLogger("tether.agents")

WORKTREE_HEARTBEAT_EVERY = 10.0


class Tick:
    def __init__(self, core: AgentCore, attempts: Attempts, worktree: WorktreeFiles,
                 interval: float, turns: OutputTurns) -> None:
        self.core = core
        self.turns = turns
        self.attempts = attempts
        self.worktree = worktree
        self.interval = interval

    async def loop(self) -> None:
        wake = self.core.wake
        while True:
            wake.clear()  # before the tick: a wake-up during it is not lost
            due: float | None = None
            try:
                due = await self.tick()
            except Exception:
                log.exception("agent tick failed")
            wait = self.interval * (1 + random.uniform(-0.2, 0.2))  # jittered
            if due is not None:  # a revival is due sooner than the next tick
                wait = min(wait, max(0.0, due - time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), wait)

    async def tick(self) -> float | None:
        """One pass; returns when the next pending revival is due, if any."""
        core = self.core
        now = time.time()
        next_due: float | None = None
        while core.successor_wanted:
            await self.attempts.start_successor(core.successor_wanted.pop(0))
        for rec in core.store.list_lineages(tuple(LINEAGE_LIVE)):
            if rec.status == LineageStatus.WAITING_LIMIT:
                # The reset time is on the daemon's clock (a test may move it); the
                # wait until then is in real seconds.
                left = (rec.revive_at or 0.0) - core.clock.now()
                if left <= 0:
                    await self.attempts.revive_due(rec.id)
                else:
                    next_due = min(next_due or now + left, now + left)
            elif rec.status == LineageStatus.ORPHANED and rec.revive_at is not None:
                if rec.revive_at <= now:
                    if core.may_revive(rec):
                        await self.attempts.revive_due(rec.id)
                else:
                    next_due = min(next_due or rec.revive_at, rec.revive_at)
            elif rec.status == LineageStatus.ACTIVE and rec.exec_id:
                await self.turns.check(rec, now)
                await self._check_heartbeat(rec, now)
        return next_due

    async def _check_heartbeat(self, rec: LineageRecord, now: float) -> None:
        core = self.core
        th = lc.HeartbeatThresholds(rec.config.stale_after, rec.config.crashed_after)
        age = now - core.last_sign_of_life(rec)
        # Between turns an interactive agent waits for its user: a state the provider
        # reported (waiting_since), not inferred from silence; no hang detection then.
        cls = (lc.HeartbeatClass.IDLE if rec.waiting_since is not None
               else lc.classify_heartbeat(age, th))
        if cls != core.hb_class.get(rec.id, lc.HeartbeatClass.ACTIVE):
            reason = (f"waiting for its user since its turn ended "
                      f"{now - (rec.waiting_since or now):.0f}s ago"
                      if cls == lc.HeartbeatClass.IDLE else
                      f"last sign of life {age:.0f}s ago")
            core.journal.record(
                rec.config.sandbox, "agent.heartbeat", exec_id=rec.exec_id, state=str(cls),
                reason=reason, data={"lineage": rec.id, "age": round(age, 1)})
        core.hb_class[rec.id] = cls
        if now - core.wt_written.get(rec.id, 0.0) >= WORKTREE_HEARTBEAT_EVERY:
            self.worktree.write_heartbeat(rec, now)
        if cls != lc.HeartbeatClass.CRASHED:
            return
        x = core.store.get_exec(rec.exec_id) if rec.exec_id else None
        if x is None:
            return
        if x.state == ExecState.RUNNING and x.id not in core.hung_kills:
            # Alive but silent: hung. Kill it; its end applies the revival policy.
            core.hung_kills.add(x.id)
            await core.execs.cancel(x, signal.SIGTERM, 5.0,
                                    f"hung: no heartbeat or output for {age:.0f}s")
        elif x.state in EXEC_TERMINAL:
            self.attempts.on_exec_terminal(x)  # dead: reap
