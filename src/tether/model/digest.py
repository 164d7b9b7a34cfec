"""The activity digest's records: what happened, rolled up by period (category A).

A node summarises one period at one level (hour, day, ISO week, month). Its
children are the execs that ended in an hour, the hours of a day, or the days of a
week or a month. Versions are append-only: a COMPLETE version never changes, and a
child that arrives after it (a late exec, a rebuilt hour) makes version N+1.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Level = Literal["hour", "day", "week", "month"]
LEVELS: tuple[Level, ...] = ("hour", "day", "week", "month")


class FailureNote(msgspec.Struct, kw_only=True):
    """One failed run and the last line it printed, so a digest says *why*."""

    exec: str
    command: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    line: str = ""
    ended_at: float = 0.0


class DigestSummary(msgspec.Struct, kw_only=True):
    """Counts that add up across children (so a day is the sum of its hours)."""

    runs: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    agent_runs: int = 0  # runs that were an agent's attempt
    revivals: int = 0  # agent attempts after the first of their lineage
    turns: int = 0
    tokens: dict[str, int] = msgspec.field(default_factory=dict)
    context_peak_pct: float | None = None
    busy_seconds: float = 0.0  # the runs' durations added up
    longest_seconds: float = 0.0
    longest_exec: str | None = None
    #: Runs per command (argv[0]'s base name), the most frequent first, at most 20.
    commands: dict[str, int] = msgspec.field(default_factory=dict)
    #: The last failures, newest last, at most 3.
    failures: list[FailureNote] = msgspec.field(default_factory=list)
    #: One paragraph: the deterministic line, or the ``--summarizer`` command's output.
    text: str = ""


class DigestNode(msgspec.Struct, kw_only=True):
    id: str  # "<level>:<label>", e.g. "day:2026-11-23"
    level: Level
    label: str
    period_start: float
    period_end: float
    version: int
    state: str  # model.states.DigestState
    children: list[str] = msgspec.field(default_factory=list)
    #: What the children were when built (ids and versions, hashed): a changed
    #: fingerprint under a COMPLETE version is a late child, so a new version.
    fingerprint: str = ""
    summary: DigestSummary | None = None
    error: str | None = None  # why the summarizer failed (FAILED)
    summarizer: str | None = None  # the command that wrote ``summary.text``; None: built in
    created_at: float = 0.0
    updated_at: float = 0.0
