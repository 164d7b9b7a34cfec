"""A placement's states (the fleet ``work`` table) as data, with one guard.

Like the core's state machines (``tether.model.states``): a writer that changes a
placement's state asks :func:`check` inside its transaction, so an edge not listed
here is refused where it would be written.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.model.states import IllegalTransition, can_transition

PLACED, RUNNING, ENDED, LOST, REAPED, ASK = (
    "PLACED", "RUNNING", "ENDED", "LOST", "REAPED", "ASK")

#: PLACED -> PLACED and RUNNING -> PLACED: placed again elsewhere (a revival or a
#: drain's hand-over, the next generation). LOST -> ENDED: a plain exec swept LOST
#: while its host was partitioned or fenced ran on there; its host reports the real
#: end when it holds a lease again (``fleet.relay``). LOST -> RUNNING: that host,
#: back, finds the exec still running (``store.reclaim``): it answers for it again.
WORK_TRANSITIONS: dict[str, frozenset[str]] = {
    PLACED: frozenset({RUNNING, ENDED, LOST, REAPED, ASK, PLACED}),
    RUNNING: frozenset({ENDED, LOST, REAPED, ASK, PLACED}),
    ASK: frozenset({PLACED, REAPED}),
    LOST: frozenset({ENDED, RUNNING}),
    ENDED: frozenset(),
    REAPED: frozenset(),
}
LIVE = frozenset({PLACED, RUNNING})
#: A placement is born PLACED (``store.place``): no edge leads there from nothing.
INITIAL = PLACED


def check(work: int, current: str, wanted: str) -> None:
    """The guard: raise ``IllegalTransition`` unless ``current -> wanted`` is an edge."""
    if not can_transition(WORK_TRANSITIONS, current, wanted):
        raise IllegalTransition("placement", str(work), current, wanted)


def sources(wanted: str, among: Iterable[str] = WORK_TRANSITIONS) -> frozenset[str]:
    """The states of ``among`` with an edge to ``wanted``: what a one-statement
    ``UPDATE … WHERE state IN (…)`` may move (``among`` narrows it to the writer's own
    precondition, e.g. ``LIVE`` for a host ending its own work)."""
    return frozenset(s for s in among if can_transition(WORK_TRANSITIONS, s, wanted))


def sql(names: Iterable[str]) -> str:
    """``names`` as an SQL list of literals, e.g. ``('PLACED', 'RUNNING')``, spliced into
    a statement's text rather than bound: the text stays constant, so PostgreSQL proves
    it implies the partial index ``work_live`` in every plan, generic ones included."""
    got = sorted(names)
    if not got or any(n not in WORK_TRANSITIONS for n in got):
        raise ValueError(f"not a set of placement states: {got}")
    return "(" + ", ".join(f"'{n}'" for n in got) + ")"
