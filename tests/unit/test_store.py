"""The store on its own: migrations, record compatibility, the transition guard, the
journal's numbering. Every test taking ``backend`` runs on SQLite and on a throw-away
PostgreSQL (tests/pg.py); PostgreSQL's are skipped when it cannot start, unless
TETHER_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.pg import PgCluster, bindir
from tether.model.errors import RpcCode, TetherError
from tether.model.records import AgentConfig, ExecRecord, ExecSpec, LineageRecord, SandboxSpec
from tether.model.states import (
    EXEC_TERMINAL,
    EXEC_TRANSITIONS,
    SANDBOX_TRANSITIONS,
    ExecState,
    IllegalTransition,
    LineageStatus,
    SandboxState,
    can_transition,
)
from tether.store import SchemaTooNew, Store, StoreCorrupt
from tether.store.base import CoreStore, Page

REQUIRE_PG = os.environ.get("TETHER_REQUIRE_POSTGRES") == "1"
_db = itertools.count()


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[PgCluster | None]:
    """One cluster for the module, started only when a PostgreSQL case runs."""
    if bindir() is None and not REQUIRE_PG:
        yield None
        return
    try:
        c = PgCluster()
        c.start()
    except Exception:
        if REQUIRE_PG:
            raise
        yield None
        return
    yield c
    c.destroy()


class Backend:
    """Opens stores of one backend; ``raw`` runs SQL written for both (``?`` params)."""

    def __init__(self, name: str, tmp: Path, cluster: PgCluster | None) -> None:
        self.name = name
        self.tmp = tmp
        self.cluster = cluster
        self.urls: dict[str, str] = {}
        self.opened: list[CoreStore] = []
        self.module: ModuleType
        if name == "sqlite":
            import tether.store.sqlite as module
        else:
            import tether.store.postgres as module
        self.module = module

    def open(self, db: str = "t") -> CoreStore:
        store: CoreStore
        if self.name == "sqlite":
            store = Store(self.tmp / f"{db}.db")
        else:
            from tether.store.postgres import PgStore

            assert self.cluster is not None
            if db not in self.urls:
                self.urls[db] = self.cluster.new_db(f"t{os.getpid()}_{next(_db)}")
            store = PgStore(self.urls[db])
        self.opened.append(store)
        return store

    def raw(self, store: CoreStore, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn: Any = store._db  # type: ignore[attr-defined]
        if self.name == "postgres":
            sql = sql.replace("?", "%s")
        cur = conn.execute(sql, args)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    cluster = None
    if request.param == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        if cluster is None:
            pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    b = Backend(request.param, tmp_path, cluster)
    yield b
    for store in b.opened:
        store.close()


def _exec(store: CoreStore) -> ExecRecord:
    rec = ExecRecord(id=store.reserve_id("exec"), sandbox="default", state="PENDING",
                     spec=ExecSpec(argv=["true"]))
    return store.create_exec(rec)[0]


def test_migrations_are_recorded_and_idempotent(backend: Backend) -> None:
    migrations = backend.module.MIGRATIONS
    s = backend.open()
    assert s.schema_version() == migrations[-1][0]
    s.close()
    s = backend.open()
    rows = backend.raw(s, "SELECT version FROM schema_migrations ORDER BY version")
    assert rows == [(v,) for v, _, _ in migrations]
    assert [x.name for x in s.list_sandboxes()] == ["default"]
    if backend.name == "sqlite":
        assert backend.raw(s, "PRAGMA journal_mode")[0][0] == "wal"


def test_newer_schema_is_refused(backend: Backend) -> None:
    s = backend.open()
    backend.raw(s, "INSERT INTO schema_migrations VALUES (99, 'future', 0)")
    s.close()
    with pytest.raises(SchemaTooNew, match="upgrade tether"):
        backend.open()


def test_records_from_newer_and_older_versions_load(backend: Backend) -> None:
    s = backend.open()
    rec = _exec(s)
    # A newer tether added fields (top level and nested); an older one lacked some.
    newer = msgspec.json.decode(backend.raw(s, "SELECT CAST(record AS TEXT) FROM execs")[0][0])
    newer["future_field"] = {"nested": [1, 2]}
    newer["spec"]["future_spec_field"] = True
    backend.raw(s, "UPDATE execs SET record = ? WHERE id = ?",
                msgspec.json.encode(newer).decode(), rec.id)
    assert s.get_exec(rec.id) == rec
    older = {"id": "abc", "sandbox": "default", "state": "FINISHED", "spec": {"argv": ["x"]}}
    backend.raw(s, "INSERT INTO execs (id, sandbox_id, name, state, request_key, record) "
                "VALUES ('abc', 'default', NULL, 'FINISHED', NULL, ?)",
                msgspec.json.encode(older).decode())
    old = s.get_exec("abc")
    assert old is not None and old.exit_code is None and old.spec.env == {}
    # The sandbox spec likewise.
    sb = s.list_sandboxes()[0]
    assert sb.spec == SandboxSpec(runtime="process")


def test_store_refuses_illegal_transitions(backend: Backend) -> None:
    s = backend.open()
    rec = _exec(s)
    with pytest.raises(IllegalTransition):
        s.transition_exec(rec.id, ExecState.FINISHED)  # PENDING -> FINISHED skips RUNNING
    s.transition_exec(rec.id, ExecState.RUNNING)
    s.transition_exec(rec.id, ExecState.FINISHED, exit_code=0)
    with pytest.raises(IllegalTransition):
        s.transition_exec(rec.id, ExecState.RUNNING)
    got = s.get_exec(rec.id)
    assert got is not None and got.state == "FINISHED"
    with pytest.raises(IllegalTransition):
        s.transition_sandbox("default", SandboxState.DELETED)
    # A refused transition journals nothing.
    seqs = [e.seq for e in s.events_since(sandbox="default", per_sandbox=True)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == 4  # default READY + PENDING + RUNNING + FINISHED


@given(st.lists(st.sampled_from(list(ExecState)), max_size=8))
def test_exec_walks_follow_the_table(walk: list[ExecState]) -> None:
    state = ExecState.PENDING
    for nxt in walk:
        if can_transition(EXEC_TRANSITIONS, state, nxt):
            assert state not in EXEC_TERMINAL
            state = nxt
    for terminal in EXEC_TERMINAL:
        assert not EXEC_TRANSITIONS[terminal]


def test_every_sandbox_state_can_reach_deleted() -> None:
    for start in SandboxState:
        seen, todo = {start}, [start]
        while todo:
            for n in SANDBOX_TRANSITIONS[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        assert SandboxState.DELETED in seen


def test_ids_are_never_reused(backend: Backend) -> None:
    s = backend.open()
    ids = {s.reserve_id("exec", nbytes=1) for _ in range(200)}  # 200 of 256 possible
    assert len(ids) == 200
    count = backend.raw(s, "SELECT COUNT(*) FROM id_reservations")[0][0]
    assert count == len(ids) + 1  # + default sandbox


def test_a_version_1_database_is_migrated_forward(backend: Backend,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A database left by the first release gains the later tables and keeps its rows."""
    saved = backend.module.MIGRATIONS
    monkeypatch.setattr(backend.module, "MIGRATIONS", saved[:1])
    s = backend.open()
    rec = _exec(s)
    s.close()
    monkeypatch.setattr(backend.module, "MIGRATIONS", saved)
    s = backend.open()
    assert s.schema_version() == saved[-1][0]
    assert s.get_exec(rec.id) == rec
    assert s.list_lineages() == []


def test_migration_5_blanks_the_env_values_of_stored_execs(tmp_path: Path) -> None:
    """Rows written before exec env values stopped being stored keep only the names."""
    import tether.store.sqlite as sq
    from tether.store import migrations

    saved = migrations.MIGRATIONS
    before = [m for m in saved if m[0] < 5]
    migrations.MIGRATIONS = sq.MIGRATIONS = before
    try:
        s = Store(tmp_path / "t.db")
        secret = ExecRecord(id=s.reserve_id("exec"), sandbox="default", state="PENDING",
                            spec=ExecSpec(argv=["true"], env={"API_KEY": "sk-123", "A": ""}))
        s.create_exec(secret)
        bare = _exec(s)
        s.close()
    finally:
        migrations.MIGRATIONS = sq.MIGRATIONS = saved
    s = Store(tmp_path / "t.db")
    assert s.schema_version() == saved[-1][0]
    got = s.get_exec(secret.id)
    assert got is not None and got.spec.env == {"API_KEY": "", "A": ""}
    assert s.get_exec(bare.id) == bare


def test_each_store_has_its_own_lasting_epoch(backend: Backend) -> None:
    a = backend.open("a")
    epoch = a.epoch
    a.close()
    assert backend.open("a").epoch == epoch
    assert backend.open("b").epoch != epoch
    assert len(epoch) == 16
    int(epoch, 16)


def test_sandboxes_execs_and_lineages_round_trip(backend: Backend) -> None:
    s = backend.open()
    sb, ev = s.create_sandbox("box", SandboxSpec(runtime="process"))
    assert ev.sandbox == sb.id and ev.seq == 1 and ev.state == "PENDING"
    with pytest.raises(Exception, match="already exists"):
        s.create_sandbox("box", SandboxSpec(runtime="process"))
    assert s.find_sandboxes("box") == [sb] and s.find_sandboxes(sb.id[:4]) == [sb]
    s.transition_sandbox(sb.id, SandboxState.READY)
    rec = ExecRecord(id=s.reserve_id("exec"), sandbox=sb.id, state="PENDING", name="job",
                     request_key="k1", lineage="L1", spec=ExecSpec(argv=["true"]))
    s.create_exec(rec)
    assert s.exec_by_request_key("k1") == rec and s.live_exec_named("job") == rec
    assert s.find_execs("job") == [rec] and s.list_execs_of_lineage("L1") == [rec]
    assert s.list_execs(sandbox=sb.id, states=("PENDING",)) == [rec]
    s.transition_exec(rec.id, ExecState.RUNNING)
    _, ev = s.transition_exec(rec.id, ExecState.FINISHED, exit_code=3)
    assert ev.data == {"exit_code": 3} and s.count_execs() == {"FINISHED": 1}
    assert s.live_exec_named("job") is None
    lin = LineageRecord(id=s.reserve_id("lineage"), name="fix",
                        config=AgentConfig(argv=["claude"], sandbox=sb.id))
    s.create_lineage(lin)
    got, lev = s.update_lineage(lin.id, status=LineageStatus.ORPHANED, reason="died",
                                attempt=2)
    assert lev is not None and lev.type == "lineage.state" and lev.state == "ORPHANED"
    assert got.attempt == 2 and s.get_lineage(lin.id) == got
    assert s.find_lineages("fix") == [got]
    assert s.list_lineages(("ORPHANED",)) == [got] and s.list_lineages(("ACTIVE",)) == []
    with pytest.raises(IllegalTransition):
        s.update_lineage(lin.id, status=LineageStatus.WAITING_LIMIT)
    s.append_event(None, "daemon.started")
    n_ev = s.append_event(sb.id, "exec.output", exec_id=rec.id, data={"n": 7})
    assert s.max_exec_event_n(rec.id, ("exec.output",)) == 7
    assert s.max_exec_event_n("nope", ("exec.output",)) == -1
    everything = s.events_since()
    assert [e.gseq for e in everything] == list(range(1, len(everything) + 1))
    assert s.last_gseq() == n_ev.gseq == everything[-1].gseq
    assert [e.seq for e in s.events_since(per_sandbox=True)] == [1]  # the daemon stream
    mine = s.events_since(sandbox=sb.id, per_sandbox=True)
    assert [e.seq for e in mine] == list(range(1, len(mine) + 1))
    assert s.events_since(sandbox=sb.id, since=mine[-2].gseq) == mine[-1:]
    s.transition_sandbox(sb.id, SandboxState.DELETING)
    s.transition_sandbox(sb.id, SandboxState.DELETED)
    assert s.find_sandboxes("box") == []
    assert [x.id for x in s.list_sandboxes(include_deleted=True)] == ["default", sb.id]


def test_lists_are_filtered_searched_and_paged_newest_first(backend: Backend) -> None:
    """``exec.list``/``lineage.list``'s paging: the same rows, count and order on both."""
    s = backend.open()
    made = []
    for i in range(7):
        rec = ExecRecord(id=s.reserve_id("exec"), sandbox="default", state="PENDING",
                         name=f"Build-{i}" if i % 2 else None,
                         spec=ExecSpec(argv=["make", f"target{i}", "-j4"]))
        s.create_exec(rec)
        made.append(rec.id)
    s.transition_exec(made[3], ExecState.RUNNING)
    every, total = s.page_execs(Page())
    assert [x.id for x in every] == made and total == 7
    page, total = s.page_execs(Page(limit=3, offset=2, newest_first=True))
    assert [x.id for x in page] == made[::-1][2:5] and total == 7
    hits, total = s.page_execs(Page(query="BUILD-"))  # names, ignoring ASCII case
    assert [x.id for x in hits] == made[1::2] and total == 3
    hits, total = s.page_execs(Page(query="target5 -j"))  # the command line
    assert [x.id for x in hits] == [made[5]] and total == 1
    hits, total = s.page_execs(Page(query=made[6][:8]))  # the id
    assert [x.id for x in hits] == [made[6]]
    hits, total = s.page_execs(Page(limit=10), states=("RUNNING",), sandbox="default")
    assert [x.id for x in hits] == [made[3]] and total == 1
    assert s.page_execs(Page(query="50%_'\\"))[1] == 0  # no wildcard, no quoting
    assert s.page_execs(Page(limit=5, offset=100)) == ([], 7)
    lins = []
    for name, provider in (("fixer", "claude"), ("writer", "codex"), (None, "generic")):
        lin = LineageRecord(id=s.reserve_id("lineage"), name=name,
                            config=AgentConfig(argv=[provider], provider=provider,
                                               worktree=f"/src/{name or 'x'}-tree"))
        s.create_lineage(lin)
        lins.append(lin.id)
    s.update_lineage(lins[1], status=LineageStatus.ORPHANED, reason="died")
    got, total = s.page_lineages(Page(limit=2, newest_first=True))
    assert [x.id for x in got] == lins[::-1][:2] and total == 3
    got, total = s.page_lineages(Page(query="CODEX"))
    assert [x.id for x in got] == [lins[1]] and total == 1
    got, total = s.page_lineages(Page(query="x-tree"))
    assert [x.id for x in got] == [lins[2]]
    got, total = s.page_lineages(Page(), statuses=("ACTIVE",))
    assert [x.id for x in got] == [lins[0], lins[2]] and total == 2


def test_concurrent_writers_number_the_journal_without_gaps(backend: Backend) -> None:
    """Writers on separate connections: every stream's seq and the global gseq are
    1..n with no gap and no duplicate."""
    backend.open().close()
    stores = [backend.open() for _ in range(4)]
    errors: list[BaseException] = []

    def write(s: CoreStore, i: int) -> None:
        try:
            for k in range(25):
                s.append_event("default" if k % 2 else None, "test.tick", data={"w": i})
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = stores[0].events_since(limit=1000)
    assert [e.gseq for e in events] == list(range(1, len(events) + 1))
    assert len(events) == 1 + 100
    for stream in (None, "default"):
        seqs = [e.seq for e in events if e.sandbox == stream]
        assert seqs == list(range(1, len(seqs) + 1))


def test_racing_transitions_let_exactly_one_win(backend: Backend) -> None:
    s = backend.open()
    rec = _exec(s)
    s.transition_exec(rec.id, ExecState.RUNNING)
    rivals = [backend.open() for _ in range(4)]
    start = threading.Barrier(len(rivals))
    outcomes: list[str] = []

    def finish(r: CoreStore, code: int) -> None:
        start.wait()
        try:
            r.transition_exec(rec.id, ExecState.FINISHED, exit_code=code)
            outcomes.append(f"won {code}")
        except IllegalTransition:
            outcomes.append("refused")

    threads = [threading.Thread(target=finish, args=(r, i)) for i, r in enumerate(rivals)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[:3] == ["refused"] * 3 and outcomes.count("refused") == 3
    winner = int(next(o for o in outcomes if o.startswith("won")).split()[1])
    got = s.get_exec(rec.id)
    assert got is not None and got.exit_code == winner
    ends = [e for e in s.events_since() if e.state == "FINISHED"]
    assert len(ends) == 1 and ends[0].data["exit_code"] == winner


def test_a_cursor_never_skips_an_event_that_commits_later(backend: Backend) -> None:
    """gseq follows commit order: a second writer waits for the first's commit, so a
    reader that has seen gseq N never later finds a committed N-1."""
    a, b, reader = backend.open(), backend.open(), backend.open()
    seen = reader.last_gseq()
    done = threading.Event()
    with a._tx() as db:  # type: ignore[attr-defined]
        first = a._append(db, None, "test.first")  # type: ignore[attr-defined]
        t = threading.Thread(target=lambda: (b.append_event(None, "test.second"),
                                             done.set()))
        t.start()
        assert not done.wait(0.5), "a second append committed while the first was open"
        assert reader.events_since(since=seen) == []
    t.join(10)
    assert done.is_set()
    got = reader.events_since(since=seen)
    assert [(e.type, e.gseq) for e in got] == [("test.first", first.gseq),
                                               ("test.second", first.gseq + 1)]


def test_a_damaged_file_is_refused_before_anything_reads_it(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"not a database" * 500)
    with pytest.raises(StoreCorrupt, match="not a database"):
        Store(tmp_path / "junk.db")
    s = Store(tmp_path / "t.db")
    for _ in range(50):
        _exec(s)
    s.close()  # checkpointed into t.db
    raw = bytearray((tmp_path / "t.db").read_bytes())
    page = len(raw) // 4096 // 2 * 4096
    raw[page:page + 4096] = b"\xa5" * 4096
    (tmp_path / "t.db").write_bytes(bytes(raw))
    with pytest.raises(StoreCorrupt):
        Store(tmp_path / "t.db")


def test_stores_racing_on_a_fresh_postgres_database_migrate_it_once(
        backend: Backend) -> None:
    """Hosts share a PostgreSQL database, so several may open a fresh one at once (a
    SQLite store has one daemon, behind the home's lock)."""
    if backend.name != "postgres":
        pytest.skip("one daemon per SQLite file")
    assert backend.cluster is not None
    backend.urls["t"] = backend.cluster.new_db(f"t{os.getpid()}_{next(_db)}")
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            backend.open()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = backend.open()
    assert backend.raw(s, "SELECT version FROM schema_migrations ORDER BY version") == [
        (v,) for v, _, _ in backend.module.MIGRATIONS]
    assert [e.reason for e in s.events_since()] == ["implicit default"]


def test_a_nul_character_is_refused_precisely_by_postgres_and_kept_by_sqlite(
        backend: Backend) -> None:
    s = backend.open()
    if backend.name == "postgres":
        with pytest.raises(TetherError, match="U\\+0000") as err:
            s.append_event(None, "test.nul", data={"text": "a\x00b"})
        assert err.value.rpc_code == RpcCode.INVALID_PARAMS and err.value.code == "NUL_IN_TEXT"
    else:
        assert s.append_event(None, "test.nul", data={"text": "a\x00b"}).data["text"] == "a\x00b"
    after = s.append_event(None, "test.after")  # the store serves on, without a gap
    assert [e.gseq for e in s.events_since()] == list(range(1, after.gseq + 1))


def test_the_wal_is_checkpointed_by_the_sweep_not_by_a_commit(tmp_path: Path) -> None:
    """No commit pays for a checkpoint (its fsyncs were a start-latency tail): the WAL
    grows until ``checkpoint``, which copies every frame back from its own connection."""
    from tether.store import Store as SqliteStore

    s = SqliteStore(tmp_path / "tether.db")
    for i in range(3000):  # well past SQLite's automatic 1000 pages
        s.append_event(None, "bench.filler", data={"i": i, "pad": "x" * 300})
    wal = tmp_path / "tether.db-wal"
    assert wal.stat().st_size > 1000 * 4096
    s.checkpoint()
    con = sqlite3.connect(tmp_path / "tether.db")
    busy, frames, copied = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    con.close()
    assert busy == 0 and frames == copied
    assert s.events_since(since=0, limit=5000)[-1].data["i"] == 2999
    s.close()


def test_a_wal_over_its_limit_is_truncated_though_the_writer_restarts_it_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's passive pass can copy every frame; the writer's next commit then
    restarts the WAL and SQLite cuts its file to journal_size_limit — exactly the limit,
    so a size read after that pass said "not over": no truncation and no log line for a
    WAL that had passed its limit (test_bounds' WAL test failed on it). The size that
    decides is the one the checkpoint started with."""
    from tether.store import sqlite as store_sqlite

    s = store_sqlite.Store(tmp_path / "tether.db")
    s.limit_wal(1024 * 1024)
    for i in range(3000):
        s.append_event(None, "bench.filler", data={"i": i, "pad": "x" * 300})
    assert s.wal_size() > s.wal_limit
    connect = sqlite3.connect

    class Checkpointer:
        """The checkpoint's connection: the writer commits just after its passive pass."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            self.con = connect(*args, **kw)

        def execute(self, sql: str) -> Any:
            cur = self.con.execute(sql)
            if "PASSIVE" in sql:
                row = cur.fetchone()
                s.append_event(None, "bench.filler", data={"i": 3000})
                return type("Done", (), {"fetchone": lambda _self: row})()
            return cur

        def close(self) -> None:
            self.con.close()

    monkeypatch.setattr(store_sqlite.sqlite3, "connect", Checkpointer)
    done = s.checkpoint()
    monkeypatch.undo()
    assert done["truncated"] == 1 and done.get("over") == 1, done
    assert s.wal_size() < s.wal_limit
    assert s.events_since(since=0, limit=5000)[-1].data["i"] == 3000
    s.close()


def test_a_truncation_blocked_by_a_reader_holds_the_writer_briefly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncating checkpoint holds the write lock while it waits for readers: with a
    reader's snapshot open (a long report in a store-read thread) every commit waited for
    the whole 5 s busy timeout, the daemon's loop with it (4,855 ms measured). It waits
    briefly now, gives up (``truncated`` 0), and the check runs again a second later."""
    import threading
    import time

    from tether.store import sqlite as store_sqlite

    s = store_sqlite.Store(tmp_path / "tether.db")
    s.limit_wal(1024 * 1024)
    for i in range(3000):
        s.append_event(None, "bench.filler", data={"i": i, "pad": "x" * 300})
    assert s.wal_size() > s.wal_limit
    reader = sqlite3.connect(str(tmp_path / "tether.db"), isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()  # a snapshot, held
    connect, truncating = sqlite3.connect, threading.Event()

    class Checkpointer:
        """The checkpoint's connection, saying when its TRUNCATE starts."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            self.con = connect(*args, **kw)

        def execute(self, sql: str) -> Any:
            if "TRUNCATE" in sql:
                truncating.set()
            return self.con.execute(sql)

        def close(self) -> None:
            self.con.close()

    monkeypatch.setattr(store_sqlite.sqlite3, "connect", Checkpointer)
    done: dict[str, Any] = {}
    t = threading.Thread(target=lambda: done.update(s.checkpoint()))
    t.start()
    assert truncating.wait(10)
    time.sleep(0.05)  # it waits for the reader, holding the write lock
    started = time.monotonic()
    s.append_event(None, "bench.filler", data={"i": 3000})  # a commit of the daemon's
    waited = time.monotonic() - started
    t.join(10)
    monkeypatch.undo()
    reader.execute("ROLLBACK")
    reader.close()
    assert done.get("over") == 1 and done.get("truncated") == 0, done
    assert waited < 2.0, waited  # a sanity bound: it was the 5 s busy timeout
    assert s.checkpoint()["truncated"] == 1  # the next check, once the reader is done
    s.close()
