"""The shortest path through the real daemon: start, run, read, wait."""

from __future__ import annotations

from tests.harness import DaemonProc


def test_run_and_read_logs(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c", "printf 'out'; printf 'err' >&2; exit 7"])
    done = c.exec_wait(x.id, timeout=10)
    assert done.state == "FINISHED"
    assert done.exit_code == 7
    out = c.exec_logs(x.id)
    assert out.data == b"out"
    err = c.exec_logs(x.id, stream="stderr")
    assert err.data == b"err"
