"""``Store.reads``: heavy reads in a worker thread, on a read-only connection of its own,
one snapshot per call, while the store's own connection writes (issue 22 #7)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tether.model.records import ExecRecord, ExecSpec
from tether.store import Store


def _exec(store: Store, ident: str) -> None:
    store.create_exec(ExecRecord(id=ident, sandbox="default", state="PENDING",
                                 spec=ExecSpec(argv=["true"]), created_at=time.time()))


def test_a_read_runs_in_a_worker_thread_on_its_own_read_only_connection(tmp_path: Path) -> None:
    store = Store(tmp_path / "tether.db")
    try:
        _exec(store, "aaaaaaaaaaaa")

        def read(db: sqlite3.Connection) -> tuple[str, int]:
            with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only"):
                db.execute("DELETE FROM execs")
            return threading.current_thread().name, db.execute(
                "SELECT COUNT(*) FROM execs").fetchone()[0]

        name, n = asyncio.run(store.reads(read))
        assert name.startswith("store-read") and n == 1
        assert store.get_exec("aaaaaaaaaaaa") is not None  # the refused write changed nothing
    finally:
        store.close()


def test_a_read_sees_one_snapshot_while_the_store_commits(tmp_path: Path) -> None:
    store = Store(tmp_path / "tether.db")
    try:
        _exec(store, "aaaaaaaaaaaa")
        inside, go = threading.Event(), threading.Event()

        def read(db: sqlite3.Connection) -> tuple[int, int]:
            first = db.execute("SELECT COUNT(*) FROM execs").fetchone()[0]
            inside.set()
            assert go.wait(10)
            return first, db.execute("SELECT COUNT(*) FROM execs").fetchone()[0]

        async def main() -> tuple[int, int]:
            task = asyncio.ensure_future(store.reads(read))
            assert await asyncio.to_thread(inside.wait, 10)
            _exec(store, "bbbbbbbbbbbb")  # the writer does not wait for the reader
            go.set()
            return await task

        assert asyncio.run(main()) == (1, 1)  # the read's snapshot
        assert asyncio.run(store.reads(
            lambda db: db.execute("SELECT COUNT(*) FROM execs").fetchone()[0])) == 2
    finally:
        store.close()


def test_after_close_no_read_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "tether.db")
    asyncio.run(store.reads(lambda db: db.execute("SELECT 1").fetchone()))
    store.close()
    with pytest.raises(RuntimeError):
        asyncio.run(store.reads(lambda db: db.execute("SELECT 1").fetchone()))
