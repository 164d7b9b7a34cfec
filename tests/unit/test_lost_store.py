"""Opening the store: a fresh home, a lost store and a corrupt one (files only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.daemon.lost_store import StoreRefused, open_store
from tether.model.layout import HomeLayout


def _home(tmp_path: Path, with_data: bool) -> HomeLayout:
    layout = HomeLayout(tmp_path)
    for d in (layout.logs / "default", layout.run):
        d.mkdir(parents=True)
    if with_data:
        (layout.run / "0123456789ab.handles.json").write_text("{}")
    return layout


def test_a_fresh_home_gets_a_new_store_without_fuss(tmp_path: Path) -> None:
    layout = _home(tmp_path, with_data=False)
    layout.db.write_bytes(b"")  # 0 bytes and nothing else: as good as absent
    store, lost = open_store(layout, recover=False)
    assert lost is None and store.epoch
    store.close()
    again, lost = open_store(layout, recover=True)  # a sound store: nothing to do
    assert lost is None and again.epoch == store.epoch
    assert sorted(p.name for p in tmp_path.iterdir() if "lost" in p.name) == []


@pytest.mark.parametrize("content", [None, b""])
def test_a_lost_store_beside_execs_files_is_refused_unless_recovering(
        tmp_path: Path, content: bytes | None) -> None:
    layout = _home(tmp_path, with_data=True)
    if content is not None:
        layout.db.write_bytes(content)
    with pytest.raises(StoreRefused, match="--recover-store") as e:
        open_store(layout, recover=False)
    assert "0123456789ab.handles.json" in str(e.value)
    assert ("missing" if content is None else "empty (0 bytes)") in str(e.value)
    store, lost = open_store(layout, recover=True)
    assert lost is not None and store.epoch
    assert len(lost.moved) == (0 if content is None else 1)


def test_a_corrupt_store_is_refused_then_moved_aside(tmp_path: Path) -> None:
    layout = _home(tmp_path, with_data=False)
    layout.db.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreRefused, match=r"is corrupt \(file is not a database\); move it"):
        open_store(layout, recover=False)
    store, lost = open_store(layout, recover=True)
    assert lost is not None and "corrupt" in lost.why
    assert Path(lost.moved[0]).read_bytes() == b"garbage" * 1000
    store.close()


def test_the_runtime_reads_every_handles_file_a_rebuild_puts_back(tmp_path: Path) -> None:
    """``MonitorPool.recorded``: what ``lost_store.rebuild`` reads, in id order; a corrupt
    file names its exec with no content, and other files of ``run/`` are not execs."""
    from tether.monitor.files import write_handles
    from tether.runtime.monitors import MonitorPool

    good = {"monitor": {"pid": 10, "start_time": 1}, "child": {"pid": 11, "start_time": 2}}
    write_handles(str(tmp_path / "bbbbbbbbbbbb.handles.json"), good)
    (tmp_path / "aaaaaaaaaaaa.handles.json").write_bytes(b'{"version": 1, "moni')
    (tmp_path / "bbbbbbbbbbbb.claim").write_text("monitor 10\n")
    (tmp_path / "bbbbbbbbbbbb.sock").write_text("")
    assert MonitorPool.recorded(tmp_path) == [
        ("aaaaaaaaaaaa", None), ("bbbbbbbbbbbb", {"version": 1, **good})]
