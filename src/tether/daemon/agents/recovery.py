"""Recovery after a daemon restart, run after the exec and sandbox recovery: every
live lineage without a live process is ORPHANED, an interrupted attempt is started
again with the same request key (or, if its exec never started, the next one), and a
successor that was due is due again."""

from __future__ import annotations

import logging

from tether.agent import lifecycle as lc
from tether.daemon.agents.attempts import Attempts, attempt_key
from tether.daemon.agents.core import AgentCore
from tether.model.records import LineageRecord
from tether.model.states import LINEAGE_LIVE, ExecState, LineageStatus

log = logging.getLogger("tether.agents")


async def recover(core: AgentCore, attempts: Attempts) -> dict[str, int]:
    summary = {"running": 0, "orphaned": 0, "resumed": 0}
    for rec in core.store.list_lineages(tuple(LINEAGE_LIVE)):
        try:
            async with core.lock(rec.id):  # a restart spawned meanwhile waits
                await _recover_one(core, attempts, rec, summary)
        except Exception:  # one broken lineage must not keep the daemon from starting
            log.exception("recovering lineage %s failed", rec.id)
    # A successor that was due when the daemon died.
    lineages = core.store.list_lineages()
    has_successor = {r.predecessor for r in lineages if r.predecessor}
    for rec in lineages:
        if (rec.status == LineageStatus.FINISHED and rec.lifecycle == lc.Lifecycle.DEAD
                and rec.config.successor == "auto" and rec.id not in has_successor):
            core.successor_wanted.append(rec.id)
    return summary


async def _recover_one(core: AgentCore, attempts: Attempts, rec: LineageRecord,
                       summary: dict[str, int]) -> None:
    if rec.status == LineageStatus.ACTIVE and rec.exec_id is None and rec.attempt:
        # The daemon died between committing this attempt and recording its
        # exec: the request key finds it if it was started; else start it now.
        x = core.store.exec_by_request_key(attempt_key(rec))
        if x is None:
            summary["resumed"] += 1
            await attempts.run(rec, resume=rec.attempt > 1)
            return
        rec = core.commit(core.store.update_lineage(
            rec.id, exec_id=x.id, reason=f"attempt {rec.attempt} adopted as {x.id}"))
    if rec.status == LineageStatus.ACTIVE:
        x = core.store.get_exec(rec.exec_id) if rec.exec_id else None
        if x is not None and x.state == ExecState.RUNNING:
            core.touch(rec)  # a fresh grace period for its heartbeat
            summary["running"] += 1
        elif x is not None and x.state == ExecState.PENDING:
            summary["running"] += 1
        elif x is not None and x.never_started:  # not a death: the same attempt again
            summary["resumed"] += 1
            rec = attempts.restart(rec, x)
            if rec.status == LineageStatus.REVIVING:
                await attempts.run(rec, resume=rec.attempt > 1)
        else:
            summary["orphaned"] += 1
            if x is not None:
                attempts.on_exec_terminal(x)
            else:
                attempts.orphan(rec, "no process after a daemon restart", None)
    elif rec.status == LineageStatus.REVIVING and core.may_revive(rec):
        # An interrupted revival or restart: same attempt, same key. (A restarted first
        # attempt is launched, not resumed.)
        summary["resumed"] += 1
        await attempts.run(rec, resume=rec.attempt > 1)
    elif rec.status == LineageStatus.ORPHANED and rec.revive_at is None:
        attempts.apply_policy(rec, None)
