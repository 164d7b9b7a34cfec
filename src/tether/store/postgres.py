"""The core store on PostgreSQL (psycopg 3): ``CoreStore`` (``store/base.py``) for a
database shared by many hosts, with the same records as the SQLite store.

Records and events are ``jsonb`` (msgspec JSON of ``model/records.py``, read back as
text and decoded by msgspec, so unknown fields are ignored exactly as on SQLite).
Every change commits with its journal event; a transition reads its row ``FOR
UPDATE`` and checks ``check_transition`` before writing, so two writers racing on
one record serialise and the loser's move is refused, journaling nothing. The
journal's counter row (``journal_head``) is locked by each append until commit: gseq
and each stream's seq have no gap and follow commit order, so a reader's cursor never
skips an event that commits later. Imported only when a PostgreSQL URL is given.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgspec
import psycopg

from tether.model.errors import RpcCode, TetherError
from tether.model.records import (
    DEFAULT_SANDBOX,
    Event,
    ExecRecord,
    LineageRecord,
    SandboxRecord,
    SandboxSpec,
)
from tether.model.states import ExecState, LineageStatus, SandboxState, check_transition
from tether.store.base import DAEMON_STREAM, Page, SchemaTooNew
from tether.store.pg_migrations import LOCK_KEY, MIGRATIONS

_enc = msgspec.json.Encoder()
_dec_sandbox = msgspec.json.Decoder(SandboxRecord)
_dec_exec = msgspec.json.Decoder(ExecRecord)
_dec_event = msgspec.json.Decoder(Event)
_dec_lineage = msgspec.json.Decoder(LineageRecord)
# As the SQLite store's: where a list's ``query`` is looked for (lower-cased).
_EXEC_TEXT = ("strpos(lower(id || ' ' || COALESCE(name, '') || ' ' || COALESCE((SELECT "
              "string_agg(v, ' ') FROM jsonb_array_elements_text(record->'spec'->'argv') v), "
              "'')), %s) > 0")
_LINEAGE_TEXT = ("strpos(lower(id || ' ' || COALESCE(name, '') || ' ' || COALESCE(record->"
                 "'config'->>'provider', '') || ' ' || COALESCE(record->'config'->>'worktree', "
                 "'')), %s) > 0")

Conn = psycopg.Connection[tuple[Any, ...]]


def _json(obj: Any) -> str:
    return _enc.encode(obj).decode()


class PgStore:
    """All reads and writes of the core category A state in one PostgreSQL database.
    One connection: not thread-safe, one owner (open one ``PgStore`` per thread)."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        #: Called with every event inside the transaction that journals it (the
        #: connection, then the event), as on the SQLite store.
        self.on_append: Callable[[Conn, Event], None] | None = None
        self._db: Conn = psycopg.connect(url, autocommit=True,
                                         connect_timeout=max(1, int(connect_timeout)))
        self._epoch: str | None = None
        try:
            self.migrate()
        except BaseException:
            self._db.close()
            raise

    @property
    def epoch(self) -> str:
        if self._epoch is None:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
            assert row is not None
            self._epoch = str(row[0])
        return self._epoch

    # ------------------------------------------------------------------ infra
    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        try:
            with self._db.transaction():
                yield self._db
        except psycopg.errors.UntranslatableCharacter:
            # jsonb has no U+0000 (SQLite stores it): refuse the one write, precisely.
            raise TetherError(RpcCode.INVALID_PARAMS, "NUL_IN_TEXT",
                              "the PostgreSQL store cannot hold the character U+0000 (NUL) "
                              "in a record or event; remove it from the request's strings",
                              {}) from None

    def _ensure_version_table(self) -> None:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at double precision NOT NULL)")

    def schema_version(self) -> int:
        self._ensure_version_table()
        row = self._db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0) if row else 0

    def migrate(self) -> None:
        """Apply every known migration not yet recorded, each in its own transaction
        under the advisory lock (by set, like the SQLite store); then the default
        sandbox."""
        known = max(v for v, _, _ in MIGRATIONS)
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            self._ensure_version_table()
            current = self.schema_version()
        if current > known:
            raise SchemaTooNew(
                f"the PostgreSQL store {self._db.info.dbname!r} has schema version "
                f"{current} but this tether knows up to {known}; upgrade tether "
                "(migrations are forward-only)")
        for version, name, sql in sorted(MIGRATIONS):
            with self._tx() as db:
                db.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                if db.execute("SELECT 1 FROM schema_migrations WHERE version = %s",
                              (version,)).fetchone():
                    continue
                db.execute(sql)
                db.execute("INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                           (version, name, time.time()))
        self._ensure_default_sandbox()

    def _ensure_default_sandbox(self) -> None:
        now = time.time()
        rec = SandboxRecord(id=DEFAULT_SANDBOX, name=DEFAULT_SANDBOX, state=SandboxState.READY,
                            spec=SandboxSpec(runtime="process"), created_at=now, updated_at=now)
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            if db.execute("SELECT 1 FROM sandboxes WHERE id = %s",
                          (DEFAULT_SANDBOX,)).fetchone():
                return
            db.execute("INSERT INTO id_reservations VALUES (%s, 'sandbox', %s) "
                       "ON CONFLICT DO NOTHING", (DEFAULT_SANDBOX, now))
            self._insert_sandbox(db, rec)
            self._append(db, rec.id, "sandbox.state", state=rec.state, reason="implicit default")

    # ------------------------------------------------------------------ ids
    def reserve_id(self, kind: str, nbytes: int = 6) -> str:
        """Reserve a never-used id. Reservations outlive deletion, so an id is never reused."""
        while True:
            ident = secrets.token_hex(nbytes)
            row = self._db.execute(
                "INSERT INTO id_reservations VALUES (%s, %s, %s) ON CONFLICT DO NOTHING "
                "RETURNING id", (ident, kind, time.time())).fetchone()
            if row is not None:
                return ident

    # ------------------------------------------------------------------ events
    def _append(self, db: Conn, sandbox: str | None, type_: str, *,
                exec_id: str | None = None, state: str | None = None,
                reason: str | None = None, data: dict[str, Any] | None = None) -> Event:
        stream = DAEMON_STREAM if sandbox is None else sandbox
        # The head's row lock is held to commit: appends serialise here, and the MAX
        # below (a new snapshot under READ COMMITTED) sees every committed one.
        head = db.execute("UPDATE journal_head SET gseq = gseq + 1 RETURNING gseq").fetchone()
        assert head is not None
        gseq = int(head[0])
        row = db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE stream = %s",
                         (stream,)).fetchone()
        seq = int(row[0] if row else 0) + 1
        ev = Event(gseq=gseq, seq=seq, type=type_, time=time.time(), sandbox=sandbox,
                   exec=exec_id, state=state, reason=reason, data=data or {})
        db.execute("INSERT INTO events (gseq, stream, seq, body) VALUES (%s, %s, %s, %s)",
                   (gseq, stream, seq, _json(ev)))
        if self.on_append is not None:
            self.on_append(db, ev)
        return ev

    def append_event(self, sandbox: str | None, type_: str, *, exec_id: str | None = None,
                     state: str | None = None, reason: str | None = None,
                     data: dict[str, Any] | None = None) -> Event:
        with self._tx() as db:
            return self._append(db, sandbox, type_, exec_id=exec_id, state=state,
                                reason=reason, data=data)

    def events_since(self, *, since: int = 0, sandbox: str | None = None,
                     per_sandbox: bool = False, limit: int = 1000) -> list[Event]:
        """Events after a cursor: global ``gseq`` or, with ``per_sandbox``, that stream's seq."""
        if per_sandbox:
            stream = DAEMON_STREAM if sandbox is None else sandbox
            rows = self._db.execute(
                "SELECT body::text FROM events WHERE stream = %s AND seq > %s "
                "ORDER BY seq LIMIT %s", (stream, since, limit)).fetchall()
        elif sandbox is not None:
            rows = self._db.execute(
                "SELECT body::text FROM events WHERE stream = %s AND gseq > %s "
                "ORDER BY gseq LIMIT %s", (sandbox, since, limit)).fetchall()
        else:
            rows = self._db.execute(
                "SELECT body::text FROM events WHERE gseq > %s ORDER BY gseq LIMIT %s",
                (since, limit)).fetchall()
        return [_dec_event.decode(r[0]) for r in rows]

    def max_exec_event_n(self, exec_id: str, types: tuple[str, ...]) -> int:
        """The highest monitor event number journaled for an exec (-1 if none)."""
        row = self._db.execute(
            "SELECT MAX((body->'data'->>'n')::bigint) FROM events "
            "WHERE body->>'exec' = %s AND body->>'type' = ANY(%s)",
            (exec_id, list(types))).fetchone()
        return -1 if row is None or row[0] is None else int(row[0])

    def last_gseq(self) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(gseq), 0) FROM events").fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ sandboxes
    def _insert_sandbox(self, db: Conn, rec: SandboxRecord) -> None:
        db.execute("INSERT INTO sandboxes (id, name, state, record) VALUES (%s, %s, %s, %s)",
                   (rec.id, rec.name, rec.state, _json(rec)))

    def create_sandbox(self, name: str, spec: SandboxSpec) -> tuple[SandboxRecord, Event]:
        ident = self.reserve_id("sandbox")
        now = time.time()
        rec = SandboxRecord(id=ident, name=name, state=SandboxState.PENDING, spec=spec,
                            created_at=now, updated_at=now)
        try:
            with self._tx() as db:
                self._insert_sandbox(db, rec)
                ev = self._append(db, ident, "sandbox.state", state=rec.state, reason="created")
        except psycopg.errors.UniqueViolation:
            raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                              f"a sandbox named {name!r} already exists; pick another "
                              "name or remove it with `tether sandbox rm`",
                              {"name": name}) from None
        return rec, ev

    def _sandboxes(self, sql: str, args: tuple[Any, ...]) -> list[SandboxRecord]:
        return [_dec_sandbox.decode(r[0]) for r in self._db.execute(sql, args).fetchall()]

    def get_sandbox(self, ident: str) -> SandboxRecord | None:
        got = self._sandboxes("SELECT record::text FROM sandboxes WHERE id = %s", (ident,))
        return got[0] if got else None

    def find_sandboxes(self, ref: str) -> list[SandboxRecord]:
        """Live sandboxes whose id or name is ``ref``, else whose id starts with it."""
        got = self._sandboxes(
            "SELECT record::text FROM sandboxes WHERE (id = %s OR name = %s) "
            "AND state <> 'DELETED' ORDER BY n", (ref, ref))
        return got or self._sandboxes(
            "SELECT record::text FROM sandboxes WHERE left(id, %s) = %s "
            "AND state <> 'DELETED' ORDER BY n", (len(ref), ref))

    def list_sandboxes(self, include_deleted: bool = False) -> list[SandboxRecord]:
        where = "" if include_deleted else " WHERE state <> 'DELETED'"
        return self._sandboxes(f"SELECT record::text FROM sandboxes{where} ORDER BY n", ())

    def _locked_sandbox(self, db: Conn, ident: str) -> SandboxRecord:
        row = db.execute("SELECT record::text FROM sandboxes WHERE id = %s FOR UPDATE",
                         (ident,)).fetchone()
        if row is None:
            raise KeyError(ident)
        return _dec_sandbox.decode(row[0])

    def set_sandbox_spec(self, ident: str, spec: SandboxSpec, reason: str,
                         ) -> tuple[SandboxRecord, Event]:
        """Replace a sandbox's spec; journaled as ``sandbox.spec``."""
        with self._tx() as db:
            rec = msgspec.structs.replace(self._locked_sandbox(db, ident), spec=spec,
                                          updated_at=time.time())
            db.execute("UPDATE sandboxes SET record = %s WHERE id = %s", (_json(rec), ident))
            ev = self._append(db, ident, "sandbox.spec", state=rec.state, reason=reason,
                              data={"runtime": spec.runtime})
        return rec, ev

    def transition_sandbox(self, ident: str, to: SandboxState, reason: str | None = None,
                           ) -> tuple[SandboxRecord, Event]:
        with self._tx() as db:
            rec = self._locked_sandbox(db, ident)
            check_transition("sandbox", ident, rec.state, to)
            now = time.time()
            rec = msgspec.structs.replace(rec, state=str(to), reason=reason, updated_at=now)
            db.execute("UPDATE sandboxes SET state = %s, record = %s WHERE id = %s",
                       (rec.state, _json(rec), ident))
            if to == SandboxState.DELETED:
                db.execute("INSERT INTO sandbox_deletions VALUES (%s, %s) ON CONFLICT "
                           "(sandbox_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
                           (ident, now))
            ev = self._append(db, ident, "sandbox.state", state=rec.state, reason=reason)
        return rec, ev

    # ------------------------------------------------------------------ execs
    def _insert_exec(self, db: Conn, rec: ExecRecord, request_key: str | None) -> None:
        db.execute("INSERT INTO execs (id, sandbox_id, name, state, request_key, record) "
                   "VALUES (%s, %s, %s, %s, %s, %s)",
                   (rec.id, rec.sandbox, rec.name, rec.state, request_key, _json(rec)))

    def create_exec(self, rec: ExecRecord) -> tuple[ExecRecord, Event]:
        """Commit an exec's intent (PENDING) before anything is started."""
        with self._tx() as db:
            self._insert_exec(db, rec, rec.request_key)
            ev = self._append(db, rec.sandbox, "exec.state", exec_id=rec.id, state=rec.state,
                              reason=rec.reason or "accepted", data={"argv": rec.spec.argv})
        return rec, ev

    def restore(self, sandboxes: list[SandboxRecord], execs: list[ExecRecord],
                data: dict[str, Any]) -> list[Event]:
        """Put back what a lost store held, journaling ``store.recovered`` first."""
        now = time.time()
        with self._tx() as db:
            out = [self._append(db, None, "store.recovered", reason=str(data["reason"]),
                                data=data)]
            for sb in sandboxes:
                db.execute("INSERT INTO id_reservations VALUES (%s, 'sandbox', %s) "
                           "ON CONFLICT DO NOTHING", (sb.id, now))
                self._insert_sandbox(db, sb)
                out.append(self._append(db, sb.id, "sandbox.state", state=sb.state,
                                        reason=sb.reason))
            for rec in execs:
                db.execute("INSERT INTO id_reservations VALUES (%s, 'exec', %s) "
                           "ON CONFLICT DO NOTHING", (rec.id, now))
                self._insert_exec(db, rec, None)
                out.append(self._append(db, rec.sandbox, "exec.state", exec_id=rec.id,
                                        state=rec.state, reason=rec.reason,
                                        data={"argv": rec.spec.argv}))
        return out

    def _execs(self, sql: str, args: tuple[Any, ...]) -> list[ExecRecord]:
        return [_dec_exec.decode(r[0]) for r in self._db.execute(sql, args).fetchall()]

    def get_exec(self, ident: str) -> ExecRecord | None:
        got = self._execs("SELECT record::text FROM execs WHERE id = %s", (ident,))
        return got[0] if got else None

    def exec_by_request_key(self, key: str) -> ExecRecord | None:
        got = self._execs("SELECT record::text FROM execs WHERE request_key = %s", (key,))
        return got[0] if got else None

    def find_execs(self, ref: str) -> list[ExecRecord]:
        """Resolve an exec reference: exact id, then unique name (newest), then id prefix."""
        return (self._execs("SELECT record::text FROM execs WHERE id = %s", (ref,))
                or self._execs("SELECT record::text FROM execs WHERE name = %s "
                               "ORDER BY n DESC LIMIT 1", (ref,))
                or self._execs("SELECT record::text FROM execs WHERE left(id, %s) = %s "
                               "ORDER BY n LIMIT 10", (len(ref), ref)))

    def list_execs_of_lineage(self, lineage: str) -> list[ExecRecord]:
        return self._execs("SELECT record::text FROM execs WHERE record->>'lineage' = %s "
                           "ORDER BY n", (lineage,))

    def live_exec_named(self, name: str) -> ExecRecord | None:
        got = self._execs("SELECT record::text FROM execs WHERE name = %s AND state IN "
                          "('PENDING', 'RUNNING') ORDER BY n LIMIT 1", (name,))
        return got[0] if got else None

    def list_execs(self, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> list[ExecRecord]:
        sql = "SELECT record::text FROM execs WHERE true"
        args: list[Any] = []
        if sandbox is not None:
            sql += " AND sandbox_id = %s"
            args.append(sandbox)
        if states:
            sql += " AND state = ANY(%s)"
            args.append(list(states))
        return self._execs(sql + " ORDER BY n", tuple(args))

    def page_execs(self, page: Page, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> tuple[list[ExecRecord], int]:
        where: list[str] = ["true"]
        args: list[Any] = []
        if sandbox is not None:
            where.append("sandbox_id = %s")
            args.append(sandbox)
        if states:
            where.append("state = ANY(%s)")
            args.append(list(states))
        if page.query:
            where.append(_EXEC_TEXT)
            args.append(page.query.lower())
        rows, total = self._page("execs", " AND ".join(where), args, page)
        return [_dec_exec.decode(r) for r in rows], total

    def _page(self, table: str, where: str, args: list[Any], page: Page,
              ) -> tuple[list[str], int]:
        row = self._db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}",
                               tuple(args)).fetchone()
        total = int(row[0]) if row is not None else 0
        sql = (f"SELECT record::text FROM {table} WHERE {where} ORDER BY n "
               + ("DESC" if page.newest_first else "ASC") + " LIMIT %s OFFSET %s")
        rows = self._db.execute(sql, (*args, page.limit, page.offset)).fetchall()
        return [r[0] for r in rows], total

    def count_execs(self) -> dict[str, int]:
        rows = self._db.execute("SELECT state, COUNT(*) FROM execs GROUP BY state").fetchall()
        return {str(s): int(n) for s, n in rows}

    def transition_exec(self, ident: str, to: ExecState, *, reason: str | None = None,
                        data: dict[str, Any] | None = None, **fields: Any,
                        ) -> tuple[ExecRecord, Event]:
        """Move an exec to ``to`` (guarded under its row lock) and journal it, in one
        transaction."""
        with self._tx() as db:
            row = db.execute("SELECT record::text FROM execs WHERE id = %s FOR UPDATE",
                             (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            rec = _dec_exec.decode(row[0])
            check_transition("exec", ident, rec.state, to)
            rec = msgspec.structs.replace(rec, state=str(to), reason=reason, **fields)
            db.execute("UPDATE execs SET state = %s, record = %s WHERE id = %s",
                       (rec.state, _json(rec), ident))
            payload: dict[str, Any] = dict(data or {})
            if rec.exit_code is not None:
                payload["exit_code"] = rec.exit_code
            if rec.signal is not None:
                payload["signal"] = rec.signal
            ev = self._append(db, rec.sandbox, "exec.state", exec_id=ident, state=rec.state,
                              reason=reason, data=payload)
        return rec, ev

    # ------------------------------------------------------------------ lineages
    def create_lineage(self, rec: LineageRecord) -> tuple[LineageRecord, Event]:
        with self._tx() as db:
            db.execute("INSERT INTO lineages (id, name, status, record) "
                       "VALUES (%s, %s, %s, %s)", (rec.id, rec.name, rec.status, _json(rec)))
            ev = self._append(db, rec.config.sandbox, "lineage.state", state=rec.status,
                              reason="created", data={"lineage": rec.id,
                                                      "provider": rec.config.provider})
        return rec, ev

    def _lineages(self, sql: str, args: tuple[Any, ...]) -> list[LineageRecord]:
        return [_dec_lineage.decode(r[0]) for r in self._db.execute(sql, args).fetchall()]

    def get_lineage(self, ident: str) -> LineageRecord | None:
        got = self._lineages("SELECT record::text FROM lineages WHERE id = %s", (ident,))
        return got[0] if got else None

    def lineage_by_request_key(self, key: str) -> LineageRecord | None:
        got = self._lineages("SELECT record::text FROM lineages "
                             "WHERE record->>'request_key' = %s ORDER BY n LIMIT 1", (key,))
        return got[0] if got else None

    def find_lineages(self, ref: str) -> list[LineageRecord]:
        return (self._lineages("SELECT record::text FROM lineages WHERE id = %s OR name = %s "
                               "ORDER BY n DESC LIMIT 10", (ref, ref))
                or self._lineages("SELECT record::text FROM lineages WHERE left(id, %s) = %s "
                                  "ORDER BY n LIMIT 10", (len(ref), ref)))

    def list_lineages(self, statuses: tuple[str, ...] | None = None) -> list[LineageRecord]:
        if statuses:
            return self._lineages("SELECT record::text FROM lineages WHERE status = ANY(%s) "
                                  "ORDER BY n", (list(statuses),))
        return self._lineages("SELECT record::text FROM lineages ORDER BY n", ())

    def page_lineages(self, page: Page, *, statuses: tuple[str, ...] | None = None,
                      ) -> tuple[list[LineageRecord], int]:
        where: list[str] = ["true"]
        args: list[Any] = []
        if statuses:
            where.append("status = ANY(%s)")
            args.append(list(statuses))
        if page.query:
            where.append(_LINEAGE_TEXT)
            args.append(page.query.lower())
        rows, total = self._page("lineages", " AND ".join(where), args, page)
        return [_dec_lineage.decode(r) for r in rows], total

    def update_lineage(self, ident: str, *, status: LineageStatus | None = None,
                       event: str | None = None, reason: str | None = None,
                       data: dict[str, Any] | None = None,
                       event_reason: str | None = None, **fields: Any,
                       ) -> tuple[LineageRecord, Event | None]:
        """Change a lineage (status guarded under its row lock), journaling ``event`` in
        the same transaction; a status change is always journaled as ``lineage.state``.
        ``event_reason``: the event's reason, leaving the lineage's ``reason`` as is."""
        with self._tx() as db:
            row = db.execute("SELECT record::text FROM lineages WHERE id = %s FOR UPDATE",
                             (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            rec = _dec_lineage.decode(row[0])
            if status is not None and status != rec.status:
                check_transition("lineage", ident, rec.status, status)
                fields["status"] = str(status)
                event = event or "lineage.state"
            if reason is not None:
                fields["reason"] = reason
            rec = msgspec.structs.replace(rec, updated_at=time.time(), **fields)
            db.execute("UPDATE lineages SET status = %s, record = %s WHERE id = %s",
                       (rec.status, _json(rec), ident))
            ev = None
            if event is not None:
                payload = {"lineage": ident, "lifecycle": rec.lifecycle,
                           "attempt": rec.attempt, **(data or {})}
                ev = self._append(db, rec.config.sandbox, event, exec_id=rec.exec_id,
                                  state=rec.status if event == "lineage.state" else rec.lifecycle,
                                  reason=event_reason or reason, data=payload)
        return rec, ev


if TYPE_CHECKING:
    from tether.store.base import CoreStore

    _conforms: type[CoreStore] = PgStore
