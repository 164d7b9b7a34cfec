"""A warm start (a zygote: its claim, monitor log, exit reservation and handles file made
ahead, unnamed, its socket under a temporary name) across crashes: a daemon SIGKILLed at
the start's fault points never lets the exec run twice (nor, killed before the hand-off,
at all), and a zygote's monitor SIGKILLed at any moment of the start leaves no command
running untracked."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.test_monitor_kill_window import (
    NEVER_RAN,
    kill_during_start,
    monitor_children,
    running_with,
)
from tests.e2e.test_zygote import PROBE, _ready_zygotes
from tests.harness import DaemonProc, wait_for
from tether.client.errors import DaemonUnavailable

pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")


def _zygote_monitors(ws: Path) -> list[int]:
    """The monitors (parents) of the zygotes ready for ``ws``."""
    out = []
    for pid in _ready_zygotes(ws):
        try:
            with open(f"/proc/{pid}/stat") as f:
                out.append(int(f.read().rsplit(")", 1)[1].split()[1]))
        except (OSError, ValueError):
            pass
    return out


@pytest.mark.parametrize("point", ["exec.after_commit", "exec.after_handoff"])
def test_a_daemon_killed_during_a_warm_start_runs_it_at_most_once(
        stopped_daemon: DaemonProc, tmp_path: Path, point: str) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_FAULT": f"{point}#2"})  # the second exec: the warm one
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = ws / "ran"  # the sandbox writes only its workspace
    c = d.client(reconnect=0.5)
    c.sandbox_create("zb", runtime="bwrap", workspace=str(ws))
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    zygotes = wait_for(lambda: _ready_zygotes(ws), what="a zygote for the sandbox")
    argv = ["sh", "-c", f"echo x >> {marker}; sleep 1"]
    with pytest.raises(DaemonUnavailable):
        c.exec_start(argv, sandbox="zb", request_key="warm-fault")
    d.proc.wait()  # type: ignore[union-attr]
    assert d.proc.returncode == -signal.SIGKILL  # type: ignore[union-attr]
    d.start()
    c = d.client()
    x = c.exec_start(argv, sandbox="zb", request_key="warm-fault")  # the same request
    if point == "exec.after_handoff":
        assert d.handles(x.id)["child"]["pid"] in zygotes  # it did start warm
    done = c.exec_wait(x.id, timeout=20)
    claim = (d.home / "run" / f"{x.id}.claim").read_text()
    if point == "exec.after_commit":
        assert done.state == "FAILED" and "INTERRUPTED" in (done.reason or ""), done
        assert claim.startswith("daemon"), claim  # the zygote never named its claim
        time.sleep(0.3)
        assert not marker.exists()
    else:
        assert (done.state, done.exit_code) == ("FINISHED", 0), done
        assert claim.startswith("monitor"), claim
        assert marker.read_text() == "x\n"
        # Its log and exit file were named; nothing unnamed or temporary was left.
        assert (d.home / "run" / f"{x.id}.monitor.log").exists()
        assert list((d.home / "logs").glob(f"*/{x.id}.exit"))
    assert len(c.exec_list(all=True, sandbox="zb")) == 2
    assert not list((d.home / "logs").glob("*/*.reserve"))
    assert not list((d.home / "run").glob("*.tmp*"))


ROUNDS = 25
MAX_DELAY = 0.006  # seconds after exec.start is sent: before, during and after the hand-off


def test_a_zygote_monitor_killed_during_the_start_leaves_nothing_untracked(
        daemon: DaemonProc, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    c = daemon.client()
    c.sandbox_create("zb", runtime="bwrap", workspace=str(ws))
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    rng = random.Random(12)
    outcomes: dict[str, int] = {}
    for n in range(ROUNDS):
        mark = ws / f"ran-{n}"
        mon = wait_for(lambda: _zygote_monitors(ws), 20, what="a ready zygote")[0]
        got = kill_during_start(c, daemon.home, mon, mark, rng, sandbox="zb")
        if got is None:  # killed before it had the exec
            outcomes["missed"] = outcomes.get("missed", 0) + 1
            continue
        exec_id, rec = got
        time.sleep(0.05)  # room for an untracked command to show itself
        reason = rec.reason or ""
        outcomes[reason[:50]] = outcomes.get(reason[:50], 0) + 1
        assert rec.state == "FAILED", rec
        assert not running_with(str(mark)), f"round {n}: the command runs untracked ({rec})"
        if any(s in reason for s in NEVER_RAN):
            assert not mark.exists(), f"round {n}: {exec_id} ran, yet FAILED {reason!r}"
    print(outcomes)
    # A killed zygote's socket, made ahead under a temporary name, goes when it is reaped;
    # only the live idle monitors' remain.
    run = daemon.home / "run" / "z"
    wait_for(lambda: {p.name for p in run.glob("*.sock")}
             <= {f"{m}.sock" for m in monitor_children(daemon.pid)}, 15,
             what="killed zygotes' sockets removed")


def test_a_warm_start_whose_command_outgrows_the_pipe_runs_whole(
        daemon: DaemonProc, tmp_path: Path) -> None:
    """The function the stub runs is written before the gate opens as far as the pipe
    holds it (64 KiB), the rest after: a big environment still arrives whole."""
    ws = tmp_path / "ws"
    ws.mkdir()
    c = daemon.client()
    c.sandbox_create("zb", runtime="bwrap", workspace=str(ws))
    c.exec_wait(c.exec_start(["true"], sandbox="zb").id, timeout=20)
    zygotes = wait_for(lambda: _ready_zygotes(ws), what="a ready zygote")
    env = {f"BIG{i}": "x" * 50_000 for i in range(3)}  # one string may not pass 128 KiB
    x = c.exec_start(["sh", "-c", 'printf %s "$BIG0$BIG1$BIG2" | wc -c'], sandbox="zb",
                     env=env)
    assert x.pid in zygotes
    done = c.exec_wait(x.id, timeout=20)
    assert done.exit_code == 0, done
    assert b"".join(c.read_logs(x.id)).strip() == b"150000"
