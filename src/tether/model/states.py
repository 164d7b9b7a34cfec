"""State machines as data: the states, the allowed transitions, and one guard.

The store calls :func:`check_transition` inside the transaction that changes a
state, so an illegal transition is refused at the only place that writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class SandboxState(StrEnum):
    PENDING = "PENDING"
    READY = "READY"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    DELETING = "DELETING"
    DELETED = "DELETED"


class ExecState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class DaemonState(StrEnum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"


SANDBOX_TRANSITIONS: dict[SandboxState, frozenset[SandboxState]] = {
    SandboxState.PENDING: frozenset(
        {SandboxState.READY, SandboxState.FAILED, SandboxState.DELETING}
    ),
    SandboxState.READY: frozenset(
        {SandboxState.STOPPED, SandboxState.FAILED, SandboxState.DELETING}
    ),
    SandboxState.STOPPED: frozenset(
        {SandboxState.READY, SandboxState.FAILED, SandboxState.DELETING}
    ),
    SandboxState.FAILED: frozenset({SandboxState.DELETING}),
    SandboxState.DELETING: frozenset({SandboxState.DELETED}),
    SandboxState.DELETED: frozenset(),
}

EXEC_TRANSITIONS: dict[ExecState, frozenset[ExecState]] = {
    ExecState.PENDING: frozenset({ExecState.RUNNING, ExecState.FAILED, ExecState.CANCELLED}),
    ExecState.RUNNING: frozenset({ExecState.FINISHED, ExecState.FAILED, ExecState.CANCELLED}),
    ExecState.FINISHED: frozenset(),
    ExecState.FAILED: frozenset(),
    ExecState.CANCELLED: frozenset(),
}

DAEMON_TRANSITIONS: dict[DaemonState, frozenset[DaemonState]] = {
    DaemonState.STOPPED: frozenset({DaemonState.STARTING}),
    DaemonState.STARTING: frozenset({DaemonState.RUNNING, DaemonState.STOPPED}),
    DaemonState.RUNNING: frozenset({DaemonState.STOPPING}),
    DaemonState.STOPPING: frozenset({DaemonState.STOPPED}),
}

class LineageStatus(StrEnum):
    ACTIVE = "ACTIVE"  # an attempt is (or is being) run
    ORPHANED = "ORPHANED"  # its process died; the revival policy decides
    ASK_PENDING = "ASK_PENDING"  # waiting for `tether lineage resolve`
    REVIVING = "REVIVING"  # intent to start attempt N is committed
    # Its last attempt hit the provider's usage limit: revived at ``revive_at`` (the
    # reset time), without spending the revival budget.
    WAITING_LIMIT = "WAITING_LIMIT"
    FINISHED = "FINISHED"  # the agent ended on its own (exit 0), was killed, or is DEAD
    REAPED = "REAPED"  # discarded by policy or by `lineage resolve --reap`
    FAILED = "FAILED"  # crash loop or too many revivals


LINEAGE_TRANSITIONS: dict[LineageStatus, frozenset[LineageStatus]] = {
    # ACTIVE -> REVIVING: the attempt's exec never started; the same attempt starts again.
    LineageStatus.ACTIVE: frozenset({LineageStatus.ORPHANED, LineageStatus.FINISHED,
                                     LineageStatus.REAPED, LineageStatus.FAILED,
                                     LineageStatus.REVIVING, LineageStatus.WAITING_LIMIT}),
    # WAITING_LIMIT -> REVIVING at the reset time; -> REAPED when a user gives up on it.
    LineageStatus.WAITING_LIMIT: frozenset({LineageStatus.REVIVING, LineageStatus.REAPED,
                                            LineageStatus.FAILED}),
    LineageStatus.ORPHANED: frozenset({LineageStatus.REVIVING, LineageStatus.ASK_PENDING,
                                       LineageStatus.REAPED, LineageStatus.FAILED}),
    LineageStatus.ASK_PENDING: frozenset({LineageStatus.REVIVING, LineageStatus.REAPED}),
    LineageStatus.REVIVING: frozenset({LineageStatus.ACTIVE, LineageStatus.ORPHANED,
                                       LineageStatus.FAILED}),
    LineageStatus.FINISHED: frozenset(),
    LineageStatus.REAPED: frozenset(),
    LineageStatus.FAILED: frozenset(),
}
LINEAGE_LIVE = frozenset({LineageStatus.ACTIVE, LineageStatus.ORPHANED,
                          LineageStatus.ASK_PENDING, LineageStatus.REVIVING,
                          LineageStatus.WAITING_LIMIT})

class DigestState(StrEnum):
    """A digest node's version (source 004's table of contents)."""

    DRAFT = "DRAFT"  # its period is still open: children so far, no summary
    BUILDING = "BUILDING"  # the summarizer runs (a crash here builds it again)
    COMPLETE = "COMPLETE"  # summary written; a late child makes a new version
    FAILED = "FAILED"  # the summarizer failed; the next pass builds it again


DIGEST_TRANSITIONS: dict[DigestState, frozenset[DigestState]] = {
    DigestState.DRAFT: frozenset({DigestState.BUILDING}),
    # BUILDING -> BUILDING: a pass interrupted by a crash starts the build over.
    DigestState.BUILDING: frozenset({DigestState.BUILDING, DigestState.COMPLETE,
                                     DigestState.FAILED}),
    DigestState.FAILED: frozenset({DigestState.BUILDING}),
    # A COMPLETE version never changes; a late child appends version N+1 (BUILDING).
    DigestState.COMPLETE: frozenset(),
}

EXEC_TERMINAL = frozenset({ExecState.FINISHED, ExecState.FAILED, ExecState.CANCELLED})
SANDBOX_ACCEPTS_EXECS = frozenset({SandboxState.READY})


class IllegalTransition(Exception):
    """A caller asked for a transition the state machine does not allow."""

    def __init__(self, kind: str, ident: str, current: str, wanted: str) -> None:
        super().__init__(f"{kind} {ident}: illegal transition {current} -> {wanted}")
        self.kind = kind
        self.ident = ident
        self.current = current
        self.wanted = wanted


def can_transition(table: Mapping[Any, frozenset[Any]], current: str, wanted: str) -> bool:
    """True when ``current -> wanted`` is an edge of ``table``."""
    allowed = table.get(current)
    return allowed is not None and wanted in allowed


def check_transition(kind: str, ident: str, current: str, wanted: str) -> None:
    """The one guard: raise :class:`IllegalTransition` unless the edge exists."""
    tables: dict[str, Mapping[Any, frozenset[Any]]] = {
        "sandbox": SANDBOX_TRANSITIONS, "exec": EXEC_TRANSITIONS, "daemon": DAEMON_TRANSITIONS,
        "lineage": LINEAGE_TRANSITIONS, "digest": DIGEST_TRANSITIONS,
    }
    table = tables[kind]
    if not can_transition(table, current, wanted):
        raise IllegalTransition(kind, ident, current, wanted)
