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


def test_a_schedule_firing_across_a_full_disk_is_not_wedged(tiny_home: Path) -> None:
    """Issue 22 finding 3: a run whose start failed while the disk was full, and whose
    FAILED commit failed too, stayed PENDING for good (``_start`` swallowed the second
    failure), and every later fire was SKIPPED "overlap"; a fire that could not be
    committed was retried at once, in a loop whose log filled the disk again. Now a
    failed commit backs off and what it left is re-driven: the job runs again once there
    is room. The disk fills across several fires (the default sweep: the WAL grows between
    checkpoints, so commits fail), then is freed."""
    d = DaemonProc(tiny_home)
    try:
        d.start()
        c = d.client()
        r = d.cli("schedule", "add", "tick", "--every", "2s", "--", "true")
        assert r.returncode == 0, r.stderr
        job = r.stdout.split()[0].decode()
        wait_for(lambda: _runs(d, job).count("SUCCESS") >= 1, 15, what="a first run")
        for _ in range(8):
            fill(tiny_home)
            time.sleep(2.5)  # at least one fire while full
            free(tiny_home)
            time.sleep(1.0)
        freed = time.monotonic()
        settled = len(_runs(d, job))

        def healthy() -> bool:
            runs = _runs(d, job)
            fresh = runs[: len(runs) - settled]  # newest first: the fires since the free
            return fresh.count("SUCCESS") >= 2 and "PENDING" not in runs[2:]

        wait_for(healthy, 40, interval=0.5,
                 what=f"runs fired after the free to succeed: {_runs(d, job)[:12]}")
        assert time.monotonic() - freed < 40
        for run in c.schedule_show(job, limit=100).recent[2:]:
            assert run.state in ("SUCCESS", "FAILED", "SKIPPED"), run  # none left behind
        log = d.log_text()
        assert len(log) < 64 * 1024, f"the log grew to {len(log)} bytes"  # no retry loop
        assert log.count("scheduler: ") < 20  # once per spell of failures
    finally:
        d.cleanup()


def _runs(d: DaemonProc, job: str) -> list[str]:
    """The job's runs' states, newest first."""
    return [r.state for r in d.client().schedule_show(job, limit=100).recent]


def test_a_delivery_whose_outcome_the_full_disk_refused_is_recorded_once_there_is_room(
        tiny_home: Path) -> None:
    """Issue 22 finding 3, the same failure in the webhook worker: a delivery made while
    the store could not record it stayed PROCESSING until the next daemon start. Now the
    outcome is committed again, with a backoff, once there is room: COMPLETED, and the
    receiver is not sent it twice."""
    from tests.receiver import Receiver

    d = DaemonProc(tiny_home)
    try:
        d.start()
        c = d.client()
        with Receiver() as rx:
            c.hook_add("ci", ["exec.finished"], url=rx.url)
            rx.hold()
            c.exec_start(["true"])
            wait_for(lambda: rx.held == 1, what="the delivery in flight")
            fill(tiny_home)
            for i in range(10000):  # use up the room the WAL had left: commits now fail
                try:
                    c.hook_add(f"filler-{i}", ["nothing.*"], url=rx.url)
                except TetherError as e:
                    assert e.code == "DISK_FULL", e
                    break
            rx.release()
            wait_for(lambda: rx.received, what="the delivery made")
            time.sleep(1.0)
            assert c.hook_show("ci").counts == {"PROCESSING": 1}  # its outcome refused
            free(tiny_home)
            wait_for(lambda: c.hook_show("ci").counts == {"COMPLETED": 1}, 40,
                     what=f"the outcome recorded: {c.hook_show('ci').counts}")
            assert len(rx.received) == 1  # recorded, not delivered again
        assert d.log_text().count("outbox: ") < 10  # once per spell of refusals
    finally:
        d.cleanup()
