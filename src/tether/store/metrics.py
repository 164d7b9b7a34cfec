"""The counts ``daemon.metrics`` reads at scrape time (no table of its own): from the
execs, the scheduler's jobs and runs, the webhook outbox and the digest's latest nodes."""

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

    def _by(self, sql: str) -> list[tuple[tuple[str, ...], float]]:
        return [(tuple(str(x) for x in row[:-1]), float(row[-1]))
                for row in self._db.execute(sql).fetchall()]

    def schedule_jobs_by_state(self) -> list[tuple[tuple[str, ...], float]]:
        return self._by("SELECT state, COUNT(*) FROM schedule_jobs GROUP BY state")

    def schedule_runs_by_state(self) -> list[tuple[tuple[str, ...], float]]:
        return self._by("SELECT state, COUNT(*) FROM schedule_runs GROUP BY state")

    def deliveries_by_hook_state(self) -> list[tuple[tuple[str, ...], float]]:
        return self._by("SELECT hook, state, COUNT(*) FROM outbox GROUP BY hook, state")

    def digest_nodes_by_level_state(self) -> list[tuple[tuple[str, ...], float]]:
        return self._by("SELECT level, state, COUNT(*) FROM digest_latest "
                        "GROUP BY level, state")
