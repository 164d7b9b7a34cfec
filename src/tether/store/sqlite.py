"""The SQLite store: WAL mode, ``BEGIN IMMEDIATE``, one writer (the daemon).

Every state change is written together with its journal event in one
transaction, so the journal can have no gap and no duplicate, and the next
sequence number after a crash is simply ``MAX(seq) + 1``.

``synchronous=NORMAL`` in WAL mode survives any process crash (``kill -9``) with
every committed transaction; a power cut may lose the last few commits but
never corrupts the file. ``docs/STATE.md`` states this promise.

The WAL is bounded: no commit checkpoints (its fsyncs would be on the request path);
the daemon calls :meth:`Store.checkpoint` from a worker thread, which copies the WAL
into the database without blocking the writer and, once the WAL has passed
:data:`WAL_LIMIT`, truncates it. The store file is watched too: a store deleted or
replaced under the daemon (:meth:`Store.check_file`) refuses every later write with
``STORE_LOST`` instead of committing into a file nobody will ever open again.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgspec

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
from tether.store.migrations import MIGRATIONS
from tether.store.reads import Reads

_enc = msgspec.json.Encoder()
_dec_sandbox = msgspec.json.Decoder(SandboxRecord)
_dec_exec = msgspec.json.Decoder(ExecRecord)
_dec_event = msgspec.json.Decoder(Event)
_dec_lineage = msgspec.json.Decoder(LineageRecord)
# What a list's ``query`` is looked for in (lower-cased, ASCII): an exec's id, name and
# command line; a lineage's id, name, provider and worktree.
_EXEC_TEXT = ("instr(lower(id || ' ' || COALESCE(name, '') || ' ' || COALESCE((SELECT "
              "group_concat(value, ' ') FROM json_each(record, '$.spec.argv')), '')), ?) > 0")
_LINEAGE_TEXT = ("instr(lower(id || ' ' || COALESCE(name, '') || ' ' || COALESCE(json_extract("
                 "record, '$.config.provider'), '') || ' ' || COALESCE(json_extract(record, "
                 "'$.config.worktree'), '')), ?) > 0")

__all__ = ["DAEMON_STREAM", "WAL_LIMIT", "SchemaTooNew", "Store", "StoreCorrupt", "StoreLost"]

#: Bytes of WAL past which a checkpoint truncates it (and SQLite's own reset keeps it no
#: larger: ``journal_size_limit``). The WAL then never holds much more than this plus what
#: is written between two checkpoints (the daemon looks every second).
WAL_LIMIT = 64 * 1024 * 1024
#: How long a truncating checkpoint waits for readers (ms): the daemon's writes wait as long.
TRUNCATE_WAIT_MS = 100
#: Frames a truncating checkpoint may still have to copy while it holds the write lock:
#: it first catches up without the lock (PASSIVE) until at most this many are left, so
#: the commits it makes wait stay short.
_CATCH_UP_FRAMES = 256


class StoreCorrupt(Exception):
    """``PRAGMA quick_check`` failed, or SQLite does not recognise the file at all."""


class StoreLost(TetherError):
    """The store file was deleted or replaced while the daemon had it open: its writes
    would go to a file no later daemon opens, so none is made."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            RpcCode.UNAVAILABLE, "STORE_LOST",
            f"the store {path} was {why} while the daemon ran, so it accepts no more "
            "changes (running execs keep running under their monitors); stop it (`tether "
            "daemon stop`), then put the file back, or start with `tether daemon "
            "--recover-store` to rebuild the store from the execs' files",
            {"path": str(path), "why": why})
        self.why = why


# SQLITE_CORRUPT and SQLITE_NOTADB: the file's content is bad (not the disk or a lock).
_CORRUPT_CODES = (11, 26)


class Store:
    """All reads and writes of category A state. Not thread-safe: one owner."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Called with every event inside the transaction that journals it (the daemon's
        #: outbox matcher writes its deliveries there: store/outbox.py).
        self.on_append: Callable[[sqlite3.Connection, Event], None] | None = None
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            self._quick_check()
        except BaseException:
            self._db.close()
            raise
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        # No automatic checkpoint: the commit that crossed 1000 WAL pages paid for one
        # (its fsyncs) on the request path, a tail in every start's latency. The daemon
        # checkpoints in a worker thread at every sweep instead (``checkpoint``); the last
        # connection to close checkpoints too, as before.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self.wal_limit = WAL_LIMIT
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
        #: Why the file at ``path`` is no longer this store's, once seen (then for good).
        self.lost: str | None = None
        self._ident = _identity(path)  # the file exists: quick_check read it
        self.migrate()
        self._epoch: str | None = None
        #: Heavy reads in worker threads, each with its own connection (store/reads.py).
        self.reads = Reads(path)

    @property
    def epoch(self) -> str:
        """A random id made with the store (migration 6): cursors hold only within it."""
        if self._epoch is None:
            self._epoch = str(self._db.execute(
                "SELECT value FROM meta WHERE key = 'epoch'").fetchone()[0])
        return self._epoch

    # ------------------------------------------------------------------ infra
    def checkpoint(self) -> dict[str, int]:
        """Copy the WAL into the database file, on a connection of its own, so that a
        worker thread can do it while the daemon serves. PASSIVE first: it never waits
        for the writer. Once the WAL has passed :data:`WAL_LIMIT` (a writer faster than
        the copy, so SQLite never got to restart it; ``wal_limit``), catch up the same
        way, then TRUNCATE it: the writer waits only for the last few frames and the truncation.
        Durability does not depend on it: a committed WAL frame survives a crash.
        Returns what it did: the WAL's ``frames`` and ``copied`` after the passive pass,
        ``over`` (1: it had passed the limit), ``truncated`` (0 or 1: 0 when over means a
        reader's snapshot or the writer held it past the busy timeout) and ``wal_bytes``
        at the end."""
        self.check_file()  # never on a path that is no longer this store's
        # Over the limit as this checkpoint starts: truncate, whatever the size after the
        # passive pass. That pass may copy every frame, and the writer's next commit then
        # restarts the WAL and cuts its file down to journal_size_limit: exactly the
        # limit, not over it, so a size read then skipped the truncation (and its log).
        over = self.wal_size() > self.wal_limit
        # mode=rw: a checkpoint must never create an empty store where the file vanished
        con = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True,
                              isolation_level=None, check_same_thread=False)
        try:
            con.execute("PRAGMA busy_timeout=5000")
            _busy, frames, copied = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            truncated = 0
            if over:
                for _ in range(16):
                    if frames - copied <= _CATCH_UP_FRAMES:
                        break
                    _busy, frames, copied = con.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                # TRUNCATE holds the write lock while it waits for readers: a reader's
                # snapshot (a long report in a store-read thread) would stall every commit
                # of the daemon's loop for the whole busy timeout. Wait briefly; the check
                # runs again in a second.
                con.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
                busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                truncated = int(not busy)
        finally:
            con.close()
        return {"frames": int(frames), "copied": int(copied), "over": int(over),
                "truncated": truncated, "wal_bytes": self.wal_size()}

    def limit_wal(self, limit: int) -> None:
        """Bound the WAL at ``limit`` bytes instead of :data:`WAL_LIMIT`."""
        self.wal_limit = int(limit)
        self._db.execute(f"PRAGMA journal_size_limit={self.wal_limit}")

    def wal_size(self) -> int:
        """The WAL file's size in bytes (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    def check_file(self) -> None:
        """Raise :class:`StoreLost` if the file at ``path`` is not the one this store
        opened (deleted, or replaced by another inode). One ``stat``: cheap enough to run
        before every transaction, which is where it runs."""
        if self.lost is None:
            try:
                ident = _identity(self.path)
            except FileNotFoundError:
                self.lost = "deleted"
            else:
                if ident != self._ident:
                    self.lost = "replaced by another file"
        if self.lost is not None:
            raise StoreLost(self.path, self.lost)

    def wal_bytes(self) -> int:
        """The write-ahead log's size now (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def close(self) -> None:
        self.reads.close()
        self._db.close()

    def _quick_check(self) -> None:
        """Refuse a damaged file before anything reads it: otherwise it serves until a
        query meets the bad page ("malformed"), or fails mid-migration."""
        try:
            rows = self._db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorcode", None) in _CORRUPT_CODES:
                raise StoreCorrupt(str(e)) from None
            raise
        # One line each: SQLite's first row can itself span lines ("*** in database main
        # ***\nPage 12: …"), and the refusal promises one line.
        problems = [" ".join(str(r[0]).split()) for r in rows]
        if problems != ["ok"]:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            raise StoreCorrupt(problems[0] + more)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.check_file()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def schema_version(self) -> int:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        row = self._db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    def migrate(self) -> None:
        """Apply every known migration not yet recorded, in version order. By set, not
        by the highest version: features numbered apart (7, 8, 9, 10) may land in any
        order, and a store that has 10 must still get 8 when it arrives."""
        current = self.schema_version()
        known = max(v for v, _, _ in MIGRATIONS)
        if current > known:
            raise SchemaTooNew(
                f"{self.path} has schema version {current} but this tether knows up to "
                f"{known}; upgrade tether (migrations are forward-only)"
            )
        applied = {int(r[0]) for r in self._db.execute(
            "SELECT version FROM schema_migrations").fetchall()}
        for version, name, sql in sorted(MIGRATIONS):
            if version in applied:
                continue
            with self._tx() as db:
                for statement in sql.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                           (version, name, time.time()))
        self._ensure_default_sandbox()

    def _ensure_default_sandbox(self) -> None:
        if self.get_sandbox(DEFAULT_SANDBOX) is not None:
            return
        now = time.time()
        rec = SandboxRecord(id=DEFAULT_SANDBOX, name=DEFAULT_SANDBOX, state=SandboxState.READY,
                            spec=SandboxSpec(runtime="process"), created_at=now, updated_at=now)
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO id_reservations VALUES (?, 'sandbox', ?)",
                       (DEFAULT_SANDBOX, now))
            self._insert_sandbox(db, rec)
            self._append(db, rec.id, "sandbox.state", state=rec.state, reason="implicit default")

    # ------------------------------------------------------------------ ids
    def reserve_id(self, kind: str, nbytes: int = 6) -> str:
        """Reserve a never-used id. Reservations outlive deletion, so an id is never reused."""
        with self._tx() as db:
            while True:
                ident = secrets.token_hex(nbytes)
                try:
                    db.execute("INSERT INTO id_reservations VALUES (?, ?, ?)",
                               (ident, kind, time.time()))
                    return ident
                except sqlite3.IntegrityError:
                    continue

    # ------------------------------------------------------------------ events
    def _append(self, db: sqlite3.Connection, sandbox: str | None, type_: str, *,
                exec_id: str | None = None, state: str | None = None,
                reason: str | None = None, data: dict[str, Any] | None = None) -> Event:
        stream = DAEMON_STREAM if sandbox is None else sandbox
        row = db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE stream = ?",
                         (stream,)).fetchone()
        seq = int(row[0]) + 1
        # The body needs the gseq that this insert allocates; '{}' until then (valid
        # JSON, because the journal is indexed by json_extract of the body).
        cur = db.execute("INSERT INTO events (stream, seq, body) VALUES (?, ?, '{}')",
                         (stream, seq))
        gseq = int(cur.lastrowid or 0)
        ev = Event(gseq=gseq, seq=seq, type=type_, time=time.time(), sandbox=sandbox,
                   exec=exec_id, state=state, reason=reason, data=data or {})
        db.execute("UPDATE events SET body = ? WHERE gseq = ?", (_enc.encode(ev), gseq))
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
                "SELECT body FROM events WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?",
                (stream, since, limit)).fetchall()
        elif sandbox is not None:
            rows = self._db.execute(
                "SELECT body FROM events WHERE stream = ? AND gseq > ? ORDER BY gseq LIMIT ?",
                (sandbox, since, limit)).fetchall()
        else:
            rows = self._db.execute(
                "SELECT body FROM events WHERE gseq > ? ORDER BY gseq LIMIT ?",
                (since, limit)).fetchall()
        return [_dec_event.decode(r[0]) for r in rows]

    def max_exec_event_n(self, exec_id: str, types: tuple[str, ...]) -> int:
        """The highest monitor event number journaled for an exec (-1 if none)."""
        row = self._db.execute(
            "SELECT MAX(json_extract(body, '$.data.n')) FROM events WHERE "
            "json_extract(body, '$.exec') = ? AND "
            f"json_extract(body, '$.type') IN ({','.join('?' * len(types))})",
            (exec_id, *types)).fetchone()
        return -1 if row[0] is None else int(row[0])

    def last_gseq(self) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(gseq), 0) FROM events").fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ sandboxes
    def _insert_sandbox(self, db: sqlite3.Connection, rec: SandboxRecord) -> None:
        db.execute("INSERT INTO sandboxes VALUES (?, ?, ?, ?)",
                   (rec.id, rec.name, rec.state, _enc.encode(rec)))

    def create_sandbox(self, name: str, spec: SandboxSpec) -> tuple[SandboxRecord, Event]:
        ident = self.reserve_id("sandbox")
        now = time.time()
        rec = SandboxRecord(id=ident, name=name, state=SandboxState.PENDING, spec=spec,
                            created_at=now, updated_at=now)
        with self._tx() as db:
            try:
                self._insert_sandbox(db, rec)
            except sqlite3.IntegrityError:
                raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                                  f"a sandbox named {name!r} already exists; pick another "
                                  "name or remove it with `tether sandbox rm`",
                                  {"name": name}) from None
            ev = self._append(db, ident, "sandbox.state", state=rec.state, reason="created")
        return rec, ev

    def get_sandbox(self, ident: str) -> SandboxRecord | None:
        row = self._db.execute("SELECT record FROM sandboxes WHERE id = ?", (ident,)).fetchone()
        return _dec_sandbox.decode(row[0]) if row else None

    def find_sandboxes(self, ref: str) -> list[SandboxRecord]:
        """Live sandboxes whose id or name is ``ref``, else whose id starts with it."""
        rows = self._db.execute(
            "SELECT record FROM sandboxes WHERE (id = ? OR name = ?) AND state != 'DELETED'",
            (ref, ref)).fetchall()
        if not rows:
            rows = self._db.execute(
                "SELECT record FROM sandboxes WHERE substr(id, 1, ?) = ? AND state != 'DELETED'",
                (len(ref), ref)).fetchall()
        return [_dec_sandbox.decode(r[0]) for r in rows]

    def list_sandboxes(self, include_deleted: bool = False) -> list[SandboxRecord]:
        sql = "SELECT record FROM sandboxes"
        if not include_deleted:
            sql += " WHERE state != 'DELETED'"
        return [_dec_sandbox.decode(r[0]) for r in self._db.execute(sql + " ORDER BY rowid")]

    def set_sandbox_spec(self, ident: str, spec: SandboxSpec, reason: str,
                         ) -> tuple[SandboxRecord, Event]:
        """Replace a sandbox's spec (the implicit default follows the daemon's
        --default-runtime); journaled as ``sandbox.spec``."""
        with self._tx() as db:
            row = db.execute("SELECT record FROM sandboxes WHERE id = ?", (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            rec = msgspec.structs.replace(_dec_sandbox.decode(row[0]), spec=spec,
                                          updated_at=time.time())
            db.execute("UPDATE sandboxes SET record = ? WHERE id = ?", (_enc.encode(rec), ident))
            ev = self._append(db, ident, "sandbox.spec", state=rec.state, reason=reason,
                              data={"runtime": spec.runtime})
        return rec, ev

    def transition_sandbox(self, ident: str, to: SandboxState, reason: str | None = None,
                           ) -> tuple[SandboxRecord, Event]:
        with self._tx() as db:
            row = db.execute("SELECT record FROM sandboxes WHERE id = ?", (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            rec = _dec_sandbox.decode(row[0])
            check_transition("sandbox", ident, rec.state, to)
            now = time.time()
            rec = msgspec.structs.replace(rec, state=str(to), reason=reason, updated_at=now)
            db.execute("UPDATE sandboxes SET state = ?, record = ? WHERE id = ?",
                       (rec.state, _enc.encode(rec), ident))
            if to == SandboxState.DELETED:
                db.execute("INSERT OR REPLACE INTO sandbox_deletions VALUES (?, ?)", (ident, now))
            ev = self._append(db, ident, "sandbox.state", state=rec.state, reason=reason)
        return rec, ev

    # ------------------------------------------------------------------ execs
    def create_exec(self, rec: ExecRecord) -> tuple[ExecRecord, Event]:
        """Commit an exec's intent (PENDING) before anything is started."""
        with self._tx() as db:
            db.execute("INSERT INTO execs VALUES (?, ?, ?, ?, ?, ?)",
                       (rec.id, rec.sandbox, rec.name, rec.state, rec.request_key,
                        _enc.encode(rec)))
            ev = self._append(db, rec.sandbox, "exec.state", exec_id=rec.id, state=rec.state,
                              reason=rec.reason or "accepted", data={"argv": rec.spec.argv})
        return rec, ev

    def restore(self, sandboxes: list[SandboxRecord], execs: list[ExecRecord],
                data: dict[str, Any]) -> list[Event]:
        """Put back what a lost store held, as far as files outside it tell (the
        daemon's ``--recover-store``), journaling ``store.recovered`` first: one
        transaction."""
        now = time.time()
        with self._tx() as db:
            out = [self._append(db, None, "store.recovered", reason=str(data["reason"]),
                                data=data)]
            for sb in sandboxes:
                db.execute("INSERT OR IGNORE INTO id_reservations VALUES (?, 'sandbox', ?)",
                           (sb.id, now))
                self._insert_sandbox(db, sb)
                out.append(self._append(db, sb.id, "sandbox.state", state=sb.state,
                                        reason=sb.reason))
            for rec in execs:
                db.execute("INSERT OR IGNORE INTO id_reservations VALUES (?, 'exec', ?)",
                           (rec.id, now))
                db.execute("INSERT INTO execs VALUES (?, ?, ?, ?, ?, ?)",
                           (rec.id, rec.sandbox, rec.name, rec.state, None, _enc.encode(rec)))
                out.append(self._append(db, rec.sandbox, "exec.state", exec_id=rec.id,
                                        state=rec.state, reason=rec.reason,
                                        data={"argv": rec.spec.argv}))
        return out

    def get_exec(self, ident: str) -> ExecRecord | None:
        row = self._db.execute("SELECT record FROM execs WHERE id = ?", (ident,)).fetchone()
        return _dec_exec.decode(row[0]) if row else None

    def exec_by_request_key(self, key: str) -> ExecRecord | None:
        row = self._db.execute("SELECT record FROM execs WHERE request_key = ?",
                               (key,)).fetchone()
        return _dec_exec.decode(row[0]) if row else None

    def find_execs(self, ref: str) -> list[ExecRecord]:
        """Resolve an exec reference: exact id, then unique name (newest), then id prefix."""
        row = self._db.execute("SELECT record FROM execs WHERE id = ?", (ref,)).fetchone()
        if row:
            return [_dec_exec.decode(row[0])]
        row = self._db.execute(
            "SELECT record FROM execs WHERE name = ? ORDER BY rowid DESC LIMIT 1",
            (ref,)).fetchone()
        if row:
            return [_dec_exec.decode(row[0])]
        rows = self._db.execute(
            "SELECT record FROM execs WHERE substr(id, 1, ?) = ? LIMIT 10",
            (len(ref), ref)).fetchall()
        return [_dec_exec.decode(r[0]) for r in rows]

    def list_execs_of_lineage(self, lineage: str) -> list[ExecRecord]:
        rows = self._db.execute(
            "SELECT record FROM execs WHERE json_extract(record, '$.lineage') = ? "
            "ORDER BY rowid", (lineage,)).fetchall()
        return [_dec_exec.decode(r[0]) for r in rows]

    def live_exec_named(self, name: str) -> ExecRecord | None:
        row = self._db.execute(
            "SELECT record FROM execs WHERE name = ? AND state IN ('PENDING', 'RUNNING')",
            (name,)).fetchone()
        return _dec_exec.decode(row[0]) if row else None

    def list_execs(self, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> list[ExecRecord]:
        sql = "SELECT record FROM execs WHERE 1=1"
        args: list[Any] = []
        if sandbox is not None:
            sql += " AND sandbox_id = ?"
            args.append(sandbox)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
        return [_dec_exec.decode(r[0]) for r in rows]

    def page_execs(self, page: Page, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> tuple[list[ExecRecord], int]:
        where: list[str] = ["1=1"]
        args: list[Any] = []
        if sandbox is not None:
            where.append("sandbox_id = ?")
            args.append(sandbox)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if page.query:
            where.append(_EXEC_TEXT)
            args.append(page.query.lower())
        rows, total = self._page("execs", " AND ".join(where), args, page)
        return [_dec_exec.decode(r) for r in rows], total

    def _page(self, table: str, where: str, args: list[Any], page: Page,
              ) -> tuple[list[bytes], int]:
        total = int(self._db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}",
                                     args).fetchone()[0])
        sql = (f"SELECT record FROM {table} WHERE {where} ORDER BY rowid "
               + ("DESC" if page.newest_first else "ASC"))
        if page.limit is not None or page.offset:
            sql += " LIMIT ? OFFSET ?"
            args = [*args, -1 if page.limit is None else page.limit, page.offset]
        return [r[0] for r in self._db.execute(sql, args).fetchall()], total

    def count_execs(self) -> dict[str, int]:
        rows = self._db.execute("SELECT state, COUNT(*) FROM execs GROUP BY state").fetchall()
        return {str(s): int(n) for s, n in rows}

    def transition_exec(self, ident: str, to: ExecState, *, reason: str | None = None,
                        data: dict[str, Any] | None = None, **fields: Any,
                        ) -> tuple[ExecRecord, Event]:
        """Move an exec to ``to`` (guarded) and journal it, in one transaction."""
        with self._tx() as db:
            row = db.execute("SELECT record FROM execs WHERE id = ?", (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            rec = _dec_exec.decode(row[0])
            check_transition("exec", ident, rec.state, to)
            rec = msgspec.structs.replace(rec, state=str(to), reason=reason, **fields)
            db.execute("UPDATE execs SET state = ?, record = ? WHERE id = ?",
                       (rec.state, _enc.encode(rec), ident))
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
            db.execute("INSERT INTO lineages VALUES (?, ?, ?, ?)",
                       (rec.id, rec.name, rec.status, _enc.encode(rec)))
            ev = self._append(db, rec.config.sandbox, "lineage.state", state=rec.status,
                              reason="created", data={"lineage": rec.id,
                                                      "provider": rec.config.provider})
        return rec, ev

    def get_lineage(self, ident: str) -> LineageRecord | None:
        row = self._db.execute("SELECT record FROM lineages WHERE id = ?", (ident,)).fetchone()
        return _dec_lineage.decode(row[0]) if row else None

    def lineage_by_request_key(self, key: str) -> LineageRecord | None:
        row = self._db.execute(
            "SELECT record FROM lineages WHERE json_extract(record, '$.request_key') = ?",
            (key,)).fetchone()
        return _dec_lineage.decode(row[0]) if row else None

    def find_lineages(self, ref: str) -> list[LineageRecord]:
        rows = self._db.execute(
            "SELECT record FROM lineages WHERE id = ? OR name = ? ORDER BY rowid DESC",
            (ref, ref)).fetchall()
        if not rows:
            rows = self._db.execute(
                "SELECT record FROM lineages WHERE substr(id, 1, ?) = ? LIMIT 10",
                (len(ref), ref)).fetchall()
        return [_dec_lineage.decode(r[0]) for r in rows[:10]]

    def list_lineages(self, statuses: tuple[str, ...] | None = None) -> list[LineageRecord]:
        sql = "SELECT record FROM lineages"
        args: list[Any] = []
        if statuses:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            args.extend(statuses)
        rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
        return [_dec_lineage.decode(r[0]) for r in rows]

    def page_lineages(self, page: Page, *, statuses: tuple[str, ...] | None = None,
                      ) -> tuple[list[LineageRecord], int]:
        where: list[str] = ["1=1"]
        args: list[Any] = []
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
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
        """Change a lineage (status guarded), journaling ``event`` in the same transaction.

        A status change is always journaled as ``lineage.state``. ``event_reason``: the
        event's reason when it is not the lineage's new ``reason`` (which it leaves as is).
        """
        with self._tx() as db:
            row = db.execute("SELECT record FROM lineages WHERE id = ?", (ident,)).fetchone()
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
            db.execute("UPDATE lineages SET status = ?, record = ? WHERE id = ?",
                       (rec.status, _enc.encode(rec), ident))
            ev = None
            if event is not None:
                payload = {"lineage": ident, "lifecycle": rec.lifecycle,
                           "attempt": rec.attempt, **(data or {})}
                ev = self._append(db, rec.config.sandbox, event, exec_id=rec.exec_id,
                                  state=rec.status if event == "lineage.state" else rec.lifecycle,
                                  reason=event_reason or reason, data=payload)
        return rec, ev


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


if TYPE_CHECKING:
    from tether.store.base import CoreStore

    _conforms: type[CoreStore] = Store
