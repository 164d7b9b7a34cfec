from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.harness import DaemonProc, new_home, remove_home

if TYPE_CHECKING:
    from tests.pg import PgCluster

# The product's default sandbox is `auto` (bwrap where it works). Most tests run this
# repository's own scripts and venv, which live outside the system directories a
# bwrap sandbox shows, so their daemons use the process runtime by default;
# tests/test_default_sandbox.py checks the real default, and test_bwrap.py the runtime.
os.environ.setdefault("TETHER_DEFAULT_RUNTIME", "process")
# Under `make test`, make's own variables would reach every command a test runs through
# tether (a client's environment is the command's): a `make` run by a test would then be
# a sub-make ("make[1]: Entering directory …"). A user's shell has none of them.
for _var in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(_var, None)


@pytest.fixture
def home() -> Iterator[object]:
    h = new_home()
    yield h
    remove_home(h)


@pytest.fixture
def daemon(home: object) -> Iterator[DaemonProc]:
    """A running daemon on a fresh home; everything it started is killed afterwards."""
    d = DaemonProc(home)  # type: ignore[arg-type]
    d.start()
    yield d
    d.cleanup()


@pytest.fixture
def stopped_daemon(home: object) -> Iterator[DaemonProc]:
    """A home whose daemon the test starts itself (e.g. with a fault armed)."""
    d = DaemonProc(home)  # type: ignore[arg-type]
    yield d
    d.cleanup()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """One throw-away PostgreSQL for every fleet test module of a worker (each test takes
    a database of its own): a cluster's initdb costs seconds."""
    from tests.pg import PgCluster

    c = PgCluster()
    c.start()
    yield c
    c.destroy()
