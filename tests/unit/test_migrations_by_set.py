"""Migrations are applied by set: features numbered apart may land in any order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.store import Store
from tether.store.migrations import MIGRATIONS


def test_a_store_that_has_a_later_migration_still_gets_an_earlier_one(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    Store(db).close()
    versions = [v for v, _, _ in MIGRATIONS]
    assert versions == sorted(versions) and 8 in versions and max(versions) > 8
    # As a store made by a build that had 10 but not yet 8 would be:
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TABLE outbox")
        con.execute("DROP TABLE hooks")
        con.execute("DELETE FROM schema_migrations WHERE version = 8")
    con.close()
    Store(db).close()
    con = sqlite3.connect(db)
    got = {r[0] for r in con.execute("SELECT version FROM schema_migrations")}
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert got == set(versions)
    assert {"hooks", "outbox"} <= tables
