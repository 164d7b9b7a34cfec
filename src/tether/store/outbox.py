"""Hooks and their outbox (migration 8): the SQL of at-least-once delivery.

An outbox row is inserted by :meth:`Outbox.enqueue`, which the daemon's journal
matcher calls *inside* the transaction of the event the row is about (the store's
``on_append``): the event and its deliveries commit together or not at all. Every
state change of a row is guarded by its current state in the ``WHERE`` clause, so a
worker that lost its row (to a restart's recovery, to ``hook retry``) changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import msgspec

from tether.model.errors import RpcCode, TetherError
from tether.model.hooks import DeliveryState, HookRecord, delivery_key, sources_of
from tether.model.records import Event
from tether.store.sqlite import Store

_enc = msgspec.json.Encoder()
_dec_hook = msgspec.json.Decoder(HookRecord)

_COLUMNS = "id, hook, gseq, type, state, tries, next_at, last_error, updated_at"


class Delivery(msgspec.Struct, kw_only=True):
    id: int
    hook: str
    gseq: int
    type: str
    state: str
    tries: int
    next_at: float
    last_error: str | None
    updated_at: float
    key: str = ""
    body: bytes = b""

    def __post_init__(self) -> None:
        self.key = delivery_key(self.gseq, self.hook)


def _delivery(row: tuple[Any, ...], body: bytes = b"") -> Delivery:
    return Delivery(id=row[0], hook=row[1], gseq=row[2], type=row[3], state=row[4],
                    tries=row[5], next_at=row[6], last_error=row[7], updated_at=row[8],
                    body=body)


def _in(states: tuple[str, ...]) -> str:
    return f"state IN ({','.join(repr(s) for s in states)})"


class Outbox:
    """Reads and writes of the ``hooks`` and ``outbox`` tables, on the daemon's store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = store._db

    # ------------------------------------------------------------------ hooks
    def hooks(self) -> list[HookRecord]:
        rows = self._db.execute("SELECT record FROM hooks ORDER BY name").fetchall()
        return [_dec_hook.decode(r[0]) for r in rows]

    def get_hook(self, name: str) -> HookRecord | None:
        row = self._db.execute("SELECT record FROM hooks WHERE name = ?", (name,)).fetchone()
        return _dec_hook.decode(row[0]) if row else None

    def add_hook(self, rec: HookRecord) -> tuple[HookRecord, Event]:
        with self.store._tx() as db:
            try:
                db.execute("INSERT INTO hooks VALUES (?, ?)", (rec.name, _enc.encode(rec)))
            except sqlite3.IntegrityError:
                raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                                  f"a hook named {rec.name!r} already exists; pick another "
                                  "name or remove it with `tether hook rm`",
                                  {"name": rec.name}) from None
            ev = self.store._append(db, None, "hook.added", reason=f"hook {rec.name} added",
                                    data={"hook": rec.name, "on": rec.on})
        return rec, ev

    def remove_hook(self, name: str) -> tuple[int, Event]:
        """Delete a hook and every delivery of it not yet made; journal ``hook.removed``."""
        with self.store._tx() as db:
            if db.execute("DELETE FROM hooks WHERE name = ?", (name,)).rowcount == 0:
                raise KeyError(name)
            dropped = db.execute("SELECT COUNT(*) FROM outbox WHERE hook = ? AND "
                                 "state != 'COMPLETED'", (name,)).fetchone()[0]
            db.execute("DELETE FROM outbox WHERE hook = ?", (name,))
            ev = self.store._append(db, None, "hook.removed",
                                    reason=f"hook {name} removed ({dropped} undelivered)",
                                    data={"hook": name, "undelivered": dropped})
        return dropped, ev

    # ------------------------------------------------------------------ matching
    def subject(self, db: sqlite3.Connection, ev: Event,
                ) -> tuple[tuple[str, ...], dict[str, Any] | None, dict[str, Any] | None]:
        """What filters and bodies need about an event, read in its own transaction:
        its sandbox's id and name, and the summaries of its exec and lineage."""
        ids: tuple[str, ...] = ()
        if ev.sandbox is not None:
            row = db.execute("SELECT name FROM sandboxes WHERE id = ?", (ev.sandbox,)).fetchone()
            ids = (ev.sandbox, str(row[0])) if row else (ev.sandbox,)
        x: dict[str, Any] | None = None
        lineage_id = ev.data.get("lineage") if isinstance(ev.data, dict) else None
        if ev.exec is not None:
            row = db.execute("SELECT record FROM execs WHERE id = ?", (ev.exec,)).fetchone()
            if row is not None:
                r = json.loads(row[0])
                x = {k: r.get(k) for k in ("id", "name", "sandbox", "state", "exit_code",
                                           "signal", "reason", "created_at", "started_at",
                                           "ended_at", "lineage")}
                x["argv"] = (r.get("spec") or {}).get("argv")
                lineage_id = lineage_id or r.get("lineage")
        lin: dict[str, Any] | None = None
        if isinstance(lineage_id, str):
            row = db.execute("SELECT record FROM lineages WHERE id = ?",
                             (lineage_id,)).fetchone()
            if row is not None:
                r = json.loads(row[0])
                lin = {k: r.get(k) for k in ("id", "name", "status", "lifecycle", "attempt",
                                             "exec_id", "turns", "context_pct", "reason")}
                lin["provider"] = (r.get("config") or {}).get("provider")
        return ids, x, lin

    def enqueue(self, db: sqlite3.Connection, hook: str, ev: Event, body: bytes) -> None:
        """Insert a PENDING delivery, in the caller's (the event's) transaction."""
        now = time.time()
        db.execute("INSERT OR IGNORE INTO outbox (hook, gseq, type, state, tries, next_at, "
                   "updated_at, body) VALUES (?, ?, ?, 'PENDING', 0, 0, ?, ?)",
                   (hook, ev.gseq, ev.type, now, body))

    # ------------------------------------------------------------------ delivery
    def recover(self) -> int:
        """A restarted daemon's first step: deliveries it was making go back to PENDING
        (at-least-once: the receiver may see one twice, with the same key)."""
        with self.store._tx() as db:
            return db.execute(
                "UPDATE outbox SET state = 'PENDING', updated_at = ? WHERE state = ?",
                (time.time(), str(DeliveryState.PROCESSING))).rowcount

    def claim_due(self, now: float, limit: int) -> list[Delivery]:
        """Move up to ``limit`` due deliveries to PROCESSING (one more try) and return them."""
        src = sources_of(DeliveryState.PROCESSING)
        with self.store._tx() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS}, body FROM outbox WHERE {_in(src)} AND next_at <= ? "
                "ORDER BY next_at, id LIMIT ?", (now, limit)).fetchall()
            for row in rows:
                db.execute("UPDATE outbox SET state = 'PROCESSING', tries = tries + 1, "
                           "updated_at = ? WHERE id = ?", (time.time(), row[0]))
        out = []
        for row in rows:
            d = _delivery(row, bytes(row[9]))
            d.state, d.tries = str(DeliveryState.PROCESSING), d.tries + 1
            out.append(d)
        return out

    def finish(self, d: Delivery, to: DeliveryState, *, next_at: float = 0.0,
               error: str | None = None) -> Event | None:
        """Record a try's outcome (only if the row is still this worker's). A delivery
        that goes DEAD is journaled (``hook.dead``), in the same transaction."""
        with self.store._tx() as db:
            n = db.execute(
                "UPDATE outbox SET state = ?, next_at = ?, last_error = ?, updated_at = ? "
                "WHERE id = ? AND state = 'PROCESSING' AND tries = ?",
                (str(to), next_at, error, time.time(), d.id, d.tries)).rowcount
            if n == 0 or to != DeliveryState.DEAD:
                return None
            return self.store._append(
                db, None, "hook.dead", state=str(to),
                reason=f"delivery {d.key} gave up after {d.tries} tries: {error}; "
                       f"`tether hook retry {d.hook}` tries it again",
                data={"hook": d.hook, "delivery": d.key, "gseq": d.gseq, "tries": d.tries})

    def retry(self, hook: str, delivery: int | None, now: float) -> tuple[int, Event]:
        """DEAD and FAILED deliveries of a hook (or the one given, whatever its state
        but PROCESSING) go back to PENDING with their tries reset."""
        states = sources_of(DeliveryState.PENDING)
        with self.store._tx() as db:
            sql = "UPDATE outbox SET state = 'PENDING', tries = 0, next_at = ?, updated_at = ? "
            if delivery is None:
                n = db.execute(sql + f"WHERE hook = ? AND {_in(('DEAD', 'FAILED'))}",
                               (now, time.time(), hook)).rowcount
            else:
                n = db.execute(sql + f"WHERE hook = ? AND id = ? AND {_in(states)} "
                               "AND state != 'PROCESSING'",
                               (now, time.time(), hook, delivery)).rowcount
            ev = self.store._append(db, None, "hook.retried",
                                    reason=f"{n} deliveries of hook {hook} to try again",
                                    data={"hook": hook, "count": n})
        return n, ev

    def next_due(self) -> float | None:
        row = self._db.execute(
            f"SELECT MIN(next_at) FROM outbox WHERE "
            f"{_in(sources_of(DeliveryState.PROCESSING))}").fetchone()
        return None if row[0] is None else float(row[0])

    def counts(self, hook: str) -> dict[str, int]:
        rows = self._db.execute("SELECT state, COUNT(*) FROM outbox WHERE hook = ? "
                                "GROUP BY state", (hook,)).fetchall()
        return {str(s): int(n) for s, n in rows}

    def deliveries(self, hook: str, *, states: tuple[str, ...] | None = None,
                   limit: int = 100) -> list[Delivery]:
        """The newest deliveries of a hook (DEAD ones are the dead letters)."""
        where = f" AND {_in(states)}" if states else ""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE hook = ?{where} ORDER BY id DESC LIMIT ?",
            (hook, limit)).fetchall()
        return [_delivery(r) for r in rows]
