"""Scheduled jobs and their runs (category A), and a run's states as data.

A job says *when* (a cron expression in a time zone, or a fixed period) and *what*
(an ``ExecSpec`` in a sandbox); each fire time becomes one run, committed before its
exec starts, so that a crash neither loses nor doubles it. The store guards every
run transition with :func:`check_run_transition` inside the transaction that writes
it, like :mod:`tether.model.states` does for execs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import msgspec

from tether.model.records import ExecSpec

Overlap = Literal["skip", "concurrent", "queue"]
Missed = Literal["skip", "run-once"]


class JobState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    REMOVED = "REMOVED"


class RunState(StrEnum):
    PENDING = "PENDING"  # its fire time is committed; its exec is not running yet
    PAUSED = "PAUSED"  # queued behind a run when its job was paused
    SKIPPED = "SKIPPED"  # not run: overlap, a full queue, a missed fire time
    RUNNING = "RUNNING"  # its exec started
    SUCCESS = "SUCCESS"  # its exec exited 0
    FAILED = "FAILED"  # its exec failed, was cancelled or timed out, or could not start


RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.RUNNING, RunState.SKIPPED, RunState.FAILED,
                                 RunState.PAUSED}),
    RunState.PAUSED: frozenset({RunState.PENDING, RunState.SKIPPED}),
    RunState.RUNNING: frozenset({RunState.SUCCESS, RunState.FAILED}),
    RunState.SKIPPED: frozenset(),
    RunState.SUCCESS: frozenset(),
    RunState.FAILED: frozenset(),
}
RUN_TERMINAL = frozenset({RunState.SKIPPED, RunState.SUCCESS, RunState.FAILED})
#: A run that holds a slot of its job (counts against ``max_concurrent``).
RUN_ACTIVE = frozenset({RunState.RUNNING})


class IllegalRunTransition(Exception):
    def __init__(self, run: str, current: str, wanted: str) -> None:
        super().__init__(f"schedule run {run}: illegal transition {current} -> {wanted}")


def check_run_transition(run: str, current: str, wanted: str) -> None:
    """The one guard of run states."""
    allowed = RUN_TRANSITIONS.get(RunState(current))
    if allowed is None or wanted not in allowed:
        raise IllegalRunTransition(run, current, wanted)


class JobSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What ``schedule.add`` asked: when, what, and the policies."""

    cron: str | None = None  # five fields, in ``tz``
    every: float | None = None  # seconds, from the job's creation
    tz: str = "UTC"
    sandbox: str = "default"
    exec: ExecSpec  # its ``timeout`` is the per-run timeout
    overlap: Overlap = "skip"
    queue: int = 1  # with overlap=queue: how many fire times may wait
    max_concurrent: int | None = None  # None: 1, or unbounded with overlap=concurrent
    jitter: float = 0.0  # seconds; each fire time is delayed by a stable part of it
    missed: Missed = "skip"
    #: Runs the ``auto`` default sandbox cannot confine run unsandboxed with a notice
    #: instead of failing (``exec.start``'s ``unconfined_ok``): jobs ``tether schedule
    #: add`` made from its user's terminal only.
    unconfined_ok: bool = False

    def limit(self) -> int:
        if self.max_concurrent is not None:
            return self.max_concurrent
        return 1_000_000 if self.overlap == "concurrent" else 1


class JobRecord(msgspec.Struct, kw_only=True):
    id: str
    name: str
    state: str
    spec: JobSpec
    #: The next nominal fire time (epoch seconds); it runs at ``due_at`` (plus jitter).
    next_fire: float
    due_at: float
    created_at: float = 0.0
    updated_at: float = 0.0
    runs: int = 0  # runs that started an exec
    fired: int = 0  # fire times committed (skipped ones too): the last run's number
    errors: int = 0  # runs that ended FAILED
    skipped: int = 0
    last_run_at: float | None = None
    last_state: str | None = None
    reason: str | None = None


class RunRecord(msgspec.Struct, kw_only=True):
    id: int  # the store's row id: increasing
    job: str
    fire_at: float  # the nominal fire time: (job, fire_at) is unique
    state: str
    manual: bool = False  # run-now
    #: Bumped when its exec failed before ever starting (the daemon died first): the
    #: exec's request key includes it, so the same fire time starts once more.
    attempt: int = 0
    exec_id: str | None = None
    exit_code: int | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    reason: str | None = None
    missed: int = 0  # fire times this run stands for that passed unseen
    #: Waiting for a slot (overlap=queue): started when a run of its job ends.
    queued: bool = False
    #: Its job's own count, 1 for its first fire time (0: a run from before numbers):
    #: what ``schedule show`` and ``run-now`` call it, and its exec's name, ``JOB#N``.
    number: int = 0

    def request_key(self) -> str:
        """The exec's idempotency key: one exec per (job, fire time, attempt)."""
        return f"schedule:{self.job}:{round(self.fire_at * 1000)}:{self.attempt}"
