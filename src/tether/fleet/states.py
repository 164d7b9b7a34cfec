"""A placement's states (the fleet ``work`` table) as data, with one guard.

Like the core's state machines (``tether.model.states``): a writer that changes a
placement's state asks :func:`check` inside its transaction, so an edge not listed
here is refused where it would be written.
"""

from __future__ import annotations

from tether.model.states import IllegalTransition, can_transition

PLACED, RUNNING, ENDED, LOST, REAPED, ASK = (
    "PLACED", "RUNNING", "ENDED", "LOST", "REAPED", "ASK")

#: PLACED -> PLACED and RUNNING -> PLACED: placed again elsewhere (a revival or a
#: drain's hand-over, the next generation). LOST -> ENDED: a plain exec swept LOST
#: while its host was partitioned or fenced ran on there; its host reports the real
#: end when it holds a lease again (``fleet.relay``).
WORK_TRANSITIONS: dict[str, frozenset[str]] = {
    PLACED: frozenset({RUNNING, ENDED, LOST, REAPED, ASK, PLACED}),
    RUNNING: frozenset({ENDED, LOST, REAPED, ASK, PLACED}),
    ASK: frozenset({PLACED, REAPED}),
    LOST: frozenset({ENDED}),
    ENDED: frozenset(),
    REAPED: frozenset(),
}
LIVE = frozenset({PLACED, RUNNING})


def check(work: int, current: str, wanted: str) -> None:
    """The guard: raise ``IllegalTransition`` unless ``current -> wanted`` is an edge."""
    if not can_transition(WORK_TRANSITIONS, current, wanted):
        raise IllegalTransition("placement", str(work), current, wanted)
