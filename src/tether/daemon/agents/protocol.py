"""The agent protocol: what a session says about itself (``agent.*``).

Turns (lifecycle, durable snapshot, counters), heartbeats, tool fencing, the
handoff, and provider hooks translated into those. Every call is a sign of life.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import os
import secrets
import signal
import time
from typing import TYPE_CHECKING, Any

from tether.agent import lifecycle as lc
from tether.agent import snapshot
from tether.agent.confinement import AGENT_CONFIG_PATHS
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import AGENT_FILES, AgentFiles, HookEvent, Usage
from tether.cost import limits
from tether.cost.prices import PriceTable
from tether.cost.prices import load as load_prices
from tether.daemon.agents.core import AgentCore, token_digest
from tether.daemon.agents.worktree import WorktreeFiles
from tether.hostio.atomic import atomic_write
from tether.model.errors import RpcCode, TetherError
from tether.model.records import LineageRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE

if TYPE_CHECKING:
    from tether.daemon.cost import CostService

log = logging.getLogger("tether.agents")

REAP_DELAY = 1.0  # seconds between a DEAD turn's reply and SIGTERM to the agent



def _token_matches(rec: LineageRecord, token: str) -> bool:
    """Only the lineage's current attempt's token: one lineage's token, even when read
    from another agent's environment, never speaks for another lineage or attempt."""
    if not token:
        return False
    if rec.token_sha256:
        return secrets.compare_digest(rec.token_sha256, token_digest(token))
    return bool(rec.token) and secrets.compare_digest(rec.token, token)  # an older row

@functools.cache
def _shipped_prices() -> PriceTable:
    """The shipped price table, for an agent service without a cost service (tests)."""
    return load_prices(None)


def _counts(usage: dict[str, int]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(usage.items())) or "nothing"


class Protocol:
    def __init__(self, core: AgentCore, worktree: WorktreeFiles) -> None:
        self.core = core
        self.worktree = worktree
        self._refused_paths: set[str] = set()  # lineages whose refused path was journaled
        #: Budgets, checked at every turn's end and tool call (set by the composition
        #: root; None: no cost accounting, as in a bare AgentService).
        self.budget: CostService | None = None

    def authenticate(self, session: str, token: str) -> LineageRecord:
        """A session may only speak for itself, with the current attempt's token."""
        rec = self.core.store.get_lineage(session)
        if rec is None or not _token_matches(rec, token):
            raise TetherError(RpcCode.INVALID_PARAMS, "BAD_TOKEN",
                              "unknown session or wrong token (TETHER_SESSION/TETHER_TOKEN); "
                              "a revived session gets a new token", {"session": session})
        if rec.status not in LINEAGE_LIVE:
            raise TetherError(RpcCode.INVALID_STATE, "LINEAGE_ENDED",
                              f"lineage {rec.id} is {rec.status}; this session is over",
                              {"session": session, "status": rec.status})
        return rec

    # ------------------------------------------------------------------ turns
    async def turn(self, rec: LineageRecord, *, context_pct: float | None,
                   usage: dict[str, int] | None, model: str | None,
                   messages: list[dict[str, Any]], config: dict[str, Any] | None = None,
                   ) -> dict[str, Any]:
        """A completed turn: lifecycle, snapshot (durable), counters, reply. Turns of one
        lineage are serialized (the hook program and the SDK may both report)."""
        async with self.core.lock(rec.id):
            fresh = self.core.store.get_lineage(rec.id)
            return await self._turn(fresh or rec, context_pct=context_pct, usage=usage,
                                    model=model, messages=messages, config=config)

    async def _turn(self, rec: LineageRecord, *, context_pct: float | None,
                    usage: dict[str, int] | None, model: str | None,
                    messages: list[dict[str, Any]], config: dict[str, Any] | None = None,
                    ) -> dict[str, Any]:
        core = self.core
        core.touch(rec)
        th = lc.Thresholds(rec.config.aging_pct, rec.config.dying_pct)
        before = rec.lifecycle
        after = lc.on_turn_end(before, context_pct, th)
        usage, capped = self._bounded(rec, model or rec.model, dict(usage or {}))
        total = dict(rec.usage)
        for k, v in usage.items():
            total[k] = total.get(k, 0) + int(v)
        turn_no = rec.turns + 1
        # Only the header: the conversation stays on disk (a rewrite reads it back there,
        # in the worker thread), so no turn, however large, is held here after its reply.
        snap = snapshot.build(
            lineage=rec.id, instance=core.instance, provider=rec.config.provider,
            model=model or rec.model, usage=total, messages=[], turn=turn_no,
            provider_session_id=rec.provider_session_id,
            loop_config={"argv": rec.config.argv, "revival": rec.config.revival,
                         "max_revivals": rec.config.max_revivals,
                         "thresholds": {"aging_pct": th.aging_pct, "dying_pct": th.dying_pct},
                         "tty": rec.config.tty, **(config or {})})
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(snapshot.record_turn, core.layout.root, snap, messages,
                                    verify=rec.id not in core.verified))
        core.verified.add(rec.id)
        now = time.time()
        once: dict[str, Any] = {}
        if capped is not None and rec.usage_capped_attempt != rec.attempt:
            # Before the turn's commit: at least once per attempt, whatever crashes.
            self._refused_usage(rec, capped)
            once["usage_capped_attempt"] = rec.attempt
        rec = core.commit(core.store.update_lineage(
            rec.id, event="agent.turn", turns=turn_no, lifecycle=str(after),
            context_pct=context_pct if context_pct is not None else rec.context_pct,
            model=model or rec.model, usage=total, last_turn_at=now, conversation=True,
            # An interactive agent now waits for its user (until the next turn starts).
            waiting_since=(rec.waiting_since or now) if rec.config.tty else None,
            reason=f"turn {turn_no}" + (f" at {context_pct:.0f}% context"
                                        if context_pct is not None else ""),
            data={"turn": turn_no, "context_pct": context_pct, "usage": dict(usage),
                  "model": model or rec.model, "lineage": rec.id,
                  **({"capped": capped} if capped is not None else {})}, **once))
        reached = (self.budget.enforce(rec, (model or rec.model, dict(usage)))
                   if self.budget else [])
        if after != before:
            self._lifecycle_event(rec, before, after, "turn report")
        if rec.config.tty:
            core.waiting(rec, "idle", f"turn {turn_no} done; the agent waits at its prompt",
                         turn=turn_no)
        self.worktree.update(rec)
        if after == lc.Lifecycle.DEAD and rec.exec_id and core.tasks.open:
            # Reap after the reply has reached the agent, not before.
            core.tasks.spawn(self._reap_dead(rec.exec_id), name=f"reap-{rec.exec_id}")
        return {"lineage": rec.id, "turn": turn_no, "lifecycle": rec.lifecycle,
                "context_pct": rec.context_pct, "instructions": lc.turn_instructions(after),
                "snapshot": str(snapshot.path_for(core.layout.root, rec.id)),
                "budget": [{"scope": o.scope, "policy": o.policy, "reason": o.reason}
                           for o in reached]}

    def _bounded(self, rec: LineageRecord, model: str | None, usage: dict[str, int],
                 ) -> tuple[dict[str, int], dict[str, Any] | None]:
        """The turn's usage as a model could have produced it since the lineage's
        previous turn (``tether.cost.limits``), and what was cut (None: nothing)."""
        if not usage:
            return usage, None
        table = self.budget.table() if self.budget is not None else _shipped_prices()
        window, max_output = table.limits(model, datetime.date.today())
        since = max(rec.last_turn_at or 0.0, rec.created_at)
        b = limits.bound(usage, window=window, max_output=max_output,
                         elapsed=time.time() - since)
        if not b.capped:
            return b.usage, None
        return b.usage, {"reported": usage, "kept": b.usage, "model": model,
                         "calls": b.calls, "input_limit": b.input_limit,
                         "output_limit": b.output_limit}

    def _refused_usage(self, rec: LineageRecord, capped: dict[str, Any]) -> None:
        self.core.journal.record(
            rec.config.sandbox, "agent.refused", exec_id=rec.exec_id, state="usage",
            reason=f"lineage {rec.id} reported usage no model could have produced: "
                   f"{_counts(capped['reported'])} for {capped['model'] or 'an unknown model'}"
                   f" in at most {capped['calls']} request(s) since its previous turn; "
                   f"counted as {_counts(capped['kept'])} (journaled once per attempt; "
                   "each turn's agent.turn event keeps what was reported)",
            data={"lineage": rec.id, "what": "usage", "attempt": rec.attempt, **capped})

    async def _reap_dead(self, exec_id: str) -> None:
        try:
            await asyncio.sleep(REAP_DELAY)
            x = self.core.store.get_exec(exec_id)
            if x is not None and x.state not in EXEC_TERMINAL:
                await self.core.execs.cancel(x, signal.SIGTERM, 5.0,
                                             "DEAD: context exhausted; reaping the session")
        except Exception:  # never into the daemon's TaskGroup
            log.exception("reaping DEAD exec %s failed", exec_id)

    def _lifecycle_event(self, rec: LineageRecord, before: str, after: str, why: str) -> None:
        self.core.journal.record(
            rec.config.sandbox, "agent.lifecycle", exec_id=rec.exec_id, state=after,
            reason=f"{before} -> {after} ({why})",
            data={"lineage": rec.id, "from": before, "context_pct": rec.context_pct})

    # ------------------------------------------------------------------ the rest
    def authorize_tool(self, rec: LineageRecord, tool: str) -> dict[str, Any]:
        core = self.core
        core.touch(rec)
        rec = core.turn_started(rec, f"tool call: {tool}")  # a tool call is work
        core.tool_calls[rec.id] = core.tool_calls.get(rec.id, 0) + 1
        reached = self.budget.enforce(rec) if self.budget else []
        if reached:  # pause or stop: no more work on this budget's money
            reason = "budget: " + "; ".join(o.reason for o in reached)
            core.journal.record(
                rec.config.sandbox, "agent.fenced", exec_id=rec.exec_id, state=rec.lifecycle,
                reason=reason, data={"lineage": rec.id, "tool": tool, "budget": True})
            return {"allowed": False, "reason": reason, "lifecycle": rec.lifecycle}
        decision = lc.authorize_tool(rec.lifecycle)
        if decision.next_state != rec.lifecycle:
            before = rec.lifecycle
            rec = core.commit(core.store.update_lineage(
                rec.id, lifecycle=str(decision.next_state)))
            self._lifecycle_event(rec, before, rec.lifecycle, f"finalization call: {tool}")
        if not decision.allowed:
            core.journal.record(
                rec.config.sandbox, "agent.fenced", exec_id=rec.exec_id, state=rec.lifecycle,
                reason=decision.reason, data={"lineage": rec.id, "tool": tool})
        return {"allowed": decision.allowed, "reason": decision.reason,
                "lifecycle": rec.lifecycle}

    def heartbeat(self, rec: LineageRecord) -> dict[str, Any]:
        self.core.touch(rec)  # it just spoke, so it is ACTIVE: no need to look further
        return {"lifecycle": rec.lifecycle, "heartbeat": str(lc.HeartbeatClass.ACTIVE)}

    def handoff(self, rec: LineageRecord, text: str) -> dict[str, Any]:
        core = self.core
        core.touch(rec)
        path = core.handoff_path(rec.id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(str(path), text.encode(), durable=True)
        core.commit(core.store.update_lineage(rec.id, handoff=text, event="agent.handoff",
                                              reason=f"handoff of {len(text)} characters"))
        return {"ok": True, "path": str(path)}

    def _agent_files(self, rec: LineageRecord) -> AgentFiles | None:
        """Where a sandboxed agent's hook may name files for the daemon to read: only
        places it can write itself (docs/SECURITY.md, "Files an agent names"). None for
        an agent that is not sandboxed (it is the user)."""
        try:
            sandbox = self.core.sandboxes.resolve(rec.config.sandbox)
            confined = self.core.sandboxes.runtime_of(sandbox).confines_agents
        except Exception:  # its sandbox is gone: the strict answer
            confined = True
        if not confined:
            return None
        user_home = os.path.expanduser("~")
        places = [*(os.path.join(user_home, n) for n in AGENT_CONFIG_PATHS),
                  str(self.core.layout.root / "agents" / rec.id),
                  rec.config.worktree, rec.config.cwd]
        return AgentFiles(tuple(dict.fromkeys(os.path.realpath(p) for p in places
                                              if p and os.path.isdir(p))))

    def _refused_path(self, rec: LineageRecord, provider_name: str, path: str) -> None:
        if rec.id in self._refused_paths:
            return  # the first per lineage (and daemon run): a hook fires every turn
        self._refused_paths.add(rec.id)
        self.core.journal.record(
            rec.config.sandbox, "agent.refused", exec_id=rec.exec_id, state="transcript_path",
            reason=f"{provider_name} hook of lineage {rec.id} named {path} as its transcript: "
                   "not read (the daemon reads only files beneath the agent's own config "
                   "directories, state dir and workspace, with no symlink on the way)",
            data={"lineage": rec.id, "what": "transcript_path", "path": path})

    def follow_session(self, rec: LineageRecord, provider_name: str,
                       ev: HookEvent) -> LineageRecord:
        """A session (re)start. A ``/clear`` or a compaction starts a new provider session
        inside the same agent (a fork): the lineage follows it, so that a revival resumes
        the newest session, never the one the agent left."""
        new, old = ev.provider_session_id, rec.provider_session_id
        source = ev.session_source or "startup"
        forked = old is not None and new != old
        what = (f"{provider_name} session {old} -> {new} ({source})" if forked
                else f"{provider_name} session {new} ({source})")
        # A new session that starts empty (a /clear, a fresh start) has no conversation
        # to resume yet; a compaction's carries its summary on.
        fresh = new != old and source in ("startup", "clear")
        rec = self.core.commit(self.core.store.update_lineage(
            rec.id, provider_session_id=new, event="agent.session", reason=what,
            data={"from": old, "to": new, "source": source, "fork": forked},
            conversation=rec.conversation and not fresh))
        self.worktree.update(rec)
        return rec

    async def hook(self, rec: LineageRecord, provider_name: str, event: str,
                   payload: dict[str, Any]) -> dict[str, Any]:
        """A provider's hook program calling back: translate, act, answer in its format."""
        core = self.core
        provider = get_provider(provider_name)
        files = self._agent_files(rec)
        ctx = AGENT_FILES.set(files)
        try:  # in a thread: a turn-end hook reads the transcript file, which may be large
            ev: HookEvent = await asyncio.to_thread(provider.parse_hook, event, payload)
        finally:
            AGENT_FILES.reset(ctx)
        for path in files.refused if files is not None else ():
            self._refused_path(rec, provider_name, path)
        core.touch(rec)
        allowed, reason = True, "ok"
        if ev.kind == "session_start" and ev.provider_session_id:
            rec = self.follow_session(rec, provider_name, ev)
        elif ev.kind == "turn_start":
            core.turn_started(rec, f"{provider_name} {event}")
        elif ev.kind == "turn_end":
            u: Usage | None = ev.usage
            usage = None if u is None else {
                "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_creation_tokens": u.cache_creation_tokens}
            other = ev.provider_session_id and ev.provider_session_id != rec.provider_session_id
            if other and (rec.provider_session_id is None
                          or provider.follows_session_at_turn_end):
                ev.session_source = ev.session_source or "turn"  # learned at a turn's end
                rec = self.follow_session(rec, provider_name, ev)
            elif other:
                # Another thread's turn (Codex's task-title request): not this lineage's
                # turn, and never a reason to leave its session (only a session start is).
                log.info("lineage %s: %s turn of session %s ignored (the lineage's is %s)",
                         rec.id, provider_name, ev.provider_session_id,
                         rec.provider_session_id)
                return {"kind": "other", "allowed": True, "reason": "another session's turn",
                        "stdout": b"", "exit_code": 0}
            # Read from the provider's transcript, not chosen by tether: cut to fit.
            await self.turn(rec, context_pct=u.context_pct if u else None, usage=usage,
                            model=ev.model, messages=snapshot.fit_turn(ev.messages))
        elif ev.kind == "waiting":
            message = ev.raw.get("message")
            core.wait_for_user(rec, "notification",
                               message if isinstance(message, str) and message
                               else f"{provider_name} waits for its user",
                               message=message, notification=ev.raw.get("notification_type"))
        elif ev.kind == "tool_request":
            decision = self.authorize_tool(rec, ev.tool_name or "?")
            allowed, reason = decision["allowed"], decision["reason"]
        reply = provider.reply(ev, allowed, reason)
        return {"kind": ev.kind, "allowed": allowed, "reason": reason,
                "stdout": reply.stdout, "exit_code": reply.exit_code}
