"""Daemon lifecycle: the exclusive home lock, SIGTERM drain, auto-start, permissions."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, RawConn, raw_call, wait_for
from tether.client.blocking import Client
from tether.client.errors import DaemonUnavailable
from tether.client.replies import ExecView
from tether.model.layout import HOME_LOCKED_EXIT, STORE_REFUSED_EXIT


def test_second_daemon_is_refused_naming_the_first(daemon: DaemonProc) -> None:
    r = subprocess.run([*TETHER, "--home", str(daemon.home), "daemon"], capture_output=True,
                       timeout=20)
    assert r.returncode == HOME_LOCKED_EXIT == 75  # EX_TEMPFAIL: a documented status
    assert f"pid {daemon.pid}".encode() in r.stderr
    assert b"already running" in r.stderr
    assert daemon.client().health().status == "SERVING"


def test_two_daemons_racing_on_one_home_leave_exactly_one(stopped_daemon: DaemonProc) -> None:
    procs = [subprocess.Popen([*TETHER, "--home", str(stopped_daemon.home), "daemon"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(3)]
    try:
        wait_for(lambda: sum(p.poll() is not None for p in procs) == 2, timeout=20)
        losers = [p for p in procs if p.poll() is not None]
        assert all(p.returncode == HOME_LOCKED_EXIT for p in losers)
        winner = next(p for p in procs if p.poll() is None)
        wait_for(lambda: _health(stopped_daemon.home) == "SERVING")
        assert (stopped_daemon.home / "daemon.pid").read_text().strip() == str(winner.pid)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _health(home: Path) -> str | None:
    try:
        return str(raw_call(home / "tether.sock", "daemon.health")["result"]["status"])
    except (OSError, KeyError, ValueError):
        return None


def test_files_are_private(daemon: DaemonProc) -> None:
    assert stat.S_IMODE(os.stat(daemon.home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(daemon.home / "tether.db").st_mode) == 0o600
    x = daemon.client().exec_start(["true"])
    daemon.client().exec_wait(x.id, timeout=10)
    log = daemon.home / "logs" / "default" / f"{x.id}.stdout.log"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600


def test_sigterm_drains_and_leaves_execs_running(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c", f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done"])
    pid_file = daemon.home / "daemon.pid"
    assert pid_file.read_text().strip() == str(daemon.pid)
    assert daemon.term() == 0
    assert not pid_file.exists()
    assert not daemon.socket.exists()
    child = daemon.handles(x.id)["child"]
    os.kill(child["pid"], 0)  # still running without any daemon
    daemon.start()
    c = daemon.client()
    assert c.exec_get(x.id).state == "RUNNING"
    (tmp_path / "go").touch()
    assert c.exec_wait(x.id, timeout=10).state == "FINISHED"
    types = [e.type for e in c.events_list().events if e.sandbox is None]
    assert types == ["daemon.recovered", "daemon.started", "daemon.stopping",
                     "daemon.recovered", "daemon.started"]


def test_sigterm_answers_a_long_poll_in_flight_and_waits_no_longer(daemon: DaemonProc,
                                                                    tmp_path: Path) -> None:
    """Drain cancels a long poll, waits until its DAEMON_STOPPING reply is out (the last
    request in flight wakes it) and goes on at once, not at the end of its 10 s timeout."""
    wait = f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done"
    x = daemon.client().exec_start(["sh", "-c", wait])
    with RawConn(daemon.socket, timeout=20) as raw:
        raw.send_obj({"jsonrpc": "2.0", "id": 1, "method": "exec.wait",
                      "params": {"exec": x.id, "timeout": 60}})
        # The next line is read only once the long poll runs: its reply proves it in flight.
        assert raw.call("daemon.health")["result"]["status"] == "SERVING"
        t0 = time.monotonic()
        assert daemon.term() == 0
        took = time.monotonic() - t0
        reply = raw.recv_obj()
    assert reply["id"] == 1 and reply["error"]["data"]["code"] == "DAEMON_STOPPING", reply
    assert took < 8.0, f"the daemon took {took:.1f} s to stop: drain waited out its timeout"
    (tmp_path / "go").touch()


def test_sigint_also_drains(daemon: DaemonProc) -> None:
    assert daemon.proc is not None
    os.kill(daemon.pid, signal.SIGINT)
    assert daemon.proc.wait(20) == 0


def test_waiter_survives_a_graceful_restart(daemon: DaemonProc, tmp_path: Path) -> None:
    """A client blocked in exec.wait rides through a daemon stop and an auto-start."""
    c = Client(daemon.home, autostart=True, reconnect=30)
    x = c.exec_start(["sh", "-c", f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done; exit 6"])
    result: dict[str, ExecView] = {}
    t = threading.Thread(target=lambda: result.update(x=c.exec_wait(x.id, timeout=30)))
    t.start()
    assert daemon.term() == 0
    wait_for(lambda: _health(daemon.home) == "SERVING", timeout=20, what="auto-started daemon")
    (tmp_path / "go").touch()
    t.join(30)
    assert result["x"].state == "FINISHED" and result["x"].exit_code == 6
    c.close()


HOLD_HOME_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold_home_lock(home: Path, seconds: float) -> subprocess.Popen[bytes]:
    """A stand-in for a daemon between closing its socket and releasing its lock (the end
    of a graceful stop), made as long as we like."""
    home.mkdir(mode=0o700, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLD_HOME_LOCK, str(home / "daemon.lock"),
                          str(seconds)], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"locked\n"
    return p


def test_autostart_outlasts_a_daemon_still_releasing_its_lock(stopped_daemon: DaemonProc) -> None:
    """The graceful-restart race: the daemon a client starts finds the home still locked
    by one that is stopping. It exits 75, the client waits for the holder to go (longer
    than the 2 s it used to allow), starts another, and the call succeeds."""
    holder = _hold_home_lock(stopped_daemon.home, 3.0)
    c = Client(stopped_daemon.home, autostart=True, reconnect=30)
    try:
        assert c.health().status == "SERVING"
        assert holder.wait(10) == 0
        log = (stopped_daemon.home / "daemon.log").read_text()
        assert f"pid {holder.pid}) is already running" in log  # the first start lost
    finally:
        c.close()
        holder.kill()
        holder.wait()


def _daemons_on(home: Path) -> list[int]:
    """The pids of the ``python -m tether.daemon --home HOME`` processes still running."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tether.daemon" in argv and os.fsencode(home) in argv:
            found.append(int(d.name))
    return found


def test_autostart_names_a_lock_holder_that_never_answers(stopped_daemon: DaemonProc) -> None:
    """The daemon a client starts finds the home locked by a process that never answers:
    it exits 75, and when the client's budget runs out its error names the holder.

    The CLI's budget is 30 s; the short one here may run out before the daemon it started
    has even reached the lock (its start alone takes 3-4 s on a loaded machine), and that
    error can only say "see daemon.log". So the first call's budget is spent, the test
    waits until that daemon has refused the home, and the next call — which starts no
    second daemon while the holder lives — must name the holder."""
    home = stopped_daemon.home
    holder = _hold_home_lock(home, 60)
    c = Client(home, autostart=True, reconnect=2)
    try:
        with pytest.raises(DaemonUnavailable):
            c.health()
        wait_for(lambda: "is already running" in (home / "daemon.log").read_text()
                 and not _daemons_on(home), 30, what="the started daemon refusing the home")
        with pytest.raises(DaemonUnavailable) as e:
            c.health()
        assert f"pid {holder.pid}) is already running" in str(e.value)
        assert f"exited with status {HOME_LOCKED_EXIT}" in str(e.value)
        assert (home / "daemon.log").read_text().count("is already running") == 1
    finally:
        c.close()
        holder.kill()
        holder.wait()


def test_cli_autostarts_a_daemon(stopped_daemon: DaemonProc) -> None:
    r = stopped_daemon.cli("run", "--", "echo", "hello")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"hello\n"
    assert (stopped_daemon.home / "daemon.pid").exists()
    r = stopped_daemon.cli("daemon", "stop")
    assert r.returncode == 0 and b"stopped" in r.stdout
    assert not (stopped_daemon.home / "daemon.pid").exists()


def test_status_reports_counts(daemon: DaemonProc) -> None:
    c = daemon.client()
    c.exec_start(["sleep", "100"])
    st = c.status()
    assert st.pid == daemon.pid
    assert st.home == str(daemon.home)
    assert st.counts.execs == {"RUNNING": 1}
    assert st.uptime >= 0
    r = daemon.cli("status")
    assert r.returncode == 0 and b"running 1" in r.stdout


def test_unreadable_store_is_a_clear_startup_error(stopped_daemon: DaemonProc) -> None:
    (stopped_daemon.home / "tether.db").write_bytes(b"this is not a database" * 100)
    r = subprocess.run([*TETHER, "--home", str(stopped_daemon.home), "daemon"],
                       capture_output=True, timeout=20)
    assert r.returncode == STORE_REFUSED_EXIT
    assert b"is corrupt" in r.stderr and b"--recover-store" in r.stderr
    assert b"Traceback" not in r.stderr


def test_cli_without_daemon_and_autostart_impossible(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "tether.db").write_bytes(b"garbage" * 100)
    r = subprocess.run([*TETHER, "--home", str(home), "ps"], capture_output=True, timeout=60,
                       env={**os.environ})
    assert r.returncode == 125
    assert b"daemon.log" in r.stderr


def test_home_too_long_for_unix_sockets_is_refused_at_startup(tmp_path: Path) -> None:
    home = Path("/tmp") / ("h" * 100)
    try:
        r = subprocess.run([*TETHER, "--home", str(home), "daemon"], capture_output=True,
                           timeout=20)
        assert r.returncode == 1
        assert b"too long a path for its sockets" in r.stderr and b"--home DIR" in r.stderr
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def test_unknown_fault_point_is_a_clean_startup_error(stopped_daemon: DaemonProc) -> None:
    r = subprocess.run([*TETHER, "--home", str(stopped_daemon.home), "daemon"],
                       capture_output=True, timeout=20,
                       env={**os.environ, "TETHER_FAULT": "no.such.point"})
    assert r.returncode == 1
    assert b"unknown TETHER_FAULT point" in r.stderr and b"Traceback" not in r.stderr


def test_a_root_daemon_warns_once(daemon: DaemonProc) -> None:
    """Issue 23 item 7: the README advises against a root daemon; it now says so once, in
    its log at start, and `tether status` (and daemon.status) repeat it."""
    status = daemon.client().status()
    r = daemon.cli("status")
    assert r.returncode == 0, r.stderr
    if os.geteuid() != 0:
        assert status.warnings == [] and b"warning" not in r.stdout
        return
    assert len(status.warnings) == 1 and "runs as root" in status.warnings[0]
    assert b"warning  this daemon runs as root" in r.stdout
    daemon.client().exec_start(["true"])
    daemon.client().status()
    assert daemon.log_text().count("this daemon runs as root") == 1
