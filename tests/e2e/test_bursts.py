"""Starts in bursts (issue 22 item 10), with the real daemon, real monitors and real
bubblewrap: monitors are forked by the monitor fork server, which can die without
losing an exec; a burst of starts runs each command once and grows a sandbox's zygotes,
which go back to one once the burst is over. How fast is measured in bench/burst.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_zygote import PROBE, _zygote_pids
from tests.harness import DaemonProc, wait_for
from tether.client.blocking import Client
from tether.runtime.monitors import BURST_IDLE, ZYGOTES_PER_SANDBOX


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _ppid(pid: int) -> int:
    return int(_stat(pid)[1])


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except OSError:
        return False


def _fork_server(c: Client) -> int:
    status: dict[str, Any] = c._call("daemon.status", {})
    pid = status["monitors"]["fork_server"]
    assert isinstance(pid, int), status["monitors"]
    return pid


def test_monitors_are_forked_by_the_fork_server(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "30"])
    mon = daemon.handles(x.id)["monitor"]["pid"]
    server = _fork_server(c)
    assert _ppid(mon) == server and _ppid(server) == daemon.pid
    cmdline = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    assert cmdline[-2:] == [b"--fork-server", b""], cmdline
    # A monitor of its own, as one started from scratch is: its own session, in /.
    assert int(_stat(mon)[3]) == mon  # its session id
    assert os.readlink(f"/proc/{mon}/cwd") == "/"
    assert os.readlink(f"/proc/{mon}/fd/0") == "/dev/null"  # detached once it started
    c.exec_cancel(x.id, grace=1)
    assert c.exec_wait(x.id, timeout=20).state == "CANCELLED"


def test_a_killed_fork_server_loses_no_exec_and_is_replaced(daemon: DaemonProc,
                                                           tmp_path: Path) -> None:
    c = daemon.client()
    go = tmp_path / "go"
    x = c.exec_start(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"])
    server = _fork_server(c)
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: not _alive(server), what="the fork server gone")
    mon = daemon.handles(x.id)["monitor"]["pid"]
    assert _alive(mon)  # its monitor lives on, in its own session
    go.touch()
    assert c.exec_wait(x.id, timeout=20).exit_code == 3
    # Starts go on: from the pool, then from a new fork server.
    for _ in range(4):
        y = c.exec_start(["true"])
        assert c.exec_wait(y.id, timeout=20).exit_code == 0
    new = wait_for(lambda: (p := _fork_server(c)) != server and p, what="a new fork server")
    assert _ppid(new) == daemon.pid


def test_the_fork_server_ends_with_its_daemon_and_its_execs_are_adopted(
        daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    go = tmp_path / "go"
    x = c.exec_start(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"])
    server = _fork_server(c)
    daemon.kill9()
    wait_for(lambda: not _alive(server), what="the fork server gone with its daemon")
    assert _alive(daemon.handles(x.id)["monitor"]["pid"])
    daemon.start()
    c = daemon.client()
    assert c.exec_get(x.id).state == "RUNNING"
    go.touch()
    assert c.exec_wait(x.id, timeout=20).exit_code == 4


@pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")
def test_a_burst_starts_each_command_once_then_the_zygotes_go_back_to_one(
        daemon: DaemonProc, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    c = daemon.client()
    c.sandbox_create("zb", runtime="bwrap", workspace=str(ws))
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)  # cold: wants one
    wait_for(lambda: _zygote_pids(ws), what="a zygote for the sandbox")
    ids: list[str] = []
    errors: list[BaseException] = []

    def starter(k: int) -> None:
        cl = daemon.client()
        try:
            for i in range(6):
                ids.append(cl.exec_start(
                    ["sh", "-c", f'echo "$TETHER_EXEC_ID" >> ran-{k}-{i}; sleep 60'],
                    sandbox="zb").id)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=starter, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    zygotes = c._call("daemon.status", {})["monitors"]["zygotes"]
    [zb] = [z for z in zygotes if z["sandbox"] == c.sandbox_get("zb").id]
    assert zb["wanted"] > ZYGOTES_PER_SANDBOX, zygotes  # five at once: more were wanted
    assert len(set(ids)) == 30
    for x in ids:
        assert c.exec_get(x).state == "RUNNING"
    def all_ran() -> list[Path] | None:
        files = sorted(ws.glob("ran-*"))
        return files if len(files) == 30 else None

    ran = wait_for(all_ran, what="30 commands running")
    assert sorted(f.read_text().strip() for f in ran) == sorted(ids)  # each once
    for x in ids:
        c.exec_cancel(x, signal="KILL", grace=0)
    for x in ids:
        assert c.exec_wait(x, timeout=30).state == "CANCELLED"
    # Once no start has come for BURST_IDLE, the sandbox keeps one zygote again (the
    # bwrap of a warm exec kept the zygote's command line: counted once they ended).
    time.sleep(BURST_IDLE)
    wait_for(lambda: len(_zygote_pids(ws)) == ZYGOTES_PER_SANDBOX * 2, 30,
             what="one zygote left (its bwrap and the sandbox's init)")
    [zb] = [z for z in c._call("daemon.status", {})["monitors"]["zygotes"]
            if z["sandbox"] == zb["sandbox"]]
    assert (zb["wanted"], zb["idle"]) == (ZYGOTES_PER_SANDBOX, ZYGOTES_PER_SANDBOX), zb
