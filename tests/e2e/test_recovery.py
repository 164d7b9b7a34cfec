"""The recovery contract (issue 2, cases 1-7), each with a real SIGKILL of the daemon."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, wait_for
from tether.client.blocking import Client
from tether.client.errors import DaemonUnavailable
from tether.hostio.proc import is_same_process, proc_start_time
from tether.model.records import Event


def gated(tmp: Path, code: int, out: str = "done") -> list[str]:
    """A command that runs until ``tmp/go`` exists, prints ``out`` and exits ``code``."""
    return ["sh", "-c",
            f"echo started; while [ ! -e {tmp}/go ]; do sleep 0.02; done; echo {out}; "
            f"exit {code}"]


def exec_events(c: Client, exec_id: str) -> list[Event]:
    return [e for e in c.events_list(limit=10000).events if e.exec == exec_id]


def assert_journal_sound(c: Client) -> None:
    """Every stream's seq is 1..n with no gap or duplicate; gseq strictly increases."""
    evs = c.events_list(limit=10000).events
    gseqs = [e.gseq for e in evs]
    assert gseqs == sorted(set(gseqs))
    streams: dict[Any, list[int]] = {}
    for e in evs:
        streams.setdefault(e.sandbox, []).append(e.seq)
    for stream, seqs in streams.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"stream {stream}: {seqs}"


def test_case1_running_exec_is_readopted_and_finishes_with_real_code(
        daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    x = c.exec_start(gated(tmp_path, 5))
    monitor = daemon.handles(x.id)["monitor"]
    daemon.kill9()
    assert is_same_process(monitor["pid"], monitor["start_time"]), "monitor died with daemon"
    daemon.start()
    c = daemon.client()
    again = c.exec_get(x.id)
    assert again.state == "RUNNING"
    assert again.pid == x.pid
    assert c.status().recovery["adopted"] == 1
    (tmp_path / "go").touch()
    done = c.exec_wait(x.id, timeout=10)
    assert (done.state, done.exit_code) == ("FINISHED", 5)
    states = [e.state for e in exec_events(c, x.id)]
    assert states == ["PENDING", "RUNNING", "FINISHED"]
    assert_journal_sound(c)


def test_case2_exec_that_ended_while_daemon_was_down(daemon: DaemonProc,
                                                     tmp_path: Path) -> None:
    c = daemon.client()
    x = c.exec_start(gated(tmp_path, 4))
    exit_file = daemon.home / "logs" / "default" / f"{x.id}.exit"
    daemon.kill9()
    (tmp_path / "go").touch()
    wait_for(exit_file.exists, what="exit file")
    ended_at = json.loads(exit_file.read_text())["ended_at"]
    daemon.start()
    c = daemon.client()
    done = c.exec_get(x.id)
    assert (done.state, done.exit_code) == ("FINISHED", 4)
    assert done.ended_at == ended_at
    assert c.status().recovery["finished"] == 1
    assert_journal_sound(c)


def test_timeout_that_fires_while_daemon_is_down(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"], timeout=0.5, kill_grace=0.2)
    daemon.kill9()
    exit_file = daemon.home / "logs" / "default" / f"{x.id}.exit"
    wait_for(exit_file.exists, what="exit file")
    daemon.start()
    done = daemon.client().exec_get(x.id)
    assert done.state == "CANCELLED"
    assert done.signal == signal.SIGTERM
    assert "timeout" in done.reason


def _kill_monitor_and_child(daemon: DaemonProc, exec_id: str) -> dict[str, Any]:
    h = daemon.handles(exec_id)
    os.kill(h["monitor"]["pid"], signal.SIGKILL)
    os.killpg(h["child"]["pid"], signal.SIGKILL)
    wait_for(lambda: not is_same_process(h["child"]["pid"], h["child"]["start_time"])
             and not is_same_process(h["monitor"]["pid"], h["monitor"]["start_time"]))
    return h


def test_case3_monitor_and_child_died_without_exit_file(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"])
    daemon.kill9()
    _kill_monitor_and_child(daemon, x.id)
    daemon.start()
    c = daemon.client()
    failed = c.exec_get(x.id)
    assert failed.state == "FAILED"
    assert "both gone" in failed.reason
    assert c.status().recovery["failed"] == 1


def test_monitor_killed_while_daemon_runs_fails_exec_and_kills_orphan(
        daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"])
    h = daemon.handles(x.id)
    os.kill(h["monitor"]["pid"], signal.SIGKILL)
    done = c.exec_wait(x.id, timeout=10)
    assert done.state == "FAILED"
    assert "monitor" in done.reason
    wait_for(lambda: not is_same_process(h["child"]["pid"], h["child"]["start_time"]),
             what="orphaned child killed")


@pytest.mark.parametrize("point", ["exec.after_commit", "exec.after_handoff"])
def test_case4_crash_between_commit_and_start_runs_at_most_once(
        stopped_daemon: DaemonProc, tmp_path: Path, point: str) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_FAULT": point})
    marker = tmp_path / "ran"
    c = d.client(reconnect=0.5)
    with pytest.raises(DaemonUnavailable):
        c.exec_start(["sh", "-c", f"echo x >> {marker}; sleep 0.3"], name="once",
                     request_key="fault-test-key")
    d.proc.wait()  # type: ignore[union-attr]
    assert d.proc.returncode == -signal.SIGKILL  # type: ignore[union-attr]
    d.start()
    c = d.client()
    # The same request retried after the restart never starts a second copy.
    x = c.exec_start(["sh", "-c", f"echo x >> {marker}; sleep 0.3"], name="once",
                     request_key="fault-test-key")
    done = c.exec_wait(x.id, timeout=10)
    if point == "exec.after_commit":
        assert done.state == "FAILED"
        assert "INTERRUPTED" in done.reason
        time.sleep(0.3)
        assert not marker.exists()
    else:
        assert (done.state, done.exit_code) == ("FINISHED", 0)
        assert marker.read_text() == "x\n"
    assert len(c.exec_list(all=True)) == 1
    assert_journal_sound(c)


def test_case4_sdk_retry_across_crash_starts_exactly_once(stopped_daemon: DaemonProc,
                                                          tmp_path: Path) -> None:
    """The SDK reconnects, auto-starts a healthy daemon and retries with its request key."""
    d = stopped_daemon
    d.start(env={"TETHER_FAULT": "exec.after_handoff"})
    marker = tmp_path / "ran"
    c = d.client(autostart=True, reconnect=20)
    x = c.exec_start(["sh", "-c", f"echo x >> {marker}"])
    done = c.exec_wait(x.id, timeout=10)
    assert done.state == "FINISHED"
    assert marker.read_text() == "x\n"
    assert len(c.exec_list(all=True)) == 1


def _spawn_with_pid(target: int, argv: list[str]) -> subprocess.Popen[bytes] | None:
    """Start ``argv`` with exactly ``target`` as its pid (root: ns_last_pid), if we can."""
    for _ in range(50):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(target - 1))
        except OSError:
            return None
        p = subprocess.Popen(argv, start_new_session=True)
        if p.pid == target:
            return p
        p.kill()
        p.wait()
    return None


def test_case5_reused_pid_is_neither_adopted_nor_signalled(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"])
    daemon.kill9()
    h = _kill_monitor_and_child(daemon, x.id)
    # A new, unrelated process now holds the monitor's pid (real reuse when we can
    # steer pid allocation; otherwise the handles file is pointed at a live decoy).
    decoy = _spawn_with_pid(h["monitor"]["pid"], ["sleep", "100"])
    if decoy is None:
        decoy = subprocess.Popen(["sleep", "100"], start_new_session=True)
        h["monitor"]["pid"] = decoy.pid
        h["child"]["pid"] = decoy.pid
        (daemon.home / "run" / f"{x.id}.handles.json").write_text(json.dumps(h))
    try:
        assert proc_start_time(decoy.pid) != h["monitor"]["start_time"]
        daemon.start()
        c = daemon.client()
        failed = c.exec_get(x.id)
        assert failed.state == "FAILED"
        time.sleep(0.2)
        assert decoy.poll() is None, "the unrelated process was signalled"
    finally:
        decoy.kill()
        decoy.wait()


def test_case6_corrupt_files_give_clear_reasons_and_daemon_keeps_going(
        daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    a = c.exec_start(["sleep", "100"])
    b = c.exec_start(gated(tmp_path, 0))
    ok = c.exec_start(["sleep", "100"])
    daemon.kill9()
    _kill_monitor_and_child(daemon, a.id)
    (daemon.home / "run" / f"{a.id}.handles.json").write_bytes(b'{"version": 1, "moni')
    (tmp_path / "go").touch()
    b_exit = daemon.home / "logs" / "default" / f"{b.id}.exit"
    wait_for(b_exit.exists)
    b_exit.write_bytes(b"\x00\x01garbage")
    daemon.start()
    c = daemon.client()
    fa = c.exec_get(a.id)
    assert fa.state == "FAILED" and "handles file" in fa.reason and "corrupt" in fa.reason
    fb = c.exec_get(b.id)
    assert fb.state == "FAILED" and "exit file" in fb.reason and "corrupt" in fb.reason
    assert c.exec_get(ok.id).state == "RUNNING"
    assert c.health().status == "SERVING"


def test_case7_logs_byte_identical_and_journal_continuous_across_crashes(
        daemon: DaemonProc, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(
        "import os, sys, time, random\n"
        "r = random.Random(7)\n"
        "for i in range(40):\n"
        "    os.write(1, r.randbytes(r.randint(1, 70000)))\n"
        "    os.write(2, b'line %d\\n' % i)\n"
        "    time.sleep(0.01)\n")
    import random

    r = random.Random(7)
    expected = b"".join(r.randbytes(r.randint(1, 70000)) for _ in range(40))
    c = daemon.client()
    x = c.exec_start([sys.executable, str(script)])
    for _ in range(3):
        time.sleep(0.1)
        daemon.kill9()
        time.sleep(0.05)
        daemon.start()
    c = daemon.client()
    done = c.exec_wait(x.id, timeout=20)
    assert (done.state, done.exit_code) == ("FINISHED", 0)
    got = b"".join(c.read_logs(x.id))
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest()
    assert b"".join(c.read_logs(x.id, stream="stderr")) == b"".join(
        b"line %d\n" % i for i in range(40))
    cli = daemon.cli("logs", x.id)
    assert cli.returncode == 0 and cli.stdout == expected
    assert_journal_sound(c)
    started = [e for e in c.events_list(limit=10000).events if e.type == "daemon.started"]
    assert len(started) == 4


@pytest.mark.parametrize("owner,reason", [("monitor 4242\n", "died before starting"),
                                          ("daemon 4242 failed it\n", "INTERRUPTED")])
def test_claimed_but_never_started_exec_fails_with_the_right_reason(
        stopped_daemon: DaemonProc, owner: str, reason: str) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_FAULT": "exec.after_commit"})
    c = d.client(reconnect=0.5)
    with pytest.raises(DaemonUnavailable):
        c.exec_start(["true"], request_key="claim-test-key")
    d.proc.wait()  # type: ignore[union-attr]
    # The exec is PENDING with no handles; a claim file exists that nobody holds.
    import sqlite3

    db = sqlite3.connect(d.home / "tether.db")
    (exec_id,) = db.execute("SELECT id FROM execs").fetchone()
    db.close()
    (d.home / "run" / f"{exec_id}.claim").write_text(owner)
    d.start()
    failed = d.client().exec_get(exec_id)
    assert failed.state == "FAILED"
    assert reason in failed.reason


def test_deletion_interrupted_by_a_crash_is_finished_on_restart(daemon: DaemonProc) -> None:
    import threading

    c = daemon.client()
    c.sandbox_create("doomed")
    x = c.exec_start(["sh", "-c", "trap '' TERM; echo armed; sleep 100"], sandbox="doomed")
    # Delete only once the trap is set: a SIGTERM that beats it ends the exec, and then
    # the deletion finishes before the crash this test is about.
    wait_for(lambda: b"armed" in b"".join(c.read_logs(x.id)), what="trap armed")
    deleter = daemon.client(reconnect=0.5)

    def delete() -> None:
        with pytest.raises(DaemonUnavailable):
            deleter.sandbox_delete("doomed", grace=30)

    t = threading.Thread(target=delete)
    t.start()
    wait_for(lambda: c.sandbox_get("doomed").state == "DELETING")
    daemon.kill9()
    t.join(10)
    daemon.start()
    c = daemon.client()
    assert c.exec_get(x.id).state == "CANCELLED"
    assert all(s.name != "doomed" for s in c.sandbox_list())
    assert [s.state for s in c.sandbox_list(all=True)
            if s.name == "doomed"] == ["DELETED"]


def _scratch(daemon: DaemonProc, exec_id: str, monitor_pid: int) -> list[Path]:
    """What a monitor killed mid-write leaves besides its socket: the atomic writes'
    temporaries (handles, exit) and its private claim name."""
    run = daemon.home / "run"
    (exit_file,) = daemon.home.glob(f"logs/*/{exec_id}.stdout.log")
    return [run / f"{exec_id}.handles.json.tmp.{monitor_pid}",
            exit_file.with_name(f"{exec_id}.exit.tmp.{monitor_pid}"),
            run / f"{exec_id}.claim.{monitor_pid}.tmp"]


@pytest.mark.parametrize("daemon_down", [False, True])
def test_a_killed_monitors_scratch_files_are_removed_and_only_its(
        daemon: DaemonProc, daemon_down: bool) -> None:
    """Settled by the watch (daemon up) or by start-up recovery (daemon down); a live
    monitor's files, the logs and the claim stay."""
    c = daemon.client()
    x = c.exec_start(["sh", "-c", "echo out; exec sleep 100"])
    y = c.exec_start(["sleep", "100"])
    hx, hy = daemon.handles(x.id), daemon.handles(y.id)
    mine = _scratch(daemon, x.id, hx["monitor"]["pid"])
    theirs = _scratch(daemon, y.id, hy["monitor"]["pid"])
    for p in mine + theirs:
        p.write_bytes(b'{"version": 1, "half')
    sock_x, sock_y = Path(hx["socket"]), Path(hy["socket"])
    assert sock_x.exists() and sock_y.exists()
    if daemon_down:
        daemon.kill9()
    os.kill(hx["monitor"]["pid"], signal.SIGKILL)
    if daemon_down:
        wait_for(lambda: not is_same_process(hx["monitor"]["pid"],
                                             hx["monitor"]["start_time"]), what="monitor gone")
        daemon.start()
        c = daemon.client()
    assert c.exec_wait(x.id, timeout=10).state == "FAILED"
    wait_for(lambda: not any(p.exists() for p in [sock_x, *mine]), what="scratch removed")
    assert all(p.exists() for p in [sock_y, *theirs])
    assert c.exec_get(y.id).state == "RUNNING"
    assert b"".join(c.read_logs(x.id)) == b"out\n"
    assert (daemon.home / "run" / f"{x.id}.claim").exists()  # no monitor may claim it again
    c.exec_cancel(y.id, signal="KILL")
    for p in theirs:
        p.unlink()
