"""A full disk (issue 11 #6), on a real 2 MiB tmpfs home: no exit status is lost, no exec
stays RUNNING once there is room again, clients get DISK_FULL, start-up fails in one line."""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProc, kill_strays, wait_for
from tether.model.errors import TetherError

FILLER = "filler"


@pytest.fixture
def tiny_home() -> Iterator[Path]:
    """A home on its own 2 MiB tmpfs (short path: monitor sockets must fit)."""
    home = Path(tempfile.mkdtemp(prefix="tdf", dir="/tmp"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs",
                              str(home)], capture_output=True)
    if mounted.returncode != 0:
        home.rmdir()
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield home
    finally:
        kill_strays(home, wait=2.0)
        subprocess.run(["umount", "-l", str(home)], check=False)
        home.rmdir()


@pytest.fixture
def tiny(tiny_home: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(tiny_home, env={"TETHER_SWEEP_INTERVAL": "0.2"})
    yield d
    d.cleanup()


def fill(home: Path) -> None:
    """Take every free block of the home's filesystem."""
    fd = os.open(home / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def free(home: Path) -> None:
    (home / FILLER).unlink()


def writer(gate: Path, code: int) -> list[str]:
    """A steady writer that exits ``code`` once ``gate`` exists."""
    return ["sh", "-c", f"while [ ! -e {gate} ]; do echo line; sleep 0.01; done; exit {code}"]


def scratch(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "logs").rglob("*.exit.tmp*"))


def test_exit_while_full_is_kept_and_settles_with_the_real_code(
        tiny: DaemonProc, tmp_path: Path) -> None:
    tiny.start()
    c = tiny.client()
    x = c.exec_start(writer(tmp_path / "go", 7))
    exit_file = tiny.home / "logs" / "default" / f"{x.id}.exit"
    wait_for(lambda: (tiny.home / "logs" / "default" / f"{x.id}.stdout.log").stat().st_size,
             what="output")
    fill(tiny.home)
    waiter = subprocess.Popen([*tiny_cli(tiny), "wait", x.id], stdout=subprocess.PIPE,
                              env=tiny.env)
    try:
        (tmp_path / "go").touch()
        # The reserved exit file needs no new block: the status is on disk while full.
        wait_for(exit_file.exists, 10, what="exit file written on a full disk")
        assert scratch(tiny.home) == []
        time.sleep(1.0)  # several sweeps: none can commit
        assert c.exec_get(x.id).state == "RUNNING"
        with pytest.raises(TetherError) as err:
            c.exec_start(["true"])
        assert (err.value.rpc_code, err.value.code) == (1009, "DISK_FULL"), err.value
        assert err.value.data["path"] == str(tiny.home / "tether.db")
        assert waiter.poll() is None
        free(tiny.home)
        assert waiter.wait(10) == 7
        assert waiter.stdout is not None and waiter.stdout.read().strip() == b"7"
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    done = c.exec_get(x.id)
    assert (done.state, done.exit_code) == ("FINISHED", 7)
    assert "settling exec" not in tiny.log_text()


def test_monitor_without_room_retries_until_space_returns(
        tiny: DaemonProc, tmp_path: Path) -> None:
    tiny.start()
    c = tiny.client()
    x = c.exec_start(writer(tmp_path / "go", 9))
    logs = tiny.home / "logs" / "default"
    monitor = tiny.handles(x.id)["monitor"]
    # Without its reservation (an exit record that outgrew it is the same case) the
    # monitor must keep the status in memory and retry. Made ahead by an idle monitor,
    # the reservation is an unnamed file the monitor holds open: free its blocks.
    assert _drop_exit_reservation(monitor["pid"], logs) == 1
    fill(tiny.home)
    (tmp_path / "go").touch()
    time.sleep(1.5)
    assert os.path.exists(f"/proc/{monitor['pid']}"), "the monitor gave up"
    assert not (logs / f"{x.id}.exit").exists()
    assert scratch(tiny.home) == []
    assert c.exec_get(x.id).state == "RUNNING"
    free(tiny.home)
    done = c.exec_wait(x.id, timeout=15)
    assert (done.state, done.exit_code) == ("FINISHED", 9)


def _drop_exit_reservation(pid: int, logs: Path) -> int:
    """Free the exit reservation of monitor ``pid`` (named ``<exit>.reserve``, or an
    unnamed file it holds open under ``logs`` or its parent); how many were found."""
    found = 0
    for p in logs.glob("*.exit.reserve"):
        p.unlink()
        found += 1
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if (target.startswith((f"{logs}/#", f"{logs.parent}/#"))
                and target.endswith(" (deleted)")):
            os.truncate(f"/proc/{pid}/fd/{fd}", 0)
            found += 1
    return found


def started_on_full(d: DaemonProc) -> str:
    """Start a daemon on the full home; its stderr (its log file could not be written)."""
    proc = subprocess.run([*tiny_cli(d), "daemon"], capture_output=True, timeout=30,
                          env=d.env)
    err = proc.stderr.decode()
    assert proc.returncode != 0, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tether:")]
    assert len(lines) == 1, err
    assert "full" in lines[0] and str(d.home) in lines[0], lines[0]
    return lines[0]


def test_daemon_started_on_a_full_disk_says_so_in_one_line(tiny: DaemonProc) -> None:
    tiny.start()
    assert tiny.term() == 0
    fill(tiny.home)
    started_on_full(tiny)
    free(tiny.home)
    tiny.start()
    assert tiny.client().health().status == "SERVING"


def test_daemon_on_a_fresh_full_home_says_so_in_one_line(tiny: DaemonProc) -> None:
    fill(tiny.home)
    started_on_full(tiny)


def tiny_cli(d: DaemonProc) -> list[str]:
    from tests.harness import TETHER

    return [*TETHER, "--home", str(d.home)]
