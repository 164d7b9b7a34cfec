"""`tether logs` shows stdout and stderr interleaved in the order written, each to its own
stream, as `docker logs` does (issue 23, item 10): a failing `make` printed nothing with
`tether logs build`, its error being on stderr. `--stdout`/`--stderr` pick one; `--offset`
counts bytes of what is printed; `-f` follows across a daemon SIGKILL without a byte lost
or shown twice. Real daemon, real make, the CLI as a subprocess."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.harness import TETHER, DaemonProc, wait_for


def _logs(d: DaemonProc, *args: str, merged: bool = False
          ) -> subprocess.CompletedProcess[bytes]:
    """``tether logs ARGS``; ``merged``: its stderr into its stdout, as a terminal shows
    both (the order of the two is then the order printed)."""
    return subprocess.run([*TETHER, "--home", str(d.home), "logs", *args],
                          stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          env=d.env, timeout=60)


def test_a_failing_make_shows_its_error(daemon: DaemonProc, tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(
        "all:\n\t@echo building x\n\t@sh -c 'echo \"x.c:1: error: expected ;\" >&2; "
        "exit 1'\n")
    r = daemon.cli("run", "-d", "--name", "build", "--cwd", str(tmp_path), "--", "make")
    assert r.returncode == 0, r.stderr
    daemon.cli("wait", "build")
    both = _logs(daemon, "build", merged=True)
    assert both.returncode == 0
    lines = both.stdout.decode().splitlines()
    assert lines[0] == "building x" and lines[1] == "x.c:1: error: expected ;", lines
    assert lines[2].startswith("make: *** [Makefile:") and "Error 1" in lines[2], lines
    apart = _logs(daemon, "build")
    assert apart.stdout == b"building x\n"  # each to its own stream, as docker logs does
    assert apart.stderr.startswith(b"x.c:1: error: expected ;\nmake: *** ")
    assert _logs(daemon, "--stdout", "build").stdout == b"building x\n"
    only_err = _logs(daemon, "--stderr", "build")  # the one asked for: to stdout, to pipe
    assert only_err.stdout == apart.stderr and only_err.stderr == b""


def test_the_order_written_and_offsets_of_what_is_printed(daemon: DaemonProc) -> None:
    script = ("echo o1; sleep 0.5; echo e1 >&2; sleep 0.5; echo o2; sleep 0.5; "
              "echo e2 >&2; exit 3")
    r = daemon.cli("run", "-d", "--name", "alt", "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    daemon.cli("wait", "alt")
    assert _logs(daemon, "alt", merged=True).stdout == b"o1\ne1\no2\ne2\n"
    assert _logs(daemon, "--offset", "3", "alt", merged=True).stdout == b"e1\no2\ne2\n"
    assert _logs(daemon, "--stderr", "--offset", "3", "alt").stdout == b"e2\n"


def test_follow_across_a_daemon_sigkill_is_byte_exact(daemon: DaemonProc) -> None:
    script = ("i=0; while [ $i -lt 12 ]; do i=$((i+1)); echo \"out $i\"; sleep 0.15; "
              "echo \"err $i\" >&2; sleep 0.15; done")
    r = daemon.cli("run", "-d", "--name", "chatty", "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    follow = subprocess.Popen([*TETHER, "--home", str(daemon.home), "logs", "-f", "chatty"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon.env)
    merged = subprocess.Popen([*TETHER, "--home", str(daemon.home), "logs", "-f", "chatty"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=daemon.env)
    time.sleep(1.2)
    daemon.kill9()
    time.sleep(0.5)
    daemon.start()
    out, err = follow.communicate(timeout=60)
    both, _ = merged.communicate(timeout=60)
    assert follow.returncode == 0 and merged.returncode == 0
    assert out == b"".join(b"out %d\n" % i for i in range(1, 13))
    assert err == b"".join(b"err %d\n" % i for i in range(1, 13))
    # The follower saw exactly what a reader sees now: no byte twice, none lost.
    assert both == _logs(daemon, "chatty", merged=True).stdout
    assert sorted(both.splitlines()) == sorted(out.splitlines() + err.splitlines())


def test_a_follower_sees_stderr_while_it_runs(daemon: DaemonProc) -> None:
    r = daemon.cli("run", "-d", "--name", "slow", "--", "sh", "-c",
                   "echo starting; echo 'warning: disk' >&2; sleep 600")
    assert r.returncode == 0, r.stderr
    follow = subprocess.Popen([*TETHER, "--home", str(daemon.home), "logs", "-f", "slow"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=daemon.env)
    try:
        got = b""
        import os

        os.set_blocking(follow.stdout.fileno(), False)  # type: ignore[union-attr]

        def seen() -> bool:
            nonlocal got
            got += follow.stdout.read() or b""  # type: ignore[union-attr]
            return b"warning: disk\n" in got
        wait_for(seen, 20, interval=0.1, what="stderr while it runs")
        assert got == b"starting\nwarning: disk\n"
    finally:
        follow.kill()
        follow.wait()
        daemon.cli("kill", "slow")
