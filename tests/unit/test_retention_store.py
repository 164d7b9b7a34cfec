"""Journal compaction on a real SQLite store: a prefix goes, floors record it, each
stream keeps its newest event so numbering continues, a live exec's events pin the
prefix; and the policy's units."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tether.model.retention import parse_duration, parse_size
from tether.store import Store
from tether.store.retention import RetentionStore


def _store(tmp_path: Path) -> tuple[Store, RetentionStore]:
    store = Store(tmp_path / "tether.db")
    return store, RetentionStore(store)


def test_compaction_removes_a_prefix_and_keeps_numbering(tmp_path: Path) -> None:
    store, rs = _store(tmp_path)
    for i in range(5):
        store.append_event("default", "test.a", reason=str(i))
        store.append_event(None, "test.d", reason=str(i))
    last = store.last_gseq()
    bound = rs.compaction_bound(time.time() + 1, [])
    assert bound == last
    n_expected = rs.count_compactable(bound)
    assert rs.compact(bound) == n_expected
    left = store.events_since(since=0)
    assert {e.sandbox for e in left} == {"default", None}  # each stream's newest stays
    assert len(left) == 2
    assert rs.floor() == bound
    assert rs.stream_floor("default") == max(e.seq for e in left if e.sandbox) - 1
    nxt = store.append_event("default", "test.a")
    assert nxt.seq == rs.stream_floor("default") + 2  # numbers are never reused
    assert rs.compact(bound) == 0  # idempotent


def test_a_live_exec_pins_the_prefix(tmp_path: Path) -> None:
    store, rs = _store(tmp_path)
    store.append_event("default", "test.a")
    pinned = store.append_event("default", "exec.state", exec_id="aaaaaaaaaaaa")
    store.append_event("default", "test.a")
    bound = rs.compaction_bound(time.time() + 1, ["aaaaaaaaaaaa"])
    assert bound == pinned.gseq - 1
    rs.compact(bound)
    assert pinned.gseq in [e.gseq for e in store.events_since(since=0)]


def test_events_newer_than_the_cutoff_stay(tmp_path: Path) -> None:
    store, rs = _store(tmp_path)
    old = store.append_event("default", "test.a")
    cutoff = time.time()
    time.sleep(0.01)
    store.append_event("default", "test.a")
    assert rs.compaction_bound(cutoff, []) == old.gseq


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("15m", 900),
                                           ("12h", 43200), ("7d", 604800), ("2w", 1209600),
                                           ("1.5h", 5400), (" 7D ", 604800)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, size", [("500", 500), ("1K", 1024), ("2G", 2 << 30),
                                        ("2GiB", 2 << 30), ("1.5m", 3 << 19)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "soon", "-1d", "7y", "1e3"])
def test_bad_durations_say_how(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 7d"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["", "lots", "2X", "-5M"])
def test_bad_sizes_say_how(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 2G"):
        parse_size(text)
