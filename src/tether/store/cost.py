"""Cost's reads of the journal and its one table (migration 11): budgets.

Turns are summed in SQL, by key, model and time bucket (the daemon prices each sum):
a report over a year of turns reads no event into Python. A budget row's scope is
``daily`` (every agent's spend per day) or ``lineage:<id>`` (a change to the budget the
lineage started with). A crossing's ``agent.budget`` event is appended only if no event
of the same crossing key exists, checked in the same transaction: exactly once,
whatever crashes around it.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tether.model.records import Event
from tether.store.sqlite import Store

_TYPE = "json_extract(e.body, '$.type')"
_TIME = "json_extract(e.body, '$.time')"
#: What a turn is grouped by; a lineage from the event (newer daemons) or its exec's record.
KEYS = {
    "attempt": "json_extract(e.body, '$.exec')",
    "sandbox": "json_extract(e.body, '$.sandbox')",
    "lineage": "COALESCE(json_extract(e.body, '$.data.lineage'), (SELECT json_extract("
               "x.record, '$.lineage') FROM execs x WHERE x.id = json_extract(e.body, "
               "'$.exec')))",
    "none": "NULL",
}
#: The usage keys that are priced (tether.cost.prices.TOKEN_PRICES), summed in SQL.
TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
_SUMS = ", ".join(f"CAST(TOTAL(json_extract(e.body, '$.data.usage.{k}')) AS INTEGER)"
                  for k in TOKENS)

Sums = tuple[str | None, str | None, int, int, dict[str, int]]  # key, model, bucket, n, usage


def _rows(rows: list[Any]) -> list[Sums]:
    return [(r[0], r[1], int(r[2]), int(r[3]),
             {k: int(v) for k, v in zip(TOKENS, r[4:], strict=True) if v}) for r in rows]


class CostTables:
    def __init__(self, store: Store) -> None:
        self._s = store

    def turn_sums(self, key: str, *, since: float, until: float | None, bucket: float,
                  shift: float = 0.0, db: sqlite3.Connection | None = None) -> list[Sums]:
        """``agent.turn`` events with ``since <= time < until``, summed by ``key`` (one of
        :data:`KEYS`), model and ``CAST((time + shift) / bucket)``. ``db``: a read
        connection of ``Store.reads`` (a report over every turn runs in a worker thread),
        else the store's own."""
        upper = f" AND {_TIME} < ?" if until is not None else ""
        args: tuple[Any, ...] = (shift, bucket, since, *((until,) if until is not None else ()))
        return _rows((db or self._s._db).execute(
            f"SELECT {KEYS[key]}, json_extract(e.body, '$.data.model'),"
            f" CAST(({_TIME} + ?) / ? AS INTEGER), COUNT(*), {_SUMS}"
            f" FROM events e WHERE {_TYPE} = 'agent.turn' AND {_TIME} >= ?{upper}"
            f" GROUP BY 1, 2, 3", args).fetchall())

    def exec_turn_sums(self, exec_ids: list[str], *, bucket: float, shift: float) -> list[Sums]:
        """The same for the turns of these execs (a lineage's attempts), by their index."""
        out: list[Sums] = []
        for ident in exec_ids:
            out.extend(_rows(self._s._db.execute(
                f"SELECT NULL, json_extract(e.body, '$.data.model'),"
                f" CAST(({_TIME} + ?) / ? AS INTEGER), COUNT(*), {_SUMS}"
                f" FROM events e INDEXED BY events_exec"
                f" WHERE json_extract(e.body, '$.exec') = ? AND {_TYPE} = 'agent.turn'"
                f" GROUP BY 2, 3", (shift, bucket, ident)).fetchall()))
        return out

    def record_crossing(self, sandbox: str | None, exec_id: str | None, reason: str,
                        data: dict[str, Any]) -> Event | None:
        """The ``agent.budget`` event of crossing ``data["key"]``; None if it was already
        journaled."""
        with self._s._tx() as db:
            if db.execute("SELECT 1 FROM events e WHERE json_extract(e.body, '$.data.key') = ?"
                          f" AND {_TYPE} = 'agent.budget' LIMIT 1",
                          (data["key"],)).fetchone() is not None:
                return None
            return self._s._append(db, sandbox, "agent.budget", exec_id=exec_id,
                                   state=str(data.get("policy")), reason=reason, data=data)

    # ------------------------------------------------------------------ budgets
    def budgets(self) -> dict[str, tuple[float, str]]:
        return {r[0]: (float(r[1]), str(r[2])) for r in self._s._db.execute(
            "SELECT scope, usd, policy FROM budgets").fetchall()}

    def set_budget(self, scope: str, usd: float | None, policy: str, reason: str) -> Event:
        """Set (or with ``usd`` None, clear) a budget, journaled as ``budget.set``."""
        with self._s._tx() as db:
            if usd is None:
                db.execute("DELETE FROM budgets WHERE scope = ?", (scope,))
            else:
                db.execute("INSERT INTO budgets VALUES (?, ?, ?, ?) ON CONFLICT(scope) DO"
                           " UPDATE SET usd = excluded.usd, policy = excluded.policy,"
                           " updated_at = excluded.updated_at",
                           (scope, usd, policy, time.time()))
            return self._s._append(db, None, "budget.set", reason=reason,
                                   data={"scope": scope, "budget_usd": usd, "policy": policy})
