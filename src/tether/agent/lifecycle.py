"""The five-state agent lifecycle (an agent kernel's), as data with one guard.

HEALTHY → AGING (context ≥ 70%) → DYING (≥ 90%) → DRAINING → DEAD. Monotonic:
a state never regresses, and a jump (60% → 92%) skips AGING. Fencing:

* HEALTHY, AGING: tool calls allowed (AGING asks the agent for a handoff);
* DYING: tool calls are fenced except one — the finalization call, which moves
  the lineage to DRAINING;
* DRAINING: the finalization call was used; further calls are fenced; the end
  of this (final) turn moves it to DEAD;
* DEAD: everything is fenced and the process is reaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tether.model.records import AGING_PCT, DYING_PCT


class Lifecycle(StrEnum):
    HEALTHY = "HEALTHY"
    AGING = "AGING"
    DYING = "DYING"
    DRAINING = "DRAINING"
    DEAD = "DEAD"


ORDER: tuple[Lifecycle, ...] = tuple(Lifecycle)
# Every edge goes forward; skipping states is allowed (a jump), going back never.
TRANSITIONS: dict[Lifecycle, frozenset[Lifecycle]] = {
    s: frozenset(ORDER[i + 1:]) for i, s in enumerate(ORDER)
}


def can_transition_to(current: str, wanted: str) -> bool:
    """The one guard."""
    return Lifecycle(wanted) in TRANSITIONS[Lifecycle(current)]


@dataclass(frozen=True)
class Thresholds:
    aging_pct: float = AGING_PCT
    dying_pct: float = DYING_PCT

    def __post_init__(self) -> None:
        if not 0 < self.aging_pct <= self.dying_pct <= 100:
            raise ValueError(f"thresholds must satisfy 0 < aging ({self.aging_pct}) <= "
                             f"dying ({self.dying_pct}) <= 100")


def on_turn_end(current: str, context_pct: float | None, th: Thresholds) -> Lifecycle:
    """The state after a completed turn (evaluated at every turn report)."""
    cur = Lifecycle(current)
    if cur in (Lifecycle.DYING, Lifecycle.DRAINING, Lifecycle.DEAD):
        return Lifecycle.DEAD  # the finalization turn is over
    if context_pct is None:
        return cur
    target = (Lifecycle.DYING if context_pct >= th.dying_pct
              else Lifecycle.AGING if context_pct >= th.aging_pct else Lifecycle.HEALTHY)
    return target if can_transition_to(cur, target) else cur


@dataclass(frozen=True)
class ToolDecision:
    allowed: bool
    reason: str
    next_state: Lifecycle


def authorize_tool(current: str) -> ToolDecision:
    """May the agent make a tool call now?"""
    cur = Lifecycle(current)
    if cur in (Lifecycle.HEALTHY, Lifecycle.AGING):
        return ToolDecision(True, "allowed", cur)
    if cur == Lifecycle.DYING:
        return ToolDecision(True, "finalization call: the one tool call allowed after the "
                            "context filled up (write your handoff)", Lifecycle.DRAINING)
    if cur == Lifecycle.DRAINING:
        return ToolDecision(False, "fenced: the context is full and the finalization call "
                            "was already used; end the turn", cur)
    return ToolDecision(False, "fenced: this agent is DEAD (context exhausted)", cur)


def turn_instructions(state: str) -> str | None:
    """What the turn reply tells the agent to do, if anything."""
    return {
        Lifecycle.AGING: "context is past the aging threshold: write a handoff record for "
                         "your successor (agent.handoff) while you still have room",
        Lifecycle.DYING: "context is nearly full: tool calls are now fenced except one "
                         "finalization call; use it to write your handoff, then end the turn",
        Lifecycle.DEAD: "context exhausted: this session is over and will be reaped",
    }.get(Lifecycle(state))


class HeartbeatClass(StrEnum):
    ACTIVE = "ACTIVE"
    STALE = "STALE"
    CRASHED = "CRASHED"
    # An interactive agent at its prompt, waiting for its user between turns: silence is
    # expected, so it is neither STALE nor CRASHED and never killed as hung.
    IDLE = "IDLE"


@dataclass(frozen=True)
class HeartbeatThresholds:
    stale_after: float = 30.0
    crashed_after: float = 90.0


def classify_heartbeat(age: float, th: HeartbeatThresholds) -> HeartbeatClass:
    if age < th.stale_after:
        return HeartbeatClass.ACTIVE
    if age <= th.crashed_after:
        return HeartbeatClass.STALE
    return HeartbeatClass.CRASHED
