"""`tether attach` hands its terminal to the monitor (SCM_RIGHTS): the monitor writes the
program's output to it and reads the keys itself, so the CLI is out of the data path.

The proof is a stopped client: with the CLI under SIGSTOP, keys still reach the program
and its output still reaches the screen, the detach keys still detach, and the exit
status waits for the CLI to resume. Real daemon, monitors and PTYs (pexpect); no mocks.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests.e2e.test_terminal import (
    TIMEOUT,
    Terminals,
    finished,
    mark,
    state,
    stty_size,
    type_and_see,
    wait_stty_size,
)
from tests.harness import DaemonProc, wait_for
from tether.monitor import attachproto as proto


@pytest.fixture
def terms(daemon: DaemonProc, tmp_path: Path) -> Iterator[Terminals]:
    t = Terminals(daemon, tmp_path)
    yield t
    for child in t.children:  # a test may leave a client stopped
        if child.isalive():
            os.kill(child.pid, signal.SIGCONT)
    t.close()


def _pts(pid: int, fd: int) -> str:
    return os.readlink(f"/proc/{pid}/fd/{fd}")


def _holds(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open. An fd closed between the listing and its
    ``readlink`` is not: the monitor closes its end of the test's own ping connection
    (``Terminals.attached``) when it sees EOF, while we look."""
    fds = Path(f"/proc/{pid}/fd")
    for name in os.listdir(fds):
        try:
            if os.readlink(fds / name) == path:
                return True
        except FileNotFoundError:
            continue
    return False


def _flags(pid: int, fd: int) -> int:
    for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8)
    raise AssertionError("no flags in fdinfo")


def test_keys_and_output_bypass_a_stopped_client(terms: Terminals,
                                                 daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    monitor = daemon.handles(xid)["monitor"]["pid"]
    assert _holds(monitor, _pts(a.pid, 0))  # the monitor has the client's terminal
    os.kill(a.pid, signal.SIGSTOP)
    type_and_see(a, "stopped")  # typed and echoed with the CLI frozen
    # The terminal's file description is shared with the user's shell: never left
    # non-blocking (the monitor uses a file description of its own).
    assert not _flags(a.pid, 0) & os.O_NONBLOCK
    os.kill(a.pid, signal.SIGCONT)
    type_and_see(a, "resumed")


def test_detach_keys_are_seen_by_the_monitor(terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    pts = _pts(a.pid, 0)
    monitor = daemon.handles(xid)["monitor"]["pid"]
    os.kill(a.pid, signal.SIGSTOP)
    a.sendcontrol("\\")
    wait_for(lambda: terms.attached(xid) == 0, what="the monitor to detach the client")
    assert not _holds(monitor, pts)  # it stopped using the terminal at once
    os.kill(a.pid, signal.SIGCONT)
    status, text = finished(a)
    assert status == 0 and b"detached from" in text, text
    assert state(daemon, xid) == "RUNNING"
    b = terms.attach(xid)
    type_and_see(b, "still")


def test_read_only_keys_are_dropped_and_detach_works(terms: Terminals, daemon: DaemonProc,
                                                     tmp_path: Path) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    ro = terms.attach(xid, "--read-only", sync=False)
    type_and_see(a, "seen")
    ro.expect_exact("seen42")
    os.kill(ro.pid, signal.SIGSTOP)
    marker = tmp_path / "typed-in-read-only"
    ro.send(f"touch {marker}\r")
    type_and_see(a, "fence")
    ro.expect_exact("fence42")  # output reaches the stopped read-only client
    ro.sendcontrol("\\")
    wait_for(lambda: terms.attached(xid) == 1, what="the read-only client to detach")
    os.kill(ro.pid, signal.SIGCONT)
    status, text = finished(ro)
    assert status == 0 and b"detached from" in text, text
    assert not marker.exists()
    assert b"touch" not in a.before


def test_resize_reaches_the_program(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid, rows=24, cols=80)
    assert stty_size(a) == (24, 80)
    a.setwinsize(31, 97)
    wait_stty_size(a, (31, 97))


def test_exit_status_waits_for_the_stopped_client(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    os.kill(a.pid, signal.SIGSTOP)
    a.send("echo bye$((40+2)); exit 5\r")
    a.expect_exact("bye42")  # written by the monitor while the client is stopped
    os.kill(a.pid, signal.SIGCONT)
    status, text = finished(a)
    assert f"[{xid} exited with code 5]".encode() in text
    assert status == 5


def test_client_sigkilled_mid_attach_leaves_the_monitor_serving(terms: Terminals,
                                                                daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    b = terms.attach(xid)
    pts = _pts(b.pid, 0)
    monitor = daemon.handles(xid)["monitor"]["pid"]
    assert _holds(monitor, pts)
    os.kill(b.pid, signal.SIGKILL)
    wait_for(lambda: terms.attached(xid) == 1, what="the monitor to drop the killed client")
    assert not _holds(monitor, pts)
    type_and_see(a, "alive")
    c = terms.attach(xid)
    cmd, out = mark("third")
    c.send(cmd)
    c.expect_exact(out)
    a.expect_exact(out)
    b.expect(pexpect.EOF)


def _line(sock: socket.socket) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, buf
        buf += chunk
    reply: dict[str, Any] = json.loads(buf)
    return reply


def test_a_passed_fd_that_is_no_terminal_is_refused_and_closed(terms: Terminals,
                                                               daemon: DaemonProc) -> None:
    """A pipe passed as the terminal, or fds passed with another line: the monitor closes
    them, says ``"terminal": false`` and serves the attach with frames."""
    xid = terms.start()
    handles = daemon.handles(xid)
    monitor = handles["monitor"]["pid"]
    r, w = os.pipe()
    pipe = _pts(os.getpid(), r)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(TIMEOUT)
            s.connect(handles["socket"])
            socket.send_fds(s, [b'{"op": "ping"}\n'], [r, w, r])
            assert _line(s)["ok"]
            hello = {"op": "attach", "terminal": True, "detach_keys": [28], "replay": 0}
            socket.send_fds(s, [json.dumps(hello).encode() + b"\n"], [r])
            reply = _line(s)
            assert reply["ok"] and reply["terminal"] is False, reply
            assert not _holds(monitor, pipe)
            cmd, out = mark("framed")
            s.sendall(proto.frame(proto.DATA, cmd.encode()))
            seen = bytearray()
            while out.encode() not in seen:
                chunk = s.recv(65536)
                assert chunk, seen
                seen += chunk
    finally:
        os.close(r)
        os.close(w)
    wait_for(lambda: terms.attached(xid) == 0, what="the raw client to leave")
    assert state(daemon, xid) == "RUNNING"


# ---------------------------------------------------------------------- a lean start
def test_the_console_entry_attaches_without_click_or_msgspec(terms: Terminals,
                                                              daemon: DaemonProc) -> None:
    xid = terms.start()
    seen = io.BytesIO()
    before = terms.attached(xid)
    a = terms.spawn([sys.executable, "-X", "importtime", "-m", "tether.cli.entry",
                     "--home", str(daemon.home), "attach", xid])
    a.logfile_read = seen
    wait_for(lambda: terms.attached(xid) > before, what="the client to attach")
    type_and_see(a, "lean")
    a.sendcontrol("\\")
    status, text = finished(a)
    assert status == 0 and b"detached from" in text, text
    imported = {m.decode() for m in re.findall(rb"\| +([\w.]+)\r?\n", seen.getvalue())}
    assert "tether.cli.attachfast" in imported  # the lean path ran (and importtime works)
    # The terminal handed over with C modules: none of the attach client's imports.
    for heavy in ("click", "msgspec", "tether.client.blocking", "rich", "yaml",
                  "tether.client.attach", "tether.cli.terminal", "json", "socket", "pathlib",
                  "dataclasses", "signal", "typing", "enum", "re"):
        assert heavy not in imported, heavy


ENTRY = [sys.executable, "-m", "tether.cli.entry"]
CLICK = [sys.executable, "-m", "tether.cli.main"]


@pytest.mark.parametrize("flags", [(), ("--name", "box")])
def test_lean_and_click_attach_end_alike(terms: Terminals, daemon: DaemonProc,
                                         flags: tuple[str, ...]) -> None:
    """The lean attach (the console entry) and the click command print the same last
    words with the same exit code: on a detach, on the program's exit, read-only."""
    xid = terms.start(flags=("-it", *flags))
    ends: dict[str, list[tuple[int | None, bytes]]] = {}
    for name, base in (("lean", ENTRY), ("click", CLICK)):
        got = ends.setdefault(name, [])
        for extra in ((), ("--read-only",), ("--replay", "0")):
            before = terms.attached(xid)
            a = terms.spawn([*base, "--home", str(daemon.home), "attach", *extra, xid])
            wait_for(lambda b=before: terms.attached(xid) > b, what="the client to attach")
            if not extra:
                type_and_see(a, name)
            a.sendcontrol("\\")
            status, text = finished(a)
            got.append((status, text.rstrip().rsplit(b"\r\n", 1)[-1]))
    assert ends["lean"] == ends["click"]
    assert ends["lean"][0][0] == 0 and b"re-attach with `tether attach" in ends["lean"][0][1]
    for name, base in (("lean", ENTRY), ("click", CLICK)):
        x = terms.start(flags=("-it",))
        a = terms.spawn([*base, "--home", str(daemon.home), "attach", x])
        wait_for(lambda x=x: terms.attached(x) > 0, what="the client to attach")
        type_and_see(a, "bye")
        a.send("exit 3\r")
        status, text = finished(a)
        last = text.rstrip().rsplit(b"\r\n", 1)[-1]
        ends[name] = [(status, last.replace(x.encode(), b"<id>"))]
    assert ends["lean"] == ends["click"] == [(3, b"[<id> exited with code 3]")]


def test_the_console_entry_leaves_help_and_errors_to_the_full_cli(daemon: DaemonProc) -> None:
    entry = [sys.executable, "-m", "tether.cli.entry", "--home", str(daemon.home)]
    full = [sys.executable, "-m", "tether.cli.main", "--home", str(daemon.home)]
    for args in (["attach", "--help"], ["attach", "no-such-exec"], ["attach"],
                 ["attach", "--replay", "-1", "x"], ["attach", "--detach-keys", "ctrl-", "x"]):
        got = subprocess.run([*entry, *args], capture_output=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        want = subprocess.run([*full, *args], capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert (got.returncode, got.stdout, got.stderr) == (
            want.returncode, want.stdout, want.stderr), args


def test_a_terminal_that_falls_behind_skips_ahead(terms: Terminals, tmp_path: Path) -> None:
    """Output for a terminal nobody reads is queued by the monitor, never waited for:
    past 4 MiB the client skips ahead (ESC c, then the recent output)."""
    xid = terms.start()
    a = terms.attach(xid)
    done = tmp_path / "printed"
    a.send(f"head -c 20000000 /dev/zero | tr '\\0' x; echo; echo end$((40+2)); "
           f"touch {done}\r")
    wait_for(done.exists, timeout=60, what="the program to print 20 MB to a stalled terminal")
    a.expect_exact("\x1bc", timeout=60)  # the reset that starts a skip-ahead
    a.expect_exact("end42", timeout=60)
    assert terms.attached(xid) == 1
    type_and_see(a, "caught")


def test_lean_attach_to_an_exec_without_a_terminal_copies(terms: Terminals,
                                                         daemon: DaemonProc,
                                                         tmp_path: Path) -> None:
    """An exec with stdin but no PTY: its monitor keeps the terminal, so the lean attach
    hands its connection to the copy loop (``Attachment.adopt``), as click's attach does:
    typed input reaches the program, and its end is said alike."""
    ends = []
    for name, base in (("lean", ENTRY), ("click", CLICK)):
        out = tmp_path / f"{name}.out"
        xid = terms.start("sh", "-c", f'read line; echo "got $line" > {out}', flags=("-i",))
        a = terms.spawn([*base, "--home", str(daemon.home), "attach", xid])
        wait_for(lambda x=xid: terms.attached(x) > 0, what="the client to attach")
        a.send("hello\n")
        status, text = finished(a)
        assert out.read_text() == "got hello\n"
        ends.append((status, text.rstrip().rsplit(b"\r\n", 1)[-1].replace(xid.encode(),
                                                                            b"<id>")))
    assert ends[0] == ends[1] == (0, b"[<id> exited with code 0]"), ends
