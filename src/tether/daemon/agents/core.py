"""The state the parts of the agent service share, explicitly.

The daemon's services the parts call, and the lineages' memory of category C:
heartbeats, hung kills and the rest are lost on a restart by design (a restarted
daemon gives every live session a fresh grace period and reads each drain snapshot
back once, at its next turn). One object, so that ``forget`` drops a
lineage's memory in one place whichever part ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.agent import lifecycle as lc
from tether.daemon.clock import Clock
from tether.daemon.egress import EgressService
from tether.daemon.execs import ExecService
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.sandboxes import SandboxService
from tether.daemon.tasks import Tasks
from tether.model.layout import HomeLayout
from tether.model.records import Event, LineageRecord
from tether.model.states import LineageStatus
from tether.runtime.base import MonitorFence
from tether.store import Store

#: How much of a turn's prompt a lineage keeps (``last_prompt``).
PROMPT_CHARS = 4000


def token_digest(token: str) -> str:
    """What the store keeps of a token: reading tether.db must not let one speak for it."""
    return hashlib.sha256(token.encode()).hexdigest()


class AgentCore:
    def __init__(self, store: Store, layout: HomeLayout, journal: Journal, execs: ExecService,
                 sandboxes: SandboxService, tasks: Tasks, instance: str,
                 faults: Faults, clock: Clock | None = None) -> None:
        self.tasks = tasks
        # Usage-limit reset times are wall-clock times a test must be able to reach.
        self.clock = clock or Clock()
        self.faults = faults
        self.store = store
        self.layout = layout
        self.journal = journal
        self.execs = execs
        self.sandboxes = sandboxes
        self.instance = instance
        self.heartbeat: dict[str, float] = {}  # lineage -> last sign of life (C)
        self.hb_class: dict[str, lc.HeartbeatClass] = {}
        self.wt_written: dict[str, float] = {}
        self.verified: set[str] = set()  # lineages whose drain snapshot was read back once
        self.hung_kills: set[str] = set()  # exec ids we cancelled as hung
        self.successor_wanted: list[str] = []  # DEAD lineages whose successor is due
        self.tool_calls: dict[str, int] = {}  # for heartbeat.json toolCallsCount
        # lineage -> (its attempt's exec, the offset of that attempt's output read so far)
        # (CLIs without hooks: turns.py).
        self.output_marks: dict[str, tuple[str, int]] = {}
        # One per lineage: turns, revivals and resolutions of a lineage never interleave.
        self.locks: dict[str, asyncio.Lock] = {}
        self.wake = asyncio.Event()  # makes the tick run at once
        # May this host revive that lineage now? Fleet mode says no for a lineage whose
        # placement this host's lease does not own (it is revived on another host).
        self.may_revive: Callable[[LineageRecord], bool] = lambda rec: True
        # What an attempt's monitor watches to kill it once this host's fleet lease runs
        # out (fleet-placed lineages only), else None.
        self.fence: Callable[[LineageRecord], MonitorFence | None] = lambda rec: None
        # lineage -> its current attempt's token, only here and in that attempt's exec
        # environment; lost with the daemon (the next start of the attempt gets a new one).
        self.tokens: dict[str, str] = {}
        # Called with every lineage that ended (its end scripts and hand-off: the service).
        self.on_end: Callable[[str], None] | None = None
        # Bwrap agents' egress proxy (None: agents meant for it get no network at all).
        self.egress: EgressService | None = None

    def commit(self, result: tuple[LineageRecord, Event | None]) -> LineageRecord:
        """Publish a committed lineage change's event, if any; return the record."""
        return self.journal.commit(result)

    def lock(self, lineage: str) -> asyncio.Lock:
        return self.locks.setdefault(lineage, asyncio.Lock())

    def forget(self, lineage: str) -> None:
        """Drop the memory of a lineage that has ended, and run what follows its end."""
        if self.on_end is not None:
            self.on_end(lineage)
        self.heartbeat.pop(lineage, None)
        lock = self.locks.get(lineage)
        if lock is not None and not lock.locked():
            self.locks.pop(lineage, None)
        self.hb_class.pop(lineage, None)
        self.verified.discard(lineage)
        self.tokens.pop(lineage, None)
        self.output_marks.pop(lineage, None)

    def new_token(self, lineage: str) -> str:
        """A new token for ``lineage``'s current attempt, remembered here; returns the
        digest the caller commits before any exec receives the token."""
        token = secrets.token_hex(16)
        self.tokens[lineage] = token
        return token_digest(token)

    def handoff_path(self, lineage: str) -> Path:
        return self.layout.root / "drain" / f"{lineage}.handoff.md"

    # ------------------------------------------------------------------ signs of life
    def touch(self, rec: LineageRecord) -> None:
        """A sign of life (not of work: whether a turn is in progress is
        ``waiting_since``'s, changed only by :meth:`turn_started` and
        :meth:`wait_for_user`)."""
        self.heartbeat[rec.id] = time.time()

    def turn_started(self, rec: LineageRecord, why: str, session: str | None = None,
                     prompt: str | None = None) -> LineageRecord:
        """A turn began (a prompt was submitted, the agent called a tool): the agent no
        longer waits for its user, and its silence from now on may be a hang. Marks the
        session (``session``, the provider's id, when the hook gave one) as having a
        conversation. Journaled as ``agent.turn_start`` when it waited; a no-op while a
        turn is already in progress."""
        rec = self.store.get_lineage(rec.id) or rec  # the caller's copy may be stale
        if rec.waiting_since is None and rec.conversation and prompt is None and (
                session is None or session == rec.turn_session):
            return rec
        event = "agent.turn_start" if rec.waiting_since is not None else None
        return self.commit(self.store.update_lineage(
            rec.id, waiting_since=None, conversation=True,
            turn_session=session or rec.turn_session, event=event,
            last_prompt=prompt[:PROMPT_CHARS] if prompt is not None else rec.last_prompt,
            reason=f"turn {rec.turns + 1} started ({why})" if event else None,
            data={"lineage": rec.id, "turn": rec.turns + 1, "why": why}))

    def wait_for_user(self, rec: LineageRecord, why: str, reason: str,
                      **data: Any) -> LineageRecord:
        """An interactive agent's turn ended (or it asked its user something): it waits
        at its prompt, which is not a hang, until the next turn starts. Journals
        ``agent.waiting`` (``why``: idle, notification) for hooks to tell a person."""
        rec = self.store.get_lineage(rec.id) or rec  # the caller's copy may be stale
        if rec.config.tty and rec.waiting_since is None:
            rec = self.commit(self.store.update_lineage(rec.id, waiting_since=time.time()))
        self.waiting(rec, why, reason, **data)
        return rec

    def last_sign_of_life(self, rec: LineageRecord) -> float:
        last = self.heartbeat.setdefault(rec.id, time.time())
        if rec.exec_id:
            x = self.store.get_exec(rec.exec_id)
            if x is not None:
                paths = self.execs.paths(x)
                for p in (paths.pty if x.spec.tty else paths.stdout, paths.stderr):
                    with contextlib.suppress(FileNotFoundError):
                        last = max(last, p.stat().st_mtime)  # output is activity too
        return last

    def heartbeat_class(self, rec: LineageRecord) -> str | None:
        if rec.status != LineageStatus.ACTIVE:
            return None
        if rec.waiting_since is not None:
            return str(lc.HeartbeatClass.IDLE)
        last = self.last_sign_of_life(rec)
        th = lc.HeartbeatThresholds(rec.config.stale_after, rec.config.crashed_after)
        return str(lc.classify_heartbeat(time.time() - last, th))

    def waiting(self, rec: LineageRecord, why: str, reason: str, **data: Any) -> None:
        """Journal ``agent.waiting``: the agent needs its user (``why``: notification,
        idle, ask), so that a webhook (``tether hook add --on agent.waiting``) can tell
        a person."""
        self.journal.record(rec.config.sandbox, "agent.waiting", exec_id=rec.exec_id,
                            state=why, reason=reason,
                            data={"lineage": rec.id, "name": rec.name, "why": why, **data})
