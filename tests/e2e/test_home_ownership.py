"""Who may start a daemon on a home, and what a daemon does once its home is gone.

Agent-side calls (``tether agent turn``, the hook program, ``Session``) never start a
daemon: they retry within a few seconds, then fail clearly. A daemon whose home is
deleted or replaced stops.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.harness import TETHER, DaemonProc

FAST_SWEEP = {"TETHER_SWEEP_INTERVAL": "0.2"}


def agent_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_SESSION": "nosuch",
           "TETHER_TOKEN": "nosuchtoken"}
    env.pop("TETHER_SOCKET", None)
    return env


def no_daemon_started(home: Path) -> bool:
    return not (home / "tether.sock").exists() and not (home / "daemon.pid").exists()


def test_agent_turn_never_autostarts_and_fails_clearly(stopped_daemon: DaemonProc) -> None:
    t0 = time.monotonic()
    r = subprocess.run([*TETHER, "agent", "turn", "--context-pct", "10"], capture_output=True,
                       timeout=60, env=agent_env(stopped_daemon.home))
    took = time.monotonic() - t0
    assert r.returncode != 0
    assert b"no tether daemon answers" in r.stderr, r.stderr
    assert b"an agent never starts a daemon" in r.stderr
    assert 4.0 <= took < 30, took  # it waited out its budget (5 s), no more than needed
    assert no_daemon_started(stopped_daemon.home)


def test_hook_program_never_autostarts(stopped_daemon: DaemonProc) -> None:
    r = subprocess.run([sys.executable, "-m", "tether.agent.hook", "claude", "PreToolUse"],
                       input=b'{"tool_name": "Bash"}', capture_output=True, timeout=60,
                       env=agent_env(stopped_daemon.home))
    assert r.returncode == 0  # never blocks the agent because of tether
    assert b"not delivered" in r.stderr and b"no tether daemon answers" in r.stderr
    assert no_daemon_started(stopped_daemon.home)


def test_agent_turn_waits_for_a_daemon_that_comes_back(stopped_daemon: DaemonProc) -> None:
    """A daemon restarting within the budget answers the call (here: no such session)."""
    timer = threading.Timer(1.5, stopped_daemon.start)
    timer.start()
    try:
        r = subprocess.run([*TETHER, "agent", "turn"], capture_output=True, timeout=60,
                           env=agent_env(stopped_daemon.home))
    finally:
        timer.join()
    assert r.returncode != 0
    assert b"no tether daemon answers" not in r.stderr, r.stderr
    assert stopped_daemon.proc is not None and stopped_daemon.proc.poll() is None


def test_daemon_whose_home_is_deleted_exits(stopped_daemon: DaemonProc) -> None:
    stopped_daemon.start(env=FAST_SWEEP)
    proc = stopped_daemon.proc
    assert proc is not None
    shutil.rmtree(stopped_daemon.home)
    try:
        assert proc.wait(15) == 1
    finally:
        stopped_daemon.home.mkdir(exist_ok=True)  # for the fixture's clean-up


def test_daemon_whose_home_is_replaced_exits_and_leaves_the_new_home_alone(
        stopped_daemon: DaemonProc) -> None:
    stopped_daemon.start(env=FAST_SWEEP)
    proc = stopped_daemon.proc
    assert proc is not None
    home = stopped_daemon.home
    moved = home.parent / (home.name + ".old")
    os.rename(home, moved)
    stopped_daemon.home = moved  # the harness' logs and clean-up went with it
    home.mkdir(mode=0o700)
    (home / "tether.sock").write_bytes(b"")  # stands for the new home's daemon's socket
    try:
        assert proc.wait(15) == 1
        lines = [ln for ln in stopped_daemon.log_text().splitlines()
                 if "was deleted or replaced" in ln]
        assert len(lines) == 1, stopped_daemon.log_text()
        assert (home / "tether.sock").exists()  # not the old daemon's to remove
    finally:
        shutil.rmtree(home, ignore_errors=True)
        os.rename(moved, home)
        stopped_daemon.home = home
