"""The digest's tables (migration 10): versioned nodes, their latest version, and
rollup checkpoints; and the reads a rollup makes of execs and the journal.

A node's state changes are guarded by ``DIGEST_TRANSITIONS`` in the transaction
that writes them, and the end of a build (COMPLETE or FAILED), its ``digest.node``
journal event and the level's checkpoint are one transaction: a rollup killed at
any point resumes from the last node it finished.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import msgspec

from tether.digest.summary import Leaf
from tether.model.digest import DigestNode, DigestSummary, Level
from tether.model.records import Event, ExecRecord
from tether.model.states import DigestState, check_transition
from tether.store.sqlite import Store

_enc = msgspec.json.Encoder()
_dec_node = msgspec.json.Decoder(DigestNode)
_dec_exec = msgspec.json.Decoder(ExecRecord)
_dec_event = msgspec.json.Decoder(Event)

#: A read connection (``Store.reads``), or None for the store's own.
Db = sqlite3.Connection | None

_ENDED = "json_extract(record, '$.ended_at')"
# An attempt of a lineage that had an earlier attempt that really started: a revival.
_REVIVAL = """EXISTS (SELECT 1 FROM execs p
    WHERE json_extract(p.record, '$.lineage') = json_extract(e.record, '$.lineage')
      AND json_extract(p.record, '$.created_at') < json_extract(e.record, '$.created_at')
      AND COALESCE(json_extract(p.record, '$.never_started'), 0) = 0)"""


class DigestTables:
    """Digest reads and writes over the daemon's one :class:`Store` connection. The reads
    take a connection ``db``: a pass makes them in a worker thread with a read connection
    of its own (``Store.reads``); without one, the store's (inside its transactions)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store._db  # same package: one connection, one writer
        self.reads = store.reads

    # ------------------------------------------------------------------ leaves
    def ended_times(self, since: float, until: float, db: Db = None) -> list[float]:
        rows = (db or self._db).execute(
            f"SELECT {_ENDED} FROM execs WHERE {_ENDED} >= ? AND {_ENDED} < ?",
            (since, until)).fetchall()
        return [float(r[0]) for r in rows]

    def exec_ids(self, start: float, end: float, db: Db = None) -> list[str]:
        rows = (db or self._db).execute(
            f"SELECT id FROM execs WHERE {_ENDED} >= ? AND {_ENDED} < ? ORDER BY id",
            (start, end)).fetchall()
        return [str(r[0]) for r in rows]

    def leaves(self, start: float, end: float, db: Db = None) -> list[Leaf]:
        """The execs that ended in ``[start, end)``, with their agent turns."""
        db = db or self._db
        rows = db.execute(
            f"SELECT e.record, CASE WHEN json_extract(e.record, '$.lineage') IS NULL THEN 0 "
            f"ELSE {_REVIVAL} END FROM execs e "
            f"WHERE json_extract(e.record, '$.ended_at') >= ? "
            f"AND json_extract(e.record, '$.ended_at') < ? ORDER BY json_extract(e.record, "
            f"'$.ended_at'), e.id", (start, end)).fetchall()
        out = []
        agents: dict[str, Leaf] = {}
        for blob, revival in rows:
            rec = _dec_exec.decode(blob)
            leaf = Leaf(id=rec.id, sandbox=rec.sandbox, argv=list(rec.spec.argv), state=rec.state,
                        exit_code=rec.exit_code, signal=rec.signal, reason=rec.reason,
                        started_at=rec.started_at, ended_at=float(rec.ended_at or end),
                        lineage=rec.lineage, name=rec.name, revival=bool(revival))
            if rec.lineage is not None:
                agents[leaf.id] = leaf
            out.append(leaf)
        self._add_turns(agents, db)
        return out

    def _add_turns(self, leaves: dict[str, Leaf], db: sqlite3.Connection) -> None:
        """The agent turns of these leaves (by exec id), a few hundred execs per query."""
        ids = list(leaves)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = db.execute(
                "SELECT json_extract(body, '$.exec'), json_extract(body, '$.data.context_pct'),"
                " json_extract(body, '$.data.usage') FROM events WHERE json_extract(body, "
                f"'$.exec') IN ({','.join('?' * len(chunk))}) AND json_extract(body, '$.type')"
                " = 'agent.turn' ORDER BY gseq", chunk).fetchall()
            for exec_id, pct, usage in rows:
                leaf = leaves[exec_id]
                leaf.turns += 1
                if pct is not None:
                    leaf.context_peak_pct = max(float(pct), leaf.context_peak_pct or 0.0)
                if usage:
                    for k, v in msgspec.json.decode(usage, type=dict[str, int]).items():
                        leaf.tokens[k] = leaf.tokens.get(k, 0) + v

    # ------------------------------------------------------------------ nodes
    def latest(self, ident: str, db: Db = None) -> DigestNode | None:
        row = (db or self._db).execute(
            "SELECT n.record FROM digest_latest l JOIN digest_nodes n "
            "ON n.id = l.id AND n.version = l.version WHERE l.id = ?", (ident,)).fetchone()
        return None if row is None else _dec_node.decode(row[0])

    def nodes(self, level: Level, start: float, end: float, db: Db = None,
              ) -> list[DigestNode]:
        """The latest version of every ``level`` node whose period starts in [start, end)."""
        rows = (db or self._db).execute(
            "SELECT n.record FROM digest_latest l JOIN digest_nodes n "
            "ON n.id = l.id AND n.version = l.version "
            "WHERE l.level = ? AND l.period_start >= ? AND l.period_start < ? "
            "ORDER BY l.period_start", (level, start, end)).fetchall()
        return [_dec_node.decode(r[0]) for r in rows]

    def unfinished(self, level: Level, db: Db = None) -> list[DigestNode]:
        """Nodes a pass must build again wherever their period is: FAILED, or BUILDING
        when a crash interrupted their build."""
        rows = (db or self._db).execute(
            "SELECT n.record FROM digest_latest l JOIN digest_nodes n "
            "ON n.id = l.id AND n.version = l.version WHERE l.level = ? "
            "AND l.state IN ('FAILED', 'BUILDING') ORDER BY l.period_start",
            (level,)).fetchall()
        return [_dec_node.decode(r[0]) for r in rows]

    def versions(self, ident: str) -> list[DigestNode]:
        rows = self._db.execute("SELECT record FROM digest_nodes WHERE id = ? ORDER BY version",
                                (ident,)).fetchall()
        return [_dec_node.decode(r[0]) for r in rows]

    def _write(self, node: DigestNode, *, insert: bool) -> None:
        db = self._db
        if insert:
            db.execute("INSERT INTO digest_nodes (id, version, state, record) VALUES (?,?,?,?)",
                       (node.id, node.version, node.state, _enc.encode(node)))
        else:
            db.execute("UPDATE digest_nodes SET state = ?, record = ? WHERE id = ? AND version = ?",
                       (node.state, _enc.encode(node), node.id, node.version))
        db.execute("INSERT INTO digest_latest (id, version, level, period_start, state) "
                   "VALUES (?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET version = excluded.version,"
                   " state = excluded.state",
                   (node.id, node.version, node.level, node.period_start, node.state))

    def put_draft(self, node: DigestNode) -> DigestNode:
        """Record (or refresh) the placeholder of a period still open."""
        with self._store._tx():
            now = time.time()
            cur = self.latest(node.id)
            if cur is not None and cur.state != DigestState.DRAFT:
                return cur  # built already (a clock moved back): leave it
            node = msgspec.structs.replace(node, version=1, state=DigestState.DRAFT,
                                           created_at=cur.created_at if cur else now,
                                           updated_at=now)
            self._write(node, insert=cur is None)
            return node

    def begin_build(self, node: DigestNode) -> DigestNode:
        """BUILDING: a new node, a DRAFT closing, a FAILED or interrupted build again,
        or — under a COMPLETE version — version N+1 (a late child)."""
        with self._store._tx():
            now = time.time()
            cur = self.latest(node.id)
            if cur is None:
                built = msgspec.structs.replace(node, version=1, state=DigestState.BUILDING,
                                                created_at=now, updated_at=now)
                self._write(built, insert=True)
                return built
            if cur.state == DigestState.COMPLETE:
                built = msgspec.structs.replace(node, version=cur.version + 1,
                                                state=DigestState.BUILDING,
                                                created_at=now, updated_at=now)
                self._write(built, insert=True)
                return built
            check_transition("digest", node.id, cur.state, DigestState.BUILDING)
            built = msgspec.structs.replace(node, version=cur.version, state=DigestState.BUILDING,
                                            created_at=cur.created_at, updated_at=now)
            self._write(built, insert=False)
            return built

    def finish(self, node: DigestNode, *, summary: DigestSummary | None, error: str | None,
               summarizer: str | None, processed: int) -> tuple[DigestNode, Event]:
        """COMPLETE (with ``summary``) or FAILED (with ``error``), its journal event, and
        the level's checkpoint, in one transaction."""
        to = DigestState.COMPLETE if error is None else DigestState.FAILED
        with self._store._tx() as db:
            cur = self.latest(node.id)
            if cur is None or cur.version != node.version:
                raise KeyError(f"{node.id} v{node.version}")
            check_transition("digest", node.id, cur.state, to)
            done = msgspec.structs.replace(cur, state=to, summary=summary, error=error,
                                           summarizer=summarizer, updated_at=time.time())
            self._write(done, insert=False)
            data: dict[str, Any] = {"node": done.id, "level": done.level, "label": done.label,
                                    "version": done.version}
            if summary is not None:
                data["runs"] = summary.runs
                data["failed"] = summary.failed
            ev = self._store._append(db, None, "digest.node", state=str(to), reason=error,
                                     data=data)
            db.execute("INSERT INTO digest_checkpoints (level, period_start, processed, updated_at)"
                       " VALUES (?,?,?,?) ON CONFLICT(level) DO UPDATE SET period_start = "
                       "MAX(period_start, excluded.period_start), processed = processed + "
                       "excluded.processed, updated_at = excluded.updated_at",
                       (done.level, done.period_start, processed, time.time()))
            return done, ev

    def checkpoint(self, level: Level, db: Db = None) -> tuple[float, int] | None:
        """The start of the newest period of ``level`` built, and how many were built."""
        row = (db or self._db).execute(
            "SELECT period_start, processed FROM digest_checkpoints WHERE level = ?",
            (level,)).fetchone()
        return None if row is None else (float(row[0]), int(row[1]))

    def events_of_execs(self, exec_ids: list[str], db: Db = None) -> list[Event]:
        """The journal of these execs (a lineage's attempts), in order."""
        out: list[Event] = []
        for ident in exec_ids:
            rows = (db or self._db).execute(
                "SELECT body FROM events WHERE json_extract(body, '$.exec') = ? ORDER BY gseq",
                (ident,)).fetchall()
            out.extend(_dec_event.decode(r[0]) for r in rows)
        return sorted(out, key=lambda ev: ev.gseq)
