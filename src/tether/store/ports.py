"""Port ranges leased to agent lineages (migration 12): ``TETHER_PORT_BASE``.

A lease is a row ``(lineage, lo, hi)``, taken before its lineage is created (the
worktree's setup script gets the ports too). It is held while its lineage is live or
not yet created; a row whose lineage ended is free and is deleted by the transaction
that leases next, so freeing needs no step of its own that a SIGKILL could skip, and
two live lineages never hold overlapping ports. Rows of lineages never created (a crash
or a failed setup between lease and lineage) are swept when the daemon starts
(:meth:`PortLeases.sweep_unborn`), when no start can be in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tether.model.states import LINEAGE_LIVE

if TYPE_CHECKING:
    from tether.store.sqlite import Store


class PortLeases:
    """Composed around the core store by the agent core (``AgentCore.ports``): the same
connection, one writer."""

    def __init__(self, store: Store) -> None:
        self._s = store

    def lease(self, lineage: str, base: int, per_session: int, sessions: int,
              usable: Callable[[int, int], bool] = lambda lo, hi: True) -> int | None:
        """The lowest block ``base + k * per_session`` (``k < sessions``) that overlaps no
        live lineage's lease and that ``usable(lo, hi)`` accepts (nothing else on the host
        listens there), leased to ``lineage``; None when every block is taken. Leasing
        again for the same lineage returns its lease (a retried start)."""
        live = tuple(LINEAGE_LIVE)
        with self._s._tx() as db:
            row = db.execute("SELECT lo FROM port_leases WHERE lineage = ?",
                             (lineage,)).fetchone()
            if row is not None:
                return int(row[0])
            db.execute(
                "DELETE FROM port_leases WHERE lineage IN (SELECT id FROM lineages "
                f"WHERE status NOT IN ({','.join('?' * len(live))}))", live)
            held = [(int(a), int(b)) for a, b in db.execute(
                "SELECT lo, hi FROM port_leases WHERE lineage != ?", (lineage,))]
            for k in range(sessions):
                lo = base + k * per_session
                hi = lo + per_session - 1
                if any(a <= hi and lo <= b for a, b in held) or not usable(lo, hi):
                    continue
                db.execute("INSERT INTO port_leases VALUES (?, ?, ?, ?)",
                           (lineage, lo, hi, time.time()))
                return lo
        return None

    def held(self) -> dict[str, tuple[int, int]]:
        """Every row, live or not yet swept: lineage -> (lo, hi)."""
        return {str(r[0]): (int(r[1]), int(r[2])) for r in self._s._db.execute(
            "SELECT lineage, lo, hi FROM port_leases ORDER BY lo")}

    def sweep_unborn(self) -> int:
        """At daemon start: free the leases of lineages never created; returns how many."""
        with self._s._tx() as db:
            return db.execute("DELETE FROM port_leases WHERE lineage NOT IN "
                              "(SELECT id FROM lineages)").rowcount

    def release(self, lineage: str) -> None:
        """Free ``lineage``'s ports at once (its end); a crash before this is harmless."""
        with self._s._tx() as db:
            db.execute("DELETE FROM port_leases WHERE lineage = ?", (lineage,))
