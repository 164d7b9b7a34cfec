"""Retention's SQL: journal floors and compaction, and the marks of pruned execs.

Part of the store package, so it uses the store's own connection and transactions.
Two promises hold whatever crashes where:

* **No silent gap in the journal.** Compaction deletes a prefix (by ``gseq``) and
  records, per stream, the highest ``seq`` it removed (``journal_floor``) and the
  highest ``gseq`` (``meta.journal_floor``), in the same transaction. It keeps each
  stream's newest event, so the next ``seq`` is still ``MAX(seq) + 1``: numbers are
  never reused. A cursor below a floor gets ``EVENTS_PURGED`` instead of a gap.
* **No row pointing at deleted files unannounced.** An exec is marked in
  ``exec_prunes`` (with its journal event) before any of its files is removed; the
  mark is finished (``done``) after. A daemon killed in between finishes it at start.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from tether.model.records import Event
from tether.model.states import EXEC_TERMINAL

if TYPE_CHECKING:
    from tether.store.sqlite import Store


class ExecLike(Protocol):
    """What retention needs of an exec: an ``ExecRecord``, or the :class:`Ended` row a
    pass reads without decoding whole records."""

    @property
    def id(self) -> str: ...
    @property
    def sandbox(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def ended_at(self) -> float | None: ...


class Ended(msgspec.Struct, frozen=True, gc=False):
    """A settled exec as a pass sees it. Not tracked by the garbage collector (it holds
    only strings and numbers): a pass over 100,000 execs made as many tracked objects,
    and the full collections they set off held every thread, the loop's too, for
    hundreds of milliseconds."""

    id: str
    sandbox: str
    state: str
    name: str | None
    ended_at: float | None


@dataclass(frozen=True)
class Prune:
    """An exec whose files are (being) removed: ``logs`` keeps its record, ``exec``
    removes the record too (``tether rm``)."""

    exec_id: str
    what: str
    reason: str
    bytes: int
    pruned_at: float
    done: bool


#: A read connection (``Store.reads``: a pass plans in a worker thread), or None for
#: the store's own.
Db = sqlite3.Connection | None
#: Up to this many streams, compaction names each one's newest event to keep (read once
#: per pass); above it, each transaction finds them again with a ``GROUP BY``.
KEEP_LISTED = 500


class RetentionStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store._db  # the store's connection: this module is part of the store

    # ------------------------------------------------------------------ journal
    def floor(self) -> int:
        """The highest ``gseq`` compaction removed (0: nothing ever was)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'journal_floor'").fetchone()
        return int(row[0]) if row else 0

    def stream_floor(self, stream: str) -> int:
        """The highest ``seq`` of ``stream`` compaction removed (0: none)."""
        row = self._db.execute("SELECT seq FROM journal_floor WHERE stream = ?",
                               (stream,)).fetchone()
        return int(row[0]) if row else 0

    def floor_of(self, stream: str | None) -> int:
        """The floor of a stream's ``seq``, or of the global ``gseq`` for None."""
        return self.floor() if stream is None else self.stream_floor(stream)

    def compaction_bound(self, before: float, live_execs: list[str], db: Db = None) -> int:
        """The highest ``gseq`` that may go: older than ``before`` (event time) and
        below the first event of every live exec (its terminal watcher reads them)."""
        db = db or self._db
        row = db.execute(
            "SELECT MAX(gseq) FROM events WHERE json_extract(body, '$.time') < ?",
            (before,)).fetchone()
        bound = int(row[0] or 0)
        if live_execs and bound:
            for i in range(0, len(live_execs), 500):  # SQLite's limit on variables
                chunk = live_execs[i:i + 500]
                pin = db.execute(
                    "SELECT MIN(gseq) FROM events WHERE json_extract(body, '$.exec') IN "
                    f"({','.join('?' * len(chunk))})", chunk).fetchone()
                if pin[0] is not None:
                    bound = min(bound, int(pin[0]) - 1)
        row = db.execute("SELECT value FROM meta WHERE key = 'journal_floor'").fetchone()
        return max(bound, int(row[0]) if row else 0)

    def count_compactable(self, bound: int, db: Db = None) -> int:
        row = (db or self._db).execute(
            "SELECT COUNT(*) FROM events WHERE gseq <= ? AND gseq NOT IN "
            "(SELECT MAX(gseq) FROM events GROUP BY stream)", (bound,)).fetchone()
        return int(row[0])

    def newest_events(self, db: Db = None) -> list[int] | None:
        """Each stream's newest event (``gseq``), which compaction keeps: None when there
        are more than :data:`KEEP_LISTED` streams (each step then finds them itself).
        Read once per pass: an event appended later is above the pass's bound anyway, so
        an older one it makes deletable is merely kept."""
        rows = (db or self._db).execute(
            "SELECT MAX(gseq) FROM events GROUP BY stream").fetchall()
        return None if len(rows) > KEEP_LISTED else [int(r[0]) for r in rows]

    def live_exec_ids(self, db: Db = None) -> list[str]:
        return [str(r[0]) for r in (db or self._db).execute(
            "SELECT id FROM execs WHERE state IN ('PENDING', 'RUNNING')").fetchall()]

    def compact(self, bound: int, keep_list: list[int] | None = None) -> int:
        """Delete the events up to ``bound`` (each stream's newest excepted: given in
        ``keep_list``, from :meth:`newest_events`, or found here) and raise the floors,
        in one transaction. Returns how many events went."""
        if bound <= self.floor():
            return 0
        args: tuple[int, ...] = ()
        if keep_list is None:
            keep = "(SELECT MAX(gseq) FROM events GROUP BY stream)"
        else:
            keep = f"({','.join('?' * len(keep_list))})"
            args = tuple(keep_list)
        with self._store._tx() as db:
            db.execute(
                "INSERT INTO journal_floor (stream, seq, gseq) "
                # NOT INDEXED: a range of the rowid, not a scan of (stream, seq) for GROUP BY
                f"SELECT stream, MAX(seq), MAX(gseq) FROM events NOT INDEXED WHERE gseq <= ? "
                f"AND gseq NOT IN {keep} GROUP BY stream "
                "ON CONFLICT (stream) DO UPDATE SET seq = MAX(seq, excluded.seq), "
                "gseq = MAX(gseq, excluded.gseq)", (bound, *args))
            n = db.execute(f"DELETE FROM events WHERE gseq <= ? AND gseq NOT IN {keep}",
                           (bound, *args)).rowcount
            db.execute("UPDATE meta SET value = ? WHERE key = 'journal_floor'", (str(bound),))
        return int(n)

    # ------------------------------------------------------------------ execs
    def ended_execs(self, db: Db = None) -> list[Ended]:
        """Settled execs whose files are not (being) removed, oldest end first (the
        columns a pass needs, without decoding whole records)."""
        rows = (db or self._db).execute(
            "SELECT id, sandbox_id, state, name, json_extract(record, '$.ended_at') AS ended "
            f"FROM execs WHERE state IN ({','.join('?' * len(EXEC_TERMINAL))}) "
            "AND id NOT IN (SELECT exec_id FROM exec_prunes) ORDER BY COALESCE(ended, 0)",
            sorted(EXEC_TERMINAL))
        return [Ended(r[0], r[1], r[2], r[3], None if r[4] is None else float(r[4]))
                for r in rows]  # a cursor, read row by row: no list of 100,000 tuples

    def exec_owners(self, db: Db = None) -> list[tuple[str, str, str | None]]:
        """Every exec's id, sandbox and lineage (for ``retention.df``)."""
        rows = (db or self._db).execute("SELECT id, sandbox_id, json_extract(record, '$.lineage') "
                                "FROM execs").fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def names(self, table: str, ids: list[str], db: Db = None) -> dict[str, str | None]:
        """The names of these sandboxes or lineages (``table``), by id (for ``df``)."""
        assert table in ("sandboxes", "lineages")
        out: dict[str, str | None] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            out.update((str(r[0]), r[1]) for r in (db or self._db).execute(
                f"SELECT id, name FROM {table} WHERE id IN ({','.join('?' * len(chunk))})",
                chunk).fetchall())
        return out

    def get_prune(self, exec_id: str) -> Prune | None:
        row = self._db.execute(
            "SELECT exec_id, what, reason, bytes, pruned_at, done FROM exec_prunes "
            "WHERE exec_id = ?", (exec_id,)).fetchone()
        return None if row is None else Prune(row[0], row[1], row[2], int(row[3]),
                                              float(row[4]), bool(row[5]))

    def unfinished(self) -> list[Prune]:
        rows = self._db.execute(
            "SELECT exec_id, what, reason, bytes, pruned_at, done FROM exec_prunes "
            "WHERE done = 0 ORDER BY rowid").fetchall()
        return [Prune(r[0], r[1], r[2], int(r[3]), float(r[4]), False) for r in rows]

    def escalate(self, exec_id: str, reason: str) -> None:
        """An exec whose logs were pruned is now removed whole (``tether rm``)."""
        with self._store._tx() as db:
            db.execute("UPDATE exec_prunes SET what = 'exec', reason = ?, done = 0 "
                       "WHERE exec_id = ?", (reason, exec_id))

    def mark(self, recs: Sequence[tuple[ExecLike, int]], what: str, reason: str,
             now: float) -> list[Event]:
        """Mark execs (with the bytes their files hold) before their files go, each
        with its ``exec.pruned`` event, in one transaction."""
        out: list[Event] = []
        with self._store._tx() as db:
            for rec, size in recs:
                db.execute("INSERT INTO exec_prunes VALUES (?, ?, ?, ?, ?, 0)",
                           (rec.id, what, reason, size, now))
                out.append(self._store._append(
                    db, rec.sandbox, "exec.pruned", exec_id=rec.id, state=rec.state,
                    reason=reason, data={"what": what, "bytes": size}))
        return out

    def finish_logs(self, exec_ids: list[str]) -> None:
        """The logs of these execs are gone: their marks are done (one transaction)."""
        with self._store._tx() as db:
            db.executemany("UPDATE exec_prunes SET done = 1 WHERE exec_id = ?",
                           [(i,) for i in exec_ids])

    def finish(self, prune: Prune, rec: ExecLike | None) -> Event | None:
        """The files are gone: a ``logs`` prune is done; an ``exec`` one removes the
        record (journaled ``exec.removed``) and its mark."""
        with self._store._tx() as db:
            if prune.what != "exec":
                db.execute("UPDATE exec_prunes SET done = 1 WHERE exec_id = ?",
                           (prune.exec_id,))
                return None
            db.execute("DELETE FROM execs WHERE id = ?", (prune.exec_id,))
            db.execute("DELETE FROM exec_prunes WHERE exec_id = ?", (prune.exec_id,))
            if rec is None:
                return None
            return self._store._append(db, rec.sandbox, "exec.removed", exec_id=rec.id,
                                       state=rec.state, reason=prune.reason,
                                       data={"bytes": prune.bytes})
