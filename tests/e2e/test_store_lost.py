"""A store deleted or replaced under a running daemon (issue 22, finding 4): seen at once,
no more intent accepted (STORE_LOST, health NOT_SERVING with the reason), no empty store
ever made at its path, running execs untouched — and the next daemon re-adopts them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_store_recovery import gated, refused, remove_store, start_recovering
from tests.harness import DaemonProc, RawConn, new_home, remove_home, wait_for
from tether.hostio.proc import is_same_process
from tether.model.errors import TetherError


@pytest.fixture
def fast() -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env={"TETHER_SWEEP_INTERVAL": "0.2"})
    yield d
    d.cleanup()
    remove_home(d.home)


def test_a_store_deleted_while_serving_stops_intent_and_is_never_recreated(
        fast: DaemonProc, tmp_path: Path) -> None:
    """Before: the daemon served 30 s more, accepted a new exec into the deleted file, and
    its sweep's checkpoint made a 0-byte tether.db the next start refused."""
    d = fast
    d.start()
    c = d.client()
    running = c.exec_start(gated(tmp_path, 7), name="keeps-running")
    monitor = d.handles(running.id)["monitor"]
    remove_store(d.home)
    # The very next commit sees it (before any sweep): nothing goes into the lost file.
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"])
    assert (e.value.rpc_code, e.value.code) == (1008, "STORE_LOST"), e.value
    assert e.value.data["why"] == "deleted"
    assert "tether daemon --recover-store" in e.value.message
    wait_for(lambda: c.health().status == "NOT_SERVING", 5, what="health NOT_SERVING")
    health = c.health()
    assert health.state == "RUNNING"
    assert health.reason and health.reason.startswith("STORE_LOST: the store ")
    with pytest.raises(TetherError) as e:
        c.sandbox_create("nope")
    assert e.value.code == "STORE_LOST"
    with RawConn(d.socket) as conn:  # the socket speaks it too
        reply = conn.call("schedule.add", {"name": "j", "argv": ["true"], "every": 3600})
    assert reply["error"]["data"]["code"] == "STORE_LOST", reply
    # Reads still answer, from the file the daemon still holds open.
    assert c.exec_get(running.id).state == "RUNNING"
    assert [x.id for x in c.exec_list()] == [running.id]
    time.sleep(2.5)  # many sweeps and checkpoint passes later: still no file at the path
    assert not list(d.home.glob("tether.db*")), list(d.home.glob("tether.db*"))
    assert d.proc is not None and d.proc.poll() is None, "the daemon must keep running"
    assert is_same_process(monitor["pid"], monitor["start_time"]), "the exec was disturbed"
    assert "was deleted while the daemon ran" in d.log_text()

    # What comes next is the lost-store path: the next daemon refuses to guess, and
    # --recover-store re-adopts the exec that ran on throughout.
    d.kill9()
    assert "tether.db is missing" in refused(d)
    start_recovering(d)
    c = d.client()
    again = c.exec_get(running.id)
    assert again.state == "RUNNING" and again.pid == running.pid
    (tmp_path / "go").touch()
    assert c.exec_wait(running.id, timeout=30).exit_code == 7


def test_a_store_replaced_while_serving_is_left_alone(fast: DaemonProc,
                                                      tmp_path: Path) -> None:
    """A file moved in at the path (another inode, e.g. a backup put back) is not this
    daemon's store: it writes nothing into it and says so."""
    d = fast
    d.start()
    c = d.client()
    c.exec_start(["true"])
    other = tmp_path / "other.db"
    other.write_bytes(b"not yours")
    os.replace(other, d.home / "tether.db")
    before = (d.home / "tether.db").read_bytes()
    wait_for(lambda: c.health().status == "NOT_SERVING", 5, what="health NOT_SERVING")
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"])
    assert (e.value.code, e.value.data["why"]) == ("STORE_LOST", "replaced by another file")
    time.sleep(1.5)
    assert (d.home / "tether.db").read_bytes() == before
    assert d.term() == 0  # a clean stop: its own store was never closed into that file
    assert (d.home / "tether.db").read_bytes() == before
