"""Attach history with no daemon (issue 22, finding 6): ``tether attach`` talks to the
exec's monitor directly and starts no daemon, so its attach and detach lived only in the
monitor's memory and were lost when the exec ended before a daemon watched it. The
monitor now appends them to ``run/<exec>.events.jsonl``, and the next daemon journals
them, once, before the exec's end. Real PTYs (pexpect), a real SIGKILL of the daemon."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from tests.e2e.test_terminal import Terminals
from tests.harness import TETHER, DaemonProc, raw_call, wait_for


def test_attach_and_detach_without_a_daemon_are_journaled_by_the_next(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    d = stopped_daemon
    d.start()
    terms = Terminals(d, tmp_path)
    try:
        r = subprocess.run([*TETHER, "--home", str(d.home), "run", "-it", "-d", "--name",
                            "sh1", "--", "bash", "-c", "sleep 6; exit 5"], input=b"",
                           capture_output=True, timeout=60, env=terms.env)
        assert r.returncode == 0, r.stderr
        xid = r.stdout.decode().strip()
        d.kill9()  # the exec runs on, with no daemon
        # `tether attach` (the console script): the lean path, to the monitor, no daemon
        child = terms.spawn([sys.executable, "-m", "tether.cli.entry", "--home",
                             str(d.home), "attach", "sh1"])
        wait_for(lambda: terms.attached(xid) == 1 or not child.isalive(),
                 what="the client to attach")
        assert child.isalive(), child.read_nonblocking(65536, 0)
        child.send("\x1c")  # Ctrl-\: detach
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        exit_file = d.home / "logs" / "default" / f"{xid}.exit"
        wait_for(exit_file.exists, 15, what="the exec to end while no daemon runs")
        with pytest.raises(OSError):  # attach started no daemon
            raw_call(d.socket, "daemon.health")
        d.start()
        c = d.client()
        assert c.exec_wait(xid, timeout=15).exit_code == 5
        evs = [e for e in c.events_list(limit=10000).events if e.exec == xid]
        kinds = [(e.type, e.state) for e in evs]
        assert kinds == [("exec.state", "PENDING"), ("exec.state", "RUNNING"),
                         ("exec.attach", None), ("exec.detach", None),
                         ("exec.state", "FINISHED")], kinds
        attach, detach = evs[2], evs[3]
        assert attach.data["n"] == 0 and detach.data == {"client": attach.data["client"],
                                                         "n": 1}
        assert detach.reason == "detached"
        # Journaled once: another daemon start adds nothing.
        code = d.term()
        assert code == 0, d.log_text()[-3000:]
        d.start()
        again = [e for e in d.client().events_list(limit=10000).events if e.exec == xid]
        assert [e.gseq for e in again] == [e.gseq for e in evs]
    finally:
        terms.close()


def test_with_a_daemon_watching_each_event_is_journaled_once(
        daemon: DaemonProc, tmp_path: Path) -> None:
    """With a daemon watching, the watch and the end's catch-up from the file both see
    the events of an exec whose client is dropped as it ends: each is journaled once
    (and a detach the watch had not passed on when the exit was seen is not lost)."""
    terms = Terminals(daemon, tmp_path)
    try:
        for _ in range(3):
            xid = terms.start("bash", "-c", "read x; exit 3")
            child = terms.attach(xid, sync=False)
            child.send("go\r")  # the command ends at once: its client is dropped
            child.expect(pexpect.EOF)
            child.close()
            c = daemon.client()
            assert c.exec_wait(xid, timeout=15).exit_code == 3
            time.sleep(0.3)
            types = [e.type for e in c.events_list(limit=10000).events if e.exec == xid]
            assert types.count("exec.attach") == 1, types
            assert types[-1] == "exec.state"
    finally:
        terms.close()
