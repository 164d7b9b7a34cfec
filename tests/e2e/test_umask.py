"""Commands get their user's umask, not the daemon's private 077 (issue 20, finding 9):
files an agent writes into the user's repository are 0664 under umask 002 (0600 before).
The daemon's own files stay private. Real daemon, real monitors, real bubblewrap."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tether.runtime import bwrap

USER_UMASK = 0o002  # not the usual 022: a value no default would produce


def started(env: dict[str, str] | None = None) -> DaemonProc:
    d = DaemonProc(new_home(), env=env)
    old = os.umask(USER_UMASK)  # the user's shell, which starts the daemon
    try:
        d.start()
    finally:
        os.umask(old)
    return d


@pytest.fixture
def process_daemon() -> Iterator[DaemonProc]:
    d = started()
    yield d
    d.cleanup()
    remove_home(d.home)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def run(d: DaemonProc, tmp: Path, script: str) -> str:
    r = d.cli("run", "--cwd", str(tmp), "--", "/bin/sh", "-c", script)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().strip()


def test_a_command_and_an_agent_get_the_users_umask(process_daemon: DaemonProc,
                                                     tmp_path: Path) -> None:
    d = process_daemon
    for n in range(3):  # the first from a fresh monitor, then from the pool's
        assert run(d, tmp_path, f"umask; echo x > f{n}") == "0002"
        assert mode(tmp_path / f"f{n}") == 0o664
    c = d.client()
    c.agent_start(["/bin/sh", "-c", "echo x > agent.txt; sleep 30"], provider="generic",
                  cwd=str(tmp_path), env={"PATH": os.environ["PATH"]})
    wait_for(lambda: (tmp_path / "agent.txt").exists(), what="the agent's file")
    assert mode(tmp_path / "agent.txt") == 0o664
    # The daemon's own state stays private.
    assert mode(d.home / "tether.db") & 0o077 == 0
    assert all(mode(p) & 0o077 == 0 for p in (d.home / "logs").rglob("*") if p.is_file())


@pytest.mark.skipif(not bwrap.probe().available, reason="bwrap is not available here")
def test_a_bwrap_command_gets_the_users_umask_cold_and_from_a_zygote(tmp_path: Path) -> None:
    d = started({"TETHER_DEFAULT_RUNTIME": "auto"})
    try:
        assert d.client().sandbox_get("default").spec.runtime == "bwrap"
        for n in range(3):  # a cold start, then pre-started sandboxes (zygotes)
            assert run(d, tmp_path, f"umask; echo x > f{n}") == "0002"
            assert mode(tmp_path / f"f{n}") == 0o664
    finally:
        d.cleanup()
        remove_home(d.home)


