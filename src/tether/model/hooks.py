"""Webhook subscriptions and their deliveries (category A: the ``hooks`` and ``outbox``
tables of migration 8).

A hook says which journal events a person or a program wants to hear about and where
to send them: an HTTP POST to ``url``, or ``exec`` (a command run with the event on its
stdin). Its secret is never in the record: it lives in ``hooks/<name>.secret`` (0600)
in the home, and a record only says whether there is one.
"""

from __future__ import annotations

from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

import msgspec

#: Tries before a delivery is DEAD (``--max-tries``).
MAX_TRIES = 8
#: The first retry's delay, doubled at every try up to :data:`BACKOFF_CAP` (seconds).
BACKOFF_BASE = 2.0
BACKOFF_CAP = 3600.0


class DeliveryState(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"  # will be tried again at next_at
    DEAD = "DEAD"  # max_tries reached: only `tether hook retry` revives it


#: The allowed edges, guarded in the store (a stale worker cannot complete a row
#: that `hook retry` or a restart has taken back). PROCESSING → PENDING is the
#: recovery of a daemon killed mid-delivery.
DELIVERY_TRANSITIONS: dict[DeliveryState, frozenset[DeliveryState]] = {
    DeliveryState.PENDING: frozenset({DeliveryState.PROCESSING}),
    DeliveryState.PROCESSING: frozenset({DeliveryState.COMPLETED, DeliveryState.FAILED,
                                         DeliveryState.DEAD, DeliveryState.PENDING}),
    DeliveryState.FAILED: frozenset({DeliveryState.PROCESSING, DeliveryState.PENDING}),
    DeliveryState.DEAD: frozenset({DeliveryState.PENDING}),
    DeliveryState.COMPLETED: frozenset({DeliveryState.PENDING}),
}


def sources_of(to: DeliveryState) -> tuple[str, ...]:
    """The states a delivery may move to ``to`` from."""
    return tuple(str(s) for s, tos in DELIVERY_TRANSITIONS.items() if to in tos)


class HookRecord(msgspec.Struct, kw_only=True):
    name: str
    on: list[str]  # event type globs; K.state events also match K.<state in lower case>
    url: str | None = None
    exec: list[str] | None = None  # argv, run unsandboxed as the daemon's user
    cwd: str | None = None  # of an exec hook
    sandbox: str | None = None  # a sandbox id or name
    match_name: str | None = None  # a glob over the exec's (or lineage's) name
    nonzero: bool = False  # only events of execs that exited non-zero or by a signal
    max_tries: int = MAX_TRIES
    has_secret: bool = False
    created_at: float = 0.0


#: Journal events no hook can match: a hook's own bookkeeping never feeds a hook.
UNMATCHED_PREFIX = "hook."


def event_names(type_: str, state: str | None) -> tuple[str, ...]:
    """The names an event answers to: its type and, for a ``K.state`` event, ``K.<state>``
    (so ``--on exec.finished`` means an exec.state event whose state is FINISHED)."""
    if state and type_.endswith(".state"):
        return type_, f"{type_[:-len('state')]}{state.lower()}"
    return (type_,)


def wants_type(hook: HookRecord, names: tuple[str, ...]) -> bool:
    return any(fnmatchcase(n, pat) for pat in hook.on for n in names)


def wants_subject(hook: HookRecord, sandbox_ids: tuple[str, ...],
                  subject: dict[str, Any] | None) -> bool:
    """The filters past the event type: sandbox, name glob, non-zero exit."""
    if hook.sandbox is not None and hook.sandbox not in sandbox_ids:
        return False
    if hook.match_name is not None:
        name = (subject or {}).get("name")
        if not isinstance(name, str) or not fnmatchcase(name, hook.match_name):
            return False
    if hook.nonzero:
        s = subject or {}
        if not (s.get("exit_code") not in (None, 0) or s.get("signal") is not None):
            return False
    return True


def backoff(tries: int, jitter: float) -> float:
    """Seconds before try ``tries + 1``: exponential, capped, times ``jitter`` in
    [0.8, 1.2) so that many failing deliveries do not retry in lockstep."""
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** max(0, tries - 1)) * jitter)


def delivery_key(gseq: int, hook: str) -> str:
    """The idempotency key of a delivery: the same for every try of it."""
    return f"{gseq}-{hook}"
