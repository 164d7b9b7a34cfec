"""The agent protocol: what a session says about itself (``agent.*``).

Turns (lifecycle, durable snapshot, counters), heartbeats, tool fencing, the
handoff, and provider hooks translated into those. Every call is a sign of life.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import functools
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tether.agent import lifecycle as lc
from tether.agent import snapshot
from tether.agent.confinement import AGENT_CONFIG_PATHS
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import (
    AGENT_FILES,
    SETTLE_STOP,
    AgentFiles,
    HookEvent,
    Usage,
)
from tether.cost import limits
from tether.cost.prices import PriceTable
from tether.cost.prices import load as load_prices
from tether.daemon.agents.core import AgentCore, token_digest
from tether.daemon.agents.ending import LIMIT_STOP
from tether.daemon.agents.worktree import WorktreeFiles
from tether.hostio.atomic import atomic_write
from tether.model.errors import RpcCode, TetherError
from tether.model.records import LineageRecord, UsageCursor
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE

if TYPE_CHECKING:
    from tether.daemon.cost.service import CostService

log = logging.getLogger("tether.agents")

REAP_DELAY = 1.0  # seconds between a DEAD turn's reply and SIGTERM to the agent
#: How long a tool call waits for the turn before it to be counted (its lifecycle).
SETTLE_WAIT = 15.0
#: Threads that read what agents wrote (hook payloads, transcripts). A pool of their
#: own: a read may wait ``SETTLE_TIMEOUT`` s for a CLI's record, and agents naming files
#: that never come would otherwise hold every thread of the daemon's default executor
#: (turn snapshots, checkpoints, monitor starts); now they can hold only these.
AGENT_READ_THREADS = 8



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
        # lineage -> its turn being counted in the background (settles_turns providers)
        self._settling: dict[str, asyncio.Task[None]] = {}
        #: Budgets, checked at every turn's end and tool call (set by the composition
        #: root; None: no cost accounting, as in a bare AgentService).
        self.budget: CostService | None = None
        self._reads = ThreadPoolExecutor(AGENT_READ_THREADS, "agent-read")
        self._closing = threading.Event()  # set at close: a settle wait ends at once

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in an agent-read thread, in this context (``AGENT_FILES``)."""
        def call() -> Any:
            SETTLE_STOP.set(self._closing)
            return fn(*args)
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self._reads, functools.partial(ctx.run, call))

    def close(self) -> None:
        """At the daemon's stop: end the reads' waits (their turns are counted at the
        next start), so no thread holds the process's exit."""
        self._closing.set()
        self._reads.shutdown(wait=False, cancel_futures=True)

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
                    cursor: UsageCursor | None = None, settled_late: bool = False,
                    ) -> dict[str, Any]:
        """``settled_late``: the turn ended a while ago (its wait for its user began then,
        and a next turn may have started since): its waiting state is left as it is."""
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
            usage_cursor=cursor or rec.usage_cursor,
            # An interactive agent now waits for its user (until the next turn starts).
            waiting_since=rec.waiting_since if settled_late else (
                (rec.waiting_since or now) if rec.config.tty else None),
            reason=f"turn {turn_no}" + (f" at {context_pct:.0f}% context"
                                        if context_pct is not None else ""),
            data={"turn": turn_no, "context_pct": context_pct, "usage": dict(usage),
                  "model": model or rec.model, "lineage": rec.id,
                  **({"capped": capped} if capped is not None else {})}, **once))
        reached = (self.budget.enforce(rec, (model or rec.model, dict(usage)))
                   if self.budget else [])
        if after != before:
            self._lifecycle_event(rec, before, after, "turn report")
        if rec.config.tty and rec.waiting_since is not None:
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

    @contextlib.contextmanager
    def _agent_files_of(self, rec: LineageRecord) -> Iterator[AgentFiles | None]:
        """``AGENT_FILES`` set to ``rec``'s places while a provider reads what its agent
        named (``_read`` copies the context into its worker thread)."""
        files = self._agent_files(rec)
        ctx = AGENT_FILES.set(files)
        try:
            yield files
        finally:
            AGENT_FILES.reset(ctx)

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

    def follow_session(self, rec: LineageRecord, provider_name: str, ev: HookEvent,
                       cursor: UsageCursor | None = None) -> LineageRecord:
        """A session (re)start. A ``/clear`` or a compaction starts a new provider session
        inside the same agent (a fork): the lineage follows it, so that a revival resumes
        the newest session, never the one the agent left."""
        rec = self.core.store.get_lineage(rec.id) or rec  # another hook may have committed
        new, old = ev.provider_session_id, rec.provider_session_id
        source = ev.session_source or "startup"
        forked = old is not None and new != old
        what = (f"{provider_name} session {old} -> {new} ({source})" if forked
                else f"{provider_name} session {new} ({source})")
        # A new session that starts empty (a /clear, a fresh start) has no conversation
        # to resume yet; a compaction's carries its summary on.
        # (A hook of its first prompt may have come first: that session is not empty.)
        fresh = new != old and source in ("startup", "clear") and new != rec.turn_session
        rec = self.core.commit(self.core.store.update_lineage(
            rec.id, provider_session_id=new, event="agent.session", reason=what,
            data={"from": old, "to": new, "source": source, "fork": forked},
            conversation=False if fresh else rec.conversation,
            usage_cursor=cursor or rec.usage_cursor))
        self.worktree.update(rec)
        return rec

    async def hook(self, rec: LineageRecord, provider_name: str, event: str,
                   payload: dict[str, Any]) -> dict[str, Any]:
        """A provider's hook program calling back: translate, act, answer in its format."""
        core = self.core
        provider = get_provider(provider_name)
        with self._agent_files_of(rec) as files:
            # In a thread: a turn-end hook reads the transcript file, which may be large.
            ev: HookEvent = await self._read(provider.parse_hook, event, payload)
        for path in files.refused if files is not None else ():
            self._refused_path(rec, provider_name, path)
        core.touch(rec)
        allowed, reason = True, "ok"
        if ev.kind == "session_start" and ev.provider_session_id:
            async with core.lock(rec.id):  # the usage cursor moves under the turns' lock
                fresh = core.store.get_lineage(rec.id) or rec
                with self._agent_files_of(fresh) as files:
                    cursor = await self._read(provider.follow_record, ev,
                                                     fresh.usage_cursor)
                for path in files.refused if files is not None else ():
                    self._refused_path(fresh, provider_name, path)
                rec = self.follow_session(fresh, provider_name, ev, cursor)
        elif ev.kind == "turn_start":
            prompt = next((m["content"] for m in ev.messages if m.get("role") == "user"
                           and isinstance(m.get("content"), str)), None)
            core.turn_started(rec, f"{provider_name} {event}", ev.provider_session_id, prompt)
        elif ev.kind == "turn_end":
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
            if provider.settles_turns and core.tasks.open:
                # Its record of the turn may be written only once this hook has returned:
                # the turn is counted in the background; the wait for its user begins now.
                if rec.config.tty:
                    rec = core.commit(core.store.update_lineage(
                        rec.id, waiting_since=rec.waiting_since or time.time()))
                self._settling[rec.id] = core.tasks.spawn(self._settle(rec, provider_name, ev),
                                                          name=f"turn-{rec.id}")
            else:
                await self.hook_turn(rec, provider_name, ev)
        elif ev.kind == "turn_failed":
            self.turn_failed(rec, provider_name, ev)
        elif ev.kind == "status":
            if ev.context_window and ev.context_window != rec.context_window:
                # The window the CLI really uses: the context % is taken against it.
                core.commit(core.store.update_lineage(rec.id, context_window=ev.context_window))
        elif ev.kind == "waiting":
            message = ev.raw.get("message")
            core.wait_for_user(rec, "notification",
                               message if isinstance(message, str) and message
                               else f"{provider_name} waits for its user",
                               message=message, notification=ev.raw.get("notification_type"))
        elif ev.kind == "tool_request":
            await self._settled(rec.id)  # the fence follows the last turn's lifecycle
            rec = core.store.get_lineage(rec.id) or rec
            decision = self.authorize_tool(rec, ev.tool_name or "?")
            allowed, reason = decision["allowed"], decision["reason"]
        reply = provider.reply(ev, allowed, reason)
        return {"kind": ev.kind, "allowed": allowed, "reason": reason,
                "stdout": reply.stdout, "exit_code": reply.exit_code}

    async def hook_turn(self, rec: LineageRecord, provider_name: str, ev: HookEvent, *,
                        settled_late: bool = False) -> dict[str, Any]:
        """A ``turn_end`` hook: the turn's usage read from where the last one stopped
        (the lineage's usage cursor, under its lock: each API call counted once), its
        context % against the window the CLI reported if it did, then the turn."""
        provider = get_provider(provider_name)  # the one that parsed ``ev``
        async with self.core.lock(rec.id):
            fresh = self.core.store.get_lineage(rec.id) or rec
            with self._agent_files_of(fresh) as files:
                cursor = await self._read(provider.settle_turn, ev, fresh.usage_cursor)
            for path in files.refused if files is not None else ():
                self._refused_path(fresh, provider_name, path)
            u: Usage | None = ev.usage
            if u is None and ev.transcript_path:
                log.info("lineage %s: no usage in %s at its turn's end yet (counted at the "
                         "next)", rec.id, ev.transcript_path)
            usage = None if u is None else {
                "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_creation_tokens": u.cache_creation_tokens}
            if u is not None and fresh.context_window:
                u.context_window = fresh.context_window
            return await self._turn(fresh, context_pct=u.context_pct if u else None,
                                    usage=usage, model=ev.model,
                                    # read from the agent's own files, not chosen by
                                    # tether: cut to fit
                                    messages=snapshot.fit_turn(ev.messages),
                                    cursor=cursor, settled_late=settled_late)

    async def _settled(self, lineage: str) -> None:
        """Wait (bounded) for a turn still being counted in the background."""
        task = self._settling.get(lineage)
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=SETTLE_WAIT)

    async def _settle(self, rec: LineageRecord, provider_name: str, ev: HookEvent) -> None:
        try:
            fresh = self.core.store.get_lineage(rec.id)
            if fresh is not None and fresh.status in LINEAGE_LIVE:
                await self.hook_turn(fresh, provider_name, ev, settled_late=True)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("counting a turn of lineage %s failed", rec.id)
        finally:
            if self._settling.get(rec.id) is asyncio.current_task():
                self._settling.pop(rec.id, None)

    def turn_failed(self, rec: LineageRecord, provider_name: str, ev: HookEvent) -> None:
        """A turn ended on an API error. A usage limit: tether stops the attempt (an
        interactive CLI would sit at its prompt showing it) and the lineage waits for
        the reset (WAITING_LIMIT, no revival spent). Any other error: the turn is over,
        and an interactive agent waits for its user."""
        core = self.core
        what = f"{ev.error or 'error'}: {ev.error_message or 'no message'}"
        if ev.error != "usage_limit":
            core.wait_for_user(rec, "error", f"{provider_name}'s turn failed: {what}",
                               error=ev.error, message=ev.error_message)
            return
        x = core.store.get_exec(rec.exec_id) if rec.exec_id else None
        if x is None or x.state in EXEC_TERMINAL or not core.tasks.open:
            return
        reason = f"{LIMIT_STOP}{ev.error_message or provider_name + ' reported a usage limit'}"
        core.tasks.spawn(self._stop(x.id, reason[:1000]), name=f"limit-{x.id}")

    async def _stop(self, exec_id: str, reason: str) -> None:
        try:
            x = self.core.store.get_exec(exec_id)
            if x is not None and x.state not in EXEC_TERMINAL:
                await self.core.execs.cancel(x, signal.SIGTERM, 5.0, reason)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("stopping exec %s for its usage limit failed", exec_id)
