from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import DaemonProc, new_home, remove_home


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
