"""A fleet host's states and the moves between them, as data: ``HOST_MOVES`` is the only
place that says who may move a host from one state to another, and ``allowed`` the only
check, used by the operators' SQL (``admin``), a lease acquisition and the orphan sweep
(``store``). DEAD is left only by the host itself taking a new lease, never by an
operator: a DEAD host's daemon may be partitioned, not gone."""

from __future__ import annotations

#: (from, to) → the operations allowed to make that move.
HOST_MOVES: dict[tuple[str, str], frozenset[str]] = {
    ("ACTIVE", "DRAINING"): frozenset({"drain"}),
    ("DRAINING", "ACTIVE"): frozenset({"undrain"}),
    ("ACTIVE", "DEAD"): frozenset({"sweep"}),
    ("DRAINING", "DEAD"): frozenset({"sweep"}),
    ("DEAD", "ACTIVE"): frozenset({"acquire"}),
    ("ACTIVE", "ACTIVE"): frozenset({"acquire"}),
    # ``drain --now`` after a drain; a draining host's daemon restarting stays draining
    ("DRAINING", "DRAINING"): frozenset({"drain", "acquire"}),
}


def allowed(frm: str, to: str, op: str) -> bool:
    return op in HOST_MOVES.get((frm, to), frozenset())


def sources(to: str, op: str) -> list[str]:
    """The states ``op`` may move a host from into ``to`` (for a bulk ``UPDATE``)."""
    return sorted(f for (f, t), ops in HOST_MOVES.items() if t == to and op in ops)
