"""The store on its own: migrations, record compatibility, the transition guard."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.model.records import ExecRecord, ExecSpec, SandboxSpec
from tether.model.states import (
    EXEC_TERMINAL,
    EXEC_TRANSITIONS,
    SANDBOX_TRANSITIONS,
    ExecState,
    IllegalTransition,
    SandboxState,
    can_transition,
)
from tether.store import SchemaTooNew, Store, StoreCorrupt


def _exec(store: Store) -> ExecRecord:
    rec = ExecRecord(id=store.reserve_id("exec"), sandbox="default", state="PENDING",
                     spec=ExecSpec(argv=["true"]))
    return store.create_exec(rec)[0]


def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    from tether.store.migrations import MIGRATIONS

    s = Store(tmp_path / "t.db")
    assert s.schema_version() == MIGRATIONS[-1][0]
    s.close()
    s = Store(tmp_path / "t.db")
    rows = s._db.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(v,) for v, _, _ in MIGRATIONS]
    assert [x.name for x in s.list_sandboxes()] == ["default"]
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "t.db").close()
    db = sqlite3.connect(tmp_path / "t.db")
    db.execute("INSERT INTO schema_migrations VALUES (99, 'future', 0)")
    db.commit()
    db.close()
    with pytest.raises(SchemaTooNew, match="upgrade tether"):
        Store(tmp_path / "t.db")


def test_records_from_newer_and_older_versions_load(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    rec = _exec(s)
    # A newer tether added fields (top level and nested); an older one lacked some.
    newer = msgspec.json.decode(s._db.execute("SELECT record FROM execs").fetchone()[0])
    newer["future_field"] = {"nested": [1, 2]}
    newer["spec"]["future_spec_field"] = True
    s._db.execute("UPDATE execs SET record = ? WHERE id = ?",
                  (msgspec.json.encode(newer), rec.id))
    assert s.get_exec(rec.id) == rec
    older = {"id": "abc", "sandbox": "default", "state": "FINISHED", "spec": {"argv": ["x"]}}
    s._db.execute("INSERT INTO execs VALUES ('abc', 'default', NULL, 'FINISHED', NULL, ?)",
                  (msgspec.json.encode(older),))
    old = s.get_exec("abc")
    assert old is not None and old.exit_code is None and old.spec.env == {}
    # The sandbox spec likewise.
    sb = s.list_sandboxes()[0]
    assert sb.spec == SandboxSpec(runtime="process")


def test_store_refuses_illegal_transitions(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
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


def test_ids_are_never_reused(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    ids = {s.reserve_id("exec", nbytes=1) for _ in range(200)}  # 200 of 256 possible
    assert len(ids) == 200
    count = s._db.execute("SELECT COUNT(*) FROM id_reservations").fetchone()[0]
    assert count == len(ids) + 1  # + default sandbox


def test_a_version_1_database_is_migrated_forward(tmp_path: Path) -> None:
    """A database left by the first release gains the later tables and keeps its rows."""
    from tether.store import migrations

    first = migrations.MIGRATIONS[:1]
    saved = migrations.MIGRATIONS
    migrations.MIGRATIONS = first
    try:
        import tether.store.sqlite as sq

        sq.MIGRATIONS = first
        s = Store(tmp_path / "t.db")
        rec = _exec(s)
        s.close()
    finally:
        migrations.MIGRATIONS = saved
        sq.MIGRATIONS = saved
    s = Store(tmp_path / "t.db")
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


def test_each_store_has_its_own_lasting_epoch(tmp_path: Path) -> None:
    a = Store(tmp_path / "a.db")
    epoch = a.epoch
    a.close()
    assert Store(tmp_path / "a.db").epoch == epoch
    assert Store(tmp_path / "b.db").epoch != epoch
    assert len(epoch) == 16


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
