"""Cost's reads of the journal and its one table (migration 11): budgets.

A budget row's scope is ``daily`` (every agent's spend per day) or ``lineage:<id>`` (a
change to the budget the lineage started with). A crossing's ``agent.budget`` event
is appended only if no event of the same crossing key exists, checked in the same
transaction: exactly once, whatever crashes around it.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from tether.model.records import Event
from tether.store.sqlite import Store

_dec_event = msgspec.json.Decoder(Event)
_TYPE = "json_extract(body, '$.type')"


class CostTables:
    def __init__(self, store: Store) -> None:
        self._s = store

    def turns_since(self, since: float) -> list[tuple[Event, str | None]]:
        """Every ``agent.turn`` event from ``since`` (wall time) on, with the lineage of
        its exec (events of older daemons do not carry it in their data)."""
        rows = self._s._db.execute(
            f"SELECT e.body, json_extract(x.record, '$.lineage') FROM events e"
            f" LEFT JOIN execs x ON x.id = json_extract(e.body, '$.exec')"
            f" WHERE {_TYPE.replace('body', 'e.body')} = 'agent.turn'"
            f" AND json_extract(e.body, '$.time') >= ? ORDER BY e.gseq", (since,)).fetchall()
        return [(_dec_event.decode(r[0]), r[1]) for r in rows]

    def turns_of_lineage(self, lineage: str) -> list[Event]:
        rows = self._s._db.execute(
            "SELECT e.body FROM execs x JOIN events e"
            " ON json_extract(e.body, '$.exec') = x.id"
            " WHERE json_extract(x.record, '$.lineage') = ?"
            " AND json_extract(e.body, '$.type') = 'agent.turn' ORDER BY e.gseq",
            (lineage,)).fetchall()
        return [_dec_event.decode(r[0]) for r in rows]

    def crossed(self, key: str) -> bool:
        return self._s._db.execute(
            f"SELECT 1 FROM events WHERE {_TYPE} = 'agent.budget'"
            " AND json_extract(body, '$.data.key') = ? LIMIT 1", (key,)).fetchone() is not None

    def record_crossing(self, sandbox: str | None, exec_id: str | None, reason: str,
                        data: dict[str, Any]) -> Event | None:
        """The ``agent.budget`` event of crossing ``data["key"]``; None if it was already
        journaled."""
        with self._s._tx() as db:
            if db.execute(f"SELECT 1 FROM events WHERE {_TYPE} = 'agent.budget'"
                          " AND json_extract(body, '$.data.key') = ? LIMIT 1",
                          (data["key"],)).fetchone() is not None:
                return None
            return self._s._append(db, sandbox, "agent.budget", exec_id=exec_id,
                                   state=str(data.get("policy")), reason=reason, data=data)

    # ------------------------------------------------------------------ budgets
    def budgets(self) -> dict[str, tuple[float, str]]:
        return {r[0]: (float(r[1]), str(r[2])) for r in self._s._db.execute(
            "SELECT scope, usd, policy FROM budgets").fetchall()}

    def budget(self, scope: str) -> tuple[float, str] | None:
        r = self._s._db.execute("SELECT usd, policy FROM budgets WHERE scope = ?",
                                (scope,)).fetchone()
        return None if r is None else (float(r[0]), str(r[1]))

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
