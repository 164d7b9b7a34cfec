"""A lost or corrupt store (issue 11 #7): refused with one line, rebuilt by
``--recover-store`` from the execs' files, and told to subscribers by a new epoch."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, RawConn, wait_for
from tether.client.errors import TetherError
from tether.hostio.proc import is_same_process
from tether.model.layout import STORE_REFUSED_EXIT
from tether.store import Store

PAGE = 4096


def gated(tmp: Path, code: int) -> list[str]:
    """Runs until ``tmp/go`` exists, then exits ``code``."""
    return ["sh", "-c", f"while [ ! -e {tmp}/go ]; do sleep 0.02; done; exit {code}"]


def refused(d: DaemonProc, *extra: str) -> str:
    """Start a daemon that must refuse the store: its one line (no traceback)."""
    proc = subprocess.run([*TETHER, "--home", str(d.home), "daemon", *extra],
                          capture_output=True, timeout=60, env=d.env)
    err = proc.stderr.decode()
    assert proc.returncode == STORE_REFUSED_EXIT, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tether:")]
    assert len(lines) == 1, err
    return lines[0]


def start_recovering(d: DaemonProc) -> None:
    log = open(d.home / "daemon-recover.log", "wb")  # noqa: SIM115
    d.proc = subprocess.Popen([*TETHER, "--home", str(d.home), "daemon", "--recover-store"],
                              stdout=log, stderr=subprocess.STDOUT, env=d.env,
                              start_new_session=True)
    log.close()
    d.wait_serving()


def remove_store(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home}/tether.db{suffix}").unlink(missing_ok=True)


def test_deleted_store_is_refused_then_recovered_with_real_exit_codes(
        daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    old_epoch = c.status().epoch
    assert old_epoch
    done = c.exec_start(["sh", "-c", "exit 3"])
    assert c.exec_wait(done.id, timeout=30).exit_code == 3
    running = c.exec_start(gated(tmp_path, 5), name="gated")
    sb = c.sandbox_create("mine")
    elsewhere = c.exec_start(gated(tmp_path, 6), sandbox="mine")
    monitor = daemon.handles(running.id)["monitor"]
    cursor = c.events_list(limit=10000).next
    daemon.kill9()
    remove_store(daemon.home)

    line = refused(daemon)
    assert "tether.db is missing" in line and "--recover-store" in line
    assert is_same_process(monitor["pid"], monitor["start_time"]), "the exec was disturbed"

    start_recovering(daemon)
    c = daemon.client()
    st = c.status()
    assert st.epoch and st.epoch != old_epoch
    assert st.recovery["rebuilt_execs"] == 3
    # Its sandbox's spec was lost: a stand-in that starts nothing new, its exec adopted.
    stand_in = c.sandbox_get(sb.id)
    assert (stand_in.name, stand_in.state) == (f"recovered-{sb.id}", "FAILED")
    assert c.exec_get(elsewhere.id).state == "RUNNING"
    again = c.exec_get(running.id)
    assert again.state == "RUNNING" and again.pid == running.pid
    assert again.name == "gated" and again.spec.argv[0] == "sh"
    assert c.exec_get(done.id).exit_code == 3
    (tmp_path / "go").touch()
    final = c.exec_wait(running.id, timeout=30)
    assert (final.state, final.exit_code) == ("FINISHED", 5)
    assert c.exec_wait(elsewhere.id, timeout=30).exit_code == 6
    recovered = [e for e in c.events_list(limit=10000).events if e.type == "store.recovered"]
    assert len(recovered) == 1 and running.id in recovered[0].data["execs"]
    assert "missing" in (recovered[0].reason or "")

    # A subscriber resuming with its old cursor is told, not silently skipped.
    with RawConn(daemon.socket) as conn:
        reply = conn.call("events.subscribe", {"since": cursor, "epoch": old_epoch})
    assert reply["error"]["data"]["code"] == "EPOCH_CHANGED", reply
    assert reply["error"]["data"]["epoch"] == st.epoch
    with pytest.raises(TetherError) as e:
        next(iter(c.subscribe(since=cursor, epoch=old_epoch)))
    assert e.value.code == "EPOCH_CHANGED"
    page = c.events_list(epoch=st.epoch)
    assert page.epoch == st.epoch and page.events
    r = daemon.cli("events", "--since", str(cursor), "--epoch", old_epoch)
    assert r.returncode != 0 and b"the journal was reset" in r.stderr, r.stderr
    assert daemon.cli("events", "--epoch", st.epoch).returncode == 0


def test_store_truncated_to_zero_is_refused(daemon: DaemonProc) -> None:
    c = daemon.client()
    c.exec_wait(c.exec_start(["true"]).id, timeout=30)
    daemon.term()
    (daemon.home / "tether.db").write_bytes(b"")
    assert "tether.db is empty (0 bytes)" in refused(daemon)
    # A command that auto-starts the daemon passes the line on.
    r = daemon.cli("ps")
    assert r.returncode != 0 and b"--recover-store" in r.stderr, r.stderr
    start_recovering(daemon)
    assert daemon.client().status().recovery["rebuilt_execs"] == 1


@pytest.mark.parametrize("pages", [1, 5])
def test_garbage_pages_are_refused_with_one_line(daemon: DaemonProc, tmp_path: Path,
                                                 pages: int) -> None:
    c = daemon.client()
    x = c.exec_start(gated(tmp_path, 7))
    for _ in range(20):
        c.exec_wait(c.exec_start(["true"]).id, timeout=30)
    daemon.term()  # checkpointed: everything is in tether.db itself
    db = daemon.home / "tether.db"
    size = db.stat().st_size
    assert size >= 8 * PAGE
    rng = random.Random(pages)
    with open(db, "r+b") as f:
        first = size // PAGE // 2
        for n in range(first, first + pages):
            f.seek(n * PAGE)
            f.write(rng.randbytes(PAGE))
    line = refused(daemon)
    assert "is corrupt" in line and "--recover-store" in line, line

    start_recovering(daemon)
    c = daemon.client()
    assert list(daemon.home.glob("tether.db.lost-*")), "the corrupt file was not kept"
    assert c.exec_get(x.id).state == "RUNNING"
    (tmp_path / "go").touch()
    assert c.exec_wait(x.id, timeout=30).exit_code == 7
    wait_for(lambda: c.events_list(limit=10000).events)


def test_fresh_home_and_sound_store_start_without_fuss(daemon: DaemonProc) -> None:
    c = daemon.client()
    epoch = c.status().epoch
    daemon.term()
    start_recovering(daemon)  # nothing to recover: the same store, the same epoch
    assert daemon.client().status().epoch == epoch
    assert not list(daemon.home.glob("tether.db.lost-*"))


def test_sdk_subscriber_across_a_rebuilt_store_is_told(daemon: DaemonProc) -> None:
    c = daemon.client()
    c.exec_wait(c.exec_start(["true"]).id, timeout=30)
    events = c.subscribe(since=0)  # learns the epoch from its first reply
    assert next(events).gseq == 1
    daemon.kill9()
    remove_store(daemon.home)
    start_recovering(daemon)
    with pytest.raises(TetherError) as e:
        for _ in range(1000):  # what the old daemon had sent already comes first
            next(events)
    assert e.value.code == "EPOCH_CHANGED"
    assert e.value.data["epoch"] == daemon.client().status().epoch


def test_a_page_damaged_while_serving_is_a_precise_error(stopped_daemon: DaemonProc) -> None:
    """Bigger than SQLite's page cache, so the damaged page is read from the file."""
    d = stopped_daemon
    d.home.mkdir(parents=True, exist_ok=True)
    store = Store(d.home / "tether.db")
    for i in range(10000):
        store.append_event(None, "test.filler", reason="x" * 200, data={"i": i})
    store.close()
    d.start()
    db = d.home / "tether.db"
    with open(db, "r+b") as f:
        f.seek(db.stat().st_size // PAGE // 4 * PAGE)
        f.write(random.Random(1).randbytes(PAGE))
    with RawConn(d.socket, timeout=30) as conn:
        reply = conn.call("events.list", {"since": 0, "limit": 10000})
        assert reply["error"]["data"]["code"] == "STORE_CORRUPT", reply
        assert "--recover-store" in reply["error"]["message"]
        assert conn.result("daemon.health")["status"] == "SERVING"
