"""The counts ``daemon.metrics`` reads at scrape time (no table of its own)."""

from __future__ import annotations

from tether.store.sqlite import Store


class MetricsReads:
    """Aggregates over the daemon's one :class:`Store` connection."""

    def __init__(self, store: Store) -> None:
        self._db = store._db  # same package: one connection

    def execs_by_sandbox_state(self) -> list[tuple[str, str, int]]:
        rows = self._db.execute(
            "SELECT sandbox_id, state, COUNT(*) FROM execs GROUP BY sandbox_id, state"
        ).fetchall()
        return [(str(sb), str(st), int(n)) for sb, st, n in rows]
