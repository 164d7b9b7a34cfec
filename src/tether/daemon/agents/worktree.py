"""A lineage's files in its worktree (``.agent/state.json`` and ``heartbeat.json``,
``tether.agent.worktree``): best effort, since a broken worktree must not break the agent."""

from __future__ import annotations

import logging
import time

from tether.agent import worktree as wt
from tether.daemon.agents.core import AgentCore
from tether.model.records import LineageRecord
from tether.model.states import LineageStatus

log = logging.getLogger("tether.agents")

# The daemon waits at most this long for a worktree's state.json lock (held by some other
# process, perhaps the agent's): it skips that update rather than freeze its event loop.
WORKTREE_LOCK_TIMEOUT = 0.2

# A lineage status as agentfactory's ``WorktreeStatus`` (its TS reader's union) says it. A
# crashed agent awaiting revival or a decision stays "running", as agentfactory's own file
# would after a crash: its stale heartbeat, not the status, tells a reader it is dead.
TS_STATUS: dict[str, str] = {
    LineageStatus.ACTIVE: "running", LineageStatus.ORPHANED: "running",
    LineageStatus.ASK_PENDING: "running", LineageStatus.REVIVING: "initializing",
    LineageStatus.FINISHED: "completed", LineageStatus.REAPED: "stopped",
    LineageStatus.FAILED: "failed",
    # agentfactory has no waiting state; like ORPHANED, it is alive and will run again.
    LineageStatus.WAITING_LIMIT: "running",
}


class WorktreeFiles:
    def __init__(self, core: AgentCore) -> None:
        self.core = core

    def update(self, rec: LineageRecord, *, pid: int | None = None,
               step: str | None = None) -> None:
        if not rec.config.worktree:
            return
        heartbeat, root = self.core.heartbeat, self.core.layout.root

        def change(st: wt.WorktreeState) -> wt.WorktreeState:
            st.provider_name = rec.config.provider
            st.provider_session_id = rec.provider_session_id or st.provider_session_id
            st.session_id = rec.id
            st.current_step = step or rec.lifecycle
            st.attempt_count = rec.attempt
            st.last_heartbeat = int(heartbeat.get(rec.id, time.time()) * 1000)
            st.status = TS_STATUS.get(rec.status, "running")
            st.recovery_attempts = max(0, rec.attempt - 1)
            st.tether_lineage = rec.id
            st.tether_home = str(root)
            if not st.started_at:
                st.started_at = int(rec.created_at * 1000)
            if pid:
                st.pid = pid
            return st

        try:
            wt.update(rec.config.worktree, change, lock_timeout=WORKTREE_LOCK_TIMEOUT)
        except Exception as e:  # a broken worktree must not break the agent
            log.warning("cannot update %s/.agent/state.json: %s", rec.config.worktree, e)

    def write_heartbeat(self, rec: LineageRecord, now: float) -> None:
        core = self.core
        core.wt_written[rec.id] = now
        if not rec.config.worktree:
            return
        pid = core.execs.pid_of(rec.exec_id) if rec.exec_id else None
        x = core.store.get_exec(rec.exec_id) if rec.exec_id else None
        try:
            wt.write_heartbeat(rec.config.worktree, wt.HeartbeatState(
                timestamp=int(now * 1000), pid=pid or 0,
                memory_usage_mb=_rss_mb(pid) if pid else 0.0,
                uptime=round(now - (x.started_at or now), 1) if x else 0.0,
                last_activity_type="idle" if rec.waiting_since is not None else "thinking",
                last_activity_timestamp=int(core.heartbeat.get(rec.id, now) * 1000),
                tool_calls_count=core.tool_calls.get(rec.id, 0),
                current_operation=rec.lifecycle))
        except Exception as e:
            log.warning("cannot write %s/.agent/heartbeat.json: %s", rec.config.worktree, e)

    def remove_heartbeat(self, rec: LineageRecord) -> bool:
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
