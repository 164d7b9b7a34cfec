"""Zygotes (pre-started bwrap sandboxes, tether.monitor.zygote) with real bubblewrap and a
real daemon: a warm start is the cold one, only sooner; no zygote outlives its sandbox or
its daemon."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.harness import DaemonProc, wait_for
from tether.client.blocking import Client
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")

#: What a sandbox shows of itself: env, cwd, host name, network, writes outside the
#: workspace, tether's home, processes, fds, its process, the exit status.
PROBE_SCRIPT = (
    'echo "id=$TETHER_EXEC_ID" "x=$X" "pwd=$(pwd)" "host=$(hostname)"; '
    "env | sort | grep -v '^TETHER_EXEC_ID=' | sed 's/^/env /'; "
    "awk -F: 'NR > 2 {print \"if\", $1}' /proc/net/dev; "
    "touch /usr/tether-was-here 2>/dev/null || echo ro-usr; "
    'ls "$HOME_TO_HIDE" 2>/dev/null | grep -c tether.db; '
    # (counted by the shell's own glob: in `ls /proc | grep`, whether grep had started
    # when ls read /proc was a race, seen as 3 vs 4 under load)
    "set -- /proc/[0-9]*; echo $#; ls /proc/self/fd | wc -l; "
    "ps -o pid=,pgid=,sid=,comm= -p $$ | wc -w; "
    "echo to-stderr >&2; exit 7")


def _zygote_pids(ws: Path) -> list[int]:
    """bwrap processes of zygotes for this workspace (their argv ends in the stub)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if (argv and os.path.basename(argv[0]) == b"bwrap" and argv[-1] == b"tether-zygote"
                and os.fsencode(str(ws)) in argv):
            found.append(int(d))
    return found


def _ready_zygotes(ws: Path) -> list[int]:
    """The zygotes' bwrap pids once a stub waits below one (the monitor says "ready" to
    the daemon right after it pins the stub; a moment later it is taken)."""
    pids = _zygote_pids(ws)
    if not any(_children(g) for p in pids for g in _children(p)):
        return []
    time.sleep(0.3)
    return pids


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _run(c: Client, daemon: DaemonProc, ws: Path) -> tuple[int, int | None, bytes, bytes]:
    x = c.exec_start(["sh", "-c", PROBE_SCRIPT], sandbox="zb", cwd=str(ws / "sub"),
                     env={"X": "it's \"quoted\" $HOME", "HOME_TO_HIDE": str(daemon.home)})
    done = c.exec_wait(x.id, timeout=20)
    out = b"".join(c.read_logs(x.id)).replace(x.id.encode(), b"<id>")
    err = b"".join(c.read_logs(x.id, stream="stderr"))
    assert done.exit_code is not None
    return x.pid or 0, done.exit_code, out, err


@pytest.fixture
def zb(daemon: DaemonProc, tmp_path: Path) -> tuple[Client, Path]:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    c = daemon.client()
    c.sandbox_create("zb", runtime="bwrap", workspace=str(ws))
    return c, ws


def test_a_warm_start_is_the_cold_one(daemon: DaemonProc, zb: tuple[Client, Path]) -> None:
    c, ws = zb
    assert not _zygote_pids(ws)
    cold_pid, *cold = _run(c, daemon, ws)  # the first exec starts cold; a zygote follows
    zygotes = wait_for(lambda: _ready_zygotes(ws), what="a zygote for the sandbox")
    warm_pid, *warm = _run(c, daemon, ws)
    assert warm_pid in zygotes and cold_pid not in zygotes  # it ran in the zygote
    assert warm[0] == cold[0] and warm[2] == cold[2]
    assert warm[1].decode().splitlines() == cold[1].decode().splitlines()  # line by line
    code, out, err = warm
    assert code == 7 and err == b"to-stderr\n"
    assert b"id=<id>" in out and b"x=it's \"quoted\" $HOME" in out
    assert f"pwd={ws}/sub host=tether-sandbox".encode() in out
    assert [ln.split() for ln in out.splitlines() if ln.startswith(b"if")] == [[b"if", b"lo"]]
    assert b"ro-usr\n0\n" in out


def test_a_warm_exec_is_killed_and_reports_its_signal(daemon: DaemonProc,
                                                      zb: tuple[Client, Path]) -> None:
    c, ws = zb
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    zygotes = wait_for(lambda: _ready_zygotes(ws), what="a zygote for the sandbox")
    x = c.exec_start(["sh", "-c", "kill -TERM $$; sleep 5"], sandbox="zb")
    assert x.pid in zygotes
    done = c.exec_wait(x.id, timeout=20)
    assert (done.exit_code, done.signal) == (None, 15), done
    wait_for(lambda: _zygote_pids(ws), what="the next zygote")
    x = c.exec_start(["sleep", "300"], sandbox="zb")
    c.exec_cancel(x.id, grace=1)
    assert c.exec_wait(x.id, timeout=20).state == "CANCELLED"


def test_deleting_the_sandbox_ends_its_zygotes(daemon: DaemonProc,
                                               zb: tuple[Client, Path]) -> None:
    c, ws = zb
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    wait_for(lambda: _zygote_pids(ws), what="a zygote for the sandbox")
    c.sandbox_delete("zb")
    wait_for(lambda: not _zygote_pids(ws), what="the zygote gone with its sandbox")


def test_a_killed_daemon_leaves_no_zygote(daemon: DaemonProc,
                                          zb: tuple[Client, Path]) -> None:
    c, ws = zb
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    wait_for(lambda: _zygote_pids(ws), what="a zygote for the sandbox")
    daemon.kill9()
    wait_for(lambda: not _zygote_pids(ws), what="the zygote gone with its daemon")
    daemon.start()
    c = daemon.client()
    x = c.exec_start(["true"], sandbox="zb")  # cold again; the next one warm
    assert c.exec_wait(x.id, timeout=20).exit_code == 0
    wait_for(lambda: _zygote_pids(ws), what="a zygote from the new daemon")


def test_a_workspace_replaced_at_the_same_path_is_not_served_by_an_old_zygote(
        daemon: DaemonProc, zb: tuple[Client, Path]) -> None:
    """A zygote's binds are as of its start: after ``rm -rf ws; mkdir ws`` a warm start
    would write into the deleted directory."""
    c, ws = zb
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    zygotes = wait_for(lambda: _ready_zygotes(ws), what="a zygote for the sandbox")
    (ws / "sub").rmdir()
    ws.rmdir()
    ws.mkdir()
    x = c.exec_start(["sh", "-c", "echo new > made"], sandbox="zb")
    assert c.exec_wait(x.id, timeout=20).exit_code == 0
    assert x.pid not in zygotes
    assert (ws / "made").read_text() == "new\n"
