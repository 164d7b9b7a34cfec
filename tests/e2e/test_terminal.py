"""Interactive sessions on real PTYs: `tether run -it`, `tether attach`, detach keys,
several clients, window size, replay and redraw, exit status, `logs --plain`, events and
the SDK's Attachment. Every terminal here is a real PTY driven with pexpect; the daemon
and the monitors are the real processes. No mocks.

Synchronisation is by markers, never by sleeps: a typed ``echo tag$((40+2))`` prints
``tag42``, which its own echo (``tag$((40+2))``) does not contain.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pyte
import pytest

from tests.harness import TETHER, DaemonProc, RawConn, wait_for
from tether.cli.terminal import BadDetachKeys, DetachMatcher, EscapeStripper, parse_detach_keys
from tether.client.attach import Attachment
from tether.client.errors import TetherError

TIMEOUT = 10
ROWS, COLS = 24, 80
SHELL = ["bash", "--norc", "--noprofile", "-i"]


def mark(tag: str) -> tuple[str, str]:
    """A command to type and the output that proves the program ran it."""
    return f"echo {tag}$((40+2))\r", f"{tag}42"


class Terminals:
    """Spawns tether clients (and wrapper shells) on fresh PTYs; closes them all at the end."""

    def __init__(self, daemon: DaemonProc, tmp_path: Path) -> None:
        self.daemon = daemon
        self.tmp = tmp_path
        self.env = {**daemon.env, "PS1": "$ ", "TERM": "xterm", "HISTFILE": "/dev/null"}
        # `run` passes its environment on, and curses trusts LINES/COLUMNS over the terminal
        # (pytest-xdist exports them): they would pin every program to one size.
        for stale in ("LINES", "COLUMNS"):
            self.env.pop(stale, None)
        self.children: list[pexpect.spawn] = []

    def argv(self, *args: str) -> list[str]:
        return [*TETHER, "--home", str(self.daemon.home), *args]

    def spawn(self, argv: list[str], rows: int = ROWS, cols: int = COLS) -> pexpect.spawn:
        child = pexpect.spawn(argv[0], argv[1:], env=self.env, dimensions=(rows, cols),
                              timeout=TIMEOUT, cwd=str(self.tmp))
        self.children.append(child)
        return child

    def tether(self, *args: str, rows: int = ROWS, cols: int = COLS) -> pexpect.spawn:
        return self.spawn(self.argv(*args), rows, cols)

    def start(self, *argv: str, flags: tuple[str, ...] = ("-it",)) -> str:
        """`tether run -d` a program; returns the exec id."""
        r = subprocess.run(self.argv("run", "-d", *flags, "--", *(argv or SHELL)), input=b"",
                           capture_output=True, timeout=60, env=self.env)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode().strip()

    def attached(self, xid: str) -> int:
        """How many clients the exec's monitor has attached (asked over its own socket)."""
        with RawConn(Path(self.daemon.handles(xid)["socket"])) as conn:
            conn.send_obj({"op": "ping"})
            count: int = conn.recv_obj()["clients"]
            return count

    def attach(self, xid: str, *flags: str, rows: int = ROWS, cols: int = COLS,
               sync: bool = True) -> pexpect.spawn:
        """`tether attach` in a new terminal; with ``sync``, returns once the copy loop runs
        (a typed marker came back), so control keys meet a raw terminal."""
        before = self.attached(xid)
        child = self.tether("attach", *flags, xid, rows=rows, cols=cols)
        wait_for(lambda: self.attached(xid) > before or not child.isalive(),
                 what="the client to attach")
        assert child.isalive(), child.read_nonblocking(65536, 0)
        if sync:
            cmd, out = mark(f"sync{len(self.children)}x")
            child.send(cmd)
            child.expect_exact(out)
        return child

    def close(self) -> None:
        for child in self.children:
            child.close(force=True)


@pytest.fixture
def terms(daemon: DaemonProc, tmp_path: Path) -> Iterator[Terminals]:
    t = Terminals(daemon, tmp_path)
    yield t
    t.close()


def type_and_see(child: pexpect.spawn, tag: str) -> None:
    cmd, out = mark(tag)
    child.send(cmd)
    child.expect_exact(out)


def detach(child: pexpect.spawn, keys: str = "\x1c") -> bytes:
    child.send(keys)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    text: bytes = child.before
    assert b"detached from" in text
    return text


def finished(child: pexpect.spawn) -> tuple[int | None, bytes]:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, child.before


def state(daemon: DaemonProc, xid: str) -> str:
    with daemon.client(reconnect=5) as c:
        s: str = c.exec_get(xid).state
        return s


_sizes = itertools.count()


def stty_size(child: pexpect.spawn) -> tuple[int, int]:
    """The program's idea of its window size (each query tagged: every client sees every
    answer)."""
    n = next(_sizes)
    child.send(f'echo "sz{n}[$(stty size)]"\r')
    child.expect(rf"sz{n}\[(\d+) (\d+)\]".encode())
    m = child.match
    return int(m.group(1)), int(m.group(2))


def wait_stty_size(child: pexpect.spawn, want: tuple[int, int]) -> None:
    """A resize travels as SIGWINCH to the client, then a frame: it may trail a keystroke
    already in flight, so ask again until the program sees the new size."""
    seen = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        seen.append(stty_size(child))
        if seen[-1] == want:
            return
    raise AssertionError(f"stty size never became {want}: {seen}")


def events_of(daemon: DaemonProc, xid: str) -> list[dict[str, Any]]:
    r = daemon.cli("events", "--json")
    assert r.returncode == 0, r.stderr
    evs = [json.loads(line) for line in r.stdout.decode().splitlines()]
    return [e for e in evs if e.get("exec") == xid]


# ---------------------------------------------------------------------- attach and replay
def test_detach_and_reattach_from_a_second_terminal_replays_output(
        terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    type_and_see(a, "first")
    text = detach(a)
    assert f"tether attach {xid}".encode() in text
    assert state(daemon, xid) == "RUNNING"  # the detach did not disturb the shell

    b = terms.attach(xid, sync=False)
    b.expect_exact("first42")  # replayed: nothing was typed in this terminal yet
    type_and_see(b, "second")
    detach(b)
    assert state(daemon, xid) == "RUNNING"


def test_run_it_attaches_at_once_and_tells_how_to_reattach(
        terms: Terminals, daemon: DaemonProc) -> None:
    child = terms.tether("run", "-it", "--", *SHELL)
    type_and_see(child, "direct")
    text = detach(child)
    m = re.search(rb"tether attach ([0-9a-f]+)", text)
    assert m, text
    xid = m.group(1).decode()
    assert state(daemon, xid) == "RUNNING"
    again = terms.attach(xid, sync=False)
    again.expect_exact("direct42")


def test_replay_zero_shows_no_history(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    type_and_see(a, "old")
    detach(a)
    b = terms.attach(xid, "--replay", "0")
    detach(b)
    assert b"old42" not in b.before


# ---------------------------------------------------------------------- several clients
def test_two_clients_see_the_same_bytes(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    b = terms.attach(xid)
    assert terms.attached(xid) == 2
    a.send("echo same$((40+2)); printf '\\033[1mbold\\033[0m\\n'; echo end$((40+2))\r")
    streams = []
    for child in (a, b):
        child.expect_exact("end42")
        seen = child.before + child.after
        streams.append(seen[seen.index(b"echo same"):])
    assert b"\x1b[1mbold\x1b[0m" in streams[0]
    assert streams[0] == streams[1]
    # Input from the second client reaches the same program, and the first sees it.
    type_and_see(b, "fromb")
    a.expect_exact("fromb42")


def test_read_only_client_typing_is_dropped(terms: Terminals, tmp_path: Path) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    ro = terms.attach(xid, "--read-only", sync=False)
    marker = tmp_path / "typed-in-read-only"
    ro.send(f"touch {marker}\r")
    # What the program runs next, the read-only client sees; the marker was never run.
    type_and_see(a, "fence")
    ro.expect_exact("fence42")
    assert not marker.exists()
    assert b"touch" not in a.before
    assert terms.attached(xid) == 2


def test_read_only_input_is_dropped_by_the_monitor(daemon: DaemonProc, terms: Terminals,
                                                   tmp_path: Path) -> None:
    """The SDK can send input frames on a read-only attachment: the monitor drops them."""
    xid = terms.start()
    marker = tmp_path / "typed-in-read-only"
    c = daemon.client()
    with c.attach(xid) as rw:
        ro = c.attach(xid, read_only=True)
        ro.write(f"touch {marker}\r")
        ro.detach()  # same connection, so the monitor has handled the input before this
        wait_for(lambda: terms.attached(xid) == 1, what="the read-only client to leave")
        rw.write(mark("fence")[0])
        out = rw.read_until(b"fence42")
    assert not marker.exists()
    assert b"touch" not in out


def test_read_only_client_detaches_with_the_detach_keys(terms: Terminals,
                                                        daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    ro = terms.attach(xid, "--read-only", sync=False)
    type_and_see(a, "seen")
    ro.expect_exact("seen42")  # its copy loop runs: the detach keys meet a raw terminal
    ro.sendcontrol("c")  # raw: no SIGINT for the client, and nothing for the program
    ro.sendcontrol("\\")
    status, text = finished(ro)
    assert (status, ro.signalstatus) == (0, None), text
    assert b"detached from" in text
    assert terms.attached(xid) == 1
    type_and_see(a, "after")
    assert state(daemon, xid) == "RUNNING"


def test_read_only_clients_do_not_set_the_size(terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid, rows=30, cols=100)
    terms.attach(xid, "--read-only", rows=40, cols=120, sync=False)
    with daemon.client().attach(xid, read_only=True, rows=45, cols=130) as ro:
        ro_id = ro.info["client"]
        ro.resize(50, 150)
    # The detach came after the resize on one connection: its event follows any resize's.
    wait_for(lambda: any(e["type"] == "exec.detach" and e["data"]["client"] == ro_id
                         for e in events_of(daemon, xid)), what="the SDK client's detach")
    sizes = {(e["data"]["rows"], e["data"]["cols"]) for e in events_of(daemon, xid)
             if e["type"] == "exec.resize"}
    assert sizes == {(30, 100)}
    assert stty_size(a) == (30, 100)


# ---------------------------------------------------------------------- window size
def test_stty_size_follows_the_attached_terminal(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid, rows=24, cols=80)
    assert stty_size(a) == (24, 80)
    a.setwinsize(33, 101)
    wait_stty_size(a, (33, 101))
    a.setwinsize(20, 60)
    wait_stty_size(a, (20, 60))


def test_most_recently_active_client_sets_the_size(terms: Terminals,
                                                   daemon: DaemonProc) -> None:
    xid = terms.start()
    small = terms.attach(xid, rows=24, cols=80)
    big = terms.attach(xid, rows=30, cols=100)  # attaching makes it the active one
    assert stty_size(big) == (30, 100)
    assert stty_size(small) == (24, 80)  # typing makes this one active again
    assert stty_size(big) == (30, 100)
    # Resizing counts as activity too; the other client's size then no longer applies.
    small.setwinsize(40, 120)
    wait_stty_size(small, (40, 120))
    assert stty_size(big) == (30, 100)

    def resizes() -> list[tuple[int, int]]:
        return [(e["data"]["rows"], e["data"]["cols"]) for e in events_of(daemon, xid)
                if e["type"] == "exec.resize"]
    wait_for(lambda: resizes()[-1:] == [(30, 100)], what="the last resize journaled")
    assert {(24, 80), (30, 100), (40, 120)} <= set(resizes())


# ---------------------------------------------------------------------- daemon crash
def test_client_stays_attached_through_daemon_sigkill(terms: Terminals,
                                                      daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    type_and_see(a, "before")
    daemon.kill9()
    type_and_see(a, "during")  # same client, same shell, no daemon
    assert a.isalive()
    # Attaching works with no daemon at all: the exec is found from its files.
    with daemon.client(reconnect=0) as c, c.attach(xid) as sdk:
        sdk_id = sdk.info["client"]
        sdk.write(mark("nodaemon")[0])
        sdk.read_until(b"nodaemon42")
    a.expect_exact("nodaemon42")

    daemon.start()
    assert state(daemon, xid) == "RUNNING"

    def attach_ids() -> list[int]:
        return [e["data"]["client"] for e in events_of(daemon, xid)
                if e["type"] == "exec.attach"]
    # What happened while no daemon ran is journaled once one is back.
    wait_for(lambda: sdk_id in attach_ids(), what="the attach made with no daemon journaled")
    journaled = set(attach_ids())
    b = terms.attach(xid, sync=False)
    b.expect_exact("during42")  # replay from the monitor, which never went away
    type_and_see(b, "after")
    a.expect_exact("after42")
    type_and_see(a, "stillhere")
    wait_for(lambda: len(set(attach_ids()) - journaled) == 1, what="the new client journaled")
    ids = attach_ids()
    assert len(ids) == len(set(ids)) == 3  # a, the SDK client, b: each exactly once
    detach(b)
    detach(a)


# ---------------------------------------------------------------------- full-screen programs
CURSES_APP = r"""
import curses

def main(scr):
    n = 0
    def draw():
        scr.clear()
        rows, cols = scr.getmaxyx()
        scr.border()
        scr.addstr(2, 4, "counter=%d" % n)
        scr.addstr(4, 4, "size=%dx%d" % (rows, cols))
        scr.addstr(rows - 2, 4, "press + to count, q to quit")
        scr.refresh()
    draw()
    while True:
        ch = scr.getch()
        if ch == ord("q"):
            return
        if ch == ord("+"):
            n += 1
        draw()  # KEY_RESIZE (SIGWINCH) included: repaint everything

curses.wrapper(main)
"""


def screen_until(child: pexpect.spawn, rows: int, cols: int,
                 ok: Callable[[list[str]], bool]) -> list[str]:
    """Feed what the client's terminal receives to a terminal emulator until the screen
    satisfies ``ok``; returns the screen's lines."""
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    seen = bytearray()
    deadline = time.monotonic() + TIMEOUT
    while True:
        if ok(screen.display):
            return list(screen.display)
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("screen never matched:\n" + "\n".join(screen.display)
                                 + f"\nlast bytes: {bytes(seen[-400:])!r}")
        with contextlib.suppress(pexpect.TIMEOUT):
            data = child.read_nonblocking(65536, timeout=min(left, 0.5))
            seen += data
            stream.feed(data)


def shows(counter: int, rows: int, cols: int) -> Callable[[list[str]], bool]:
    def ok(lines: list[str]) -> bool:
        return (lines[2][4:].startswith(f"counter={counter} ")
                and lines[4][4:].startswith(f"size={rows}x{cols} ")
                and lines[rows - 2][4:].startswith("press + to count")
                and lines[0][0] != " " and lines[rows - 1][cols - 1] != " ")  # the border
    return ok


def test_full_screen_program_shows_its_current_screen_after_reattach(
        terms: Terminals, tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(CURSES_APP)
    xid = terms.start(sys.executable, str(app))
    a = terms.attach(xid, sync=False)
    screen_until(a, ROWS, COLS, shows(0, ROWS, COLS))
    for _ in range(3):
        a.send("+")
    screen_until(a, ROWS, COLS, shows(3, ROWS, COLS))
    detach(a)

    # Same size, no replay at all: only the SIGWINCH redraw can paint the screen.
    b = terms.attach(xid, "--replay", "0", sync=False)
    lines = screen_until(b, ROWS, COLS, shows(3, ROWS, COLS))
    assert not any("counter=0" in line for line in lines)
    b.send("+")
    screen_until(b, ROWS, COLS, shows(4, ROWS, COLS))
    detach(b)

    # A different size: the replay plus the redraw give the current screen at that size.
    c = terms.attach(xid, rows=30, cols=100, sync=False)
    screen_until(c, 30, 100, shows(4, 30, 100))
    c.send("q")
    status, _ = finished(c)
    assert status == 0


# ---------------------------------------------------------------------- terminal restored
def _wrapped_attach(terms: Terminals, xid: str,
                    act: Callable[[pexpect.spawn], None]) -> tuple[int, str, str]:
    """Run `tether attach` from a shell on a pexpect PTY with `stty -a` before and after;
    ``act`` drives the attached session. Returns (client exit status, before, after)."""
    wrapper = terms.spawn(["bash", "--norc", "--noprofile"])
    cmd = shlex.join(terms.argv("attach", xid))
    count = terms.attached(xid)
    wrapper.sendline(f"tty > tty.txt; stty -a > before.txt; {cmd}; echo rc=$?; "
                     "stty -a > after.txt; echo done$((40+2))")
    wait_for(lambda: terms.attached(xid) > count, what="the client to attach")
    type_and_see(wrapper, "inside")  # the copy loop runs: the terminal is raw now
    during = subprocess.run(["stty", "-a", "-F", (terms.tmp / "tty.txt").read_text().strip()],
                            capture_output=True, text=True, check=True).stdout.split()
    assert "-icanon" in during and "-echo" in during and "-isig" in during  # raw, truly
    act(wrapper)
    wrapper.expect(rb"rc=(\d+)")
    rc = int(wrapper.match.group(1))
    wrapper.expect_exact("done42")
    wrapper.sendline("exit")
    wrapper.expect(pexpect.EOF)
    before = (terms.tmp / "before.txt").read_text()
    assert "-icanon" not in before.split()
    return rc, before, (terms.tmp / "after.txt").read_text()


def test_terminal_restored_after_detach(terms: Terminals) -> None:
    xid = terms.start()
    rc, before, after = _wrapped_attach(terms, xid, lambda w: w.sendcontrol("\\"))
    assert rc == 0
    assert before == after


def test_terminal_restored_after_the_program_exits(terms: Terminals) -> None:
    xid = terms.start()

    def leave(w: pexpect.spawn) -> None:
        w.send("exit 3\r")
        w.expect_exact(f"[{xid} exited with code 3]")

    rc, before, after = _wrapped_attach(terms, xid, leave)
    assert rc == 3
    assert before == after


def test_terminal_restored_after_the_monitor_is_killed(terms: Terminals,
                                                       daemon: DaemonProc) -> None:
    xid = terms.start()
    monitor = daemon.handles(xid)["monitor"]["pid"]

    def kill_monitor(w: pexpect.spawn) -> None:
        os.kill(monitor, signal.SIGKILL)
        w.expect_exact("lost the connection")

    rc, before, after = _wrapped_attach(terms, xid, kill_monitor)
    assert rc == 1
    assert before == after


EDITOR_APP = r"""
import curses

def main(scr):
    curses.curs_set(0)
    scr.addstr(0, 0, "editing=1")
    scr.refresh()
    while scr.getch() != ord("q"):
        pass

curses.wrapper(main)
"""


def test_detach_from_a_full_screen_program_gives_the_terminal_back(
        terms: Terminals, tmp_path: Path) -> None:
    """Issue 23, item 8: from a shell, `tether run -it --name ed` a curses program (the
    alternate screen, the cursor hidden, the keypad in application mode), then Ctrl-\\:
    the terminal leaves the program's screen, shows its cursor and drops its modes before
    "detached from ed (…)" is printed, on the shell's own screen (as tmux does). Again
    after a re-attach, which puts the program's screen back."""
    app = tmp_path / "app.py"
    app.write_text(EDITOR_APP)
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    shell = terms.spawn(["bash", "--norc", "--noprofile"])
    seen = bytearray()

    def until(marker: bytes, ok: Callable[[], bool] = lambda: True) -> None:
        deadline = time.monotonic() + TIMEOUT
        while marker not in seen or not ok():
            assert time.monotonic() < deadline, f"{marker!r} not seen: {bytes(seen[-300:])!r}"
            with contextlib.suppress(pexpect.TIMEOUT):
                data = shell.read_nonblocking(65536, timeout=0.2)
                seen.extend(data)
                stream.feed(data)

    alt, hidden = 1049 << 5, lambda: screen.cursor.hidden  # pyte keeps private modes << 5
    for attach in (terms.argv("run", "-it", "--name", "ed", "--", sys.executable, str(app)),
                   terms.argv("attach", "ed")):
        del seen[:]
        shell.sendline(shlex.join(attach) + "; echo rc=$?")
        until(b"editing=1", lambda: alt in screen.mode and hidden())
        shell.sendcontrol("\\")
        until(b"rc=0")
        text = bytes(seen)
        gone = text.rindex(b"editing=1")
        assert text.index(b"\x1b[?1049l", gone) < text.index(b"detached from ed (", gone)
        assert alt not in screen.mode and not hidden(), text[gone:]
        assert 1 << 5 not in screen.mode  # application cursor keys off (keypad)
        assert re.search(rb"detached from ed \([0-9a-f]{12}\); re-attach with "
                         rb"`tether attach ed`", text), text[gone:]
    shell.sendline("exit")


def test_run_it_without_a_terminal_is_refused_as_docker_does(terms: Terminals,
                                                              daemon: DaemonProc) -> None:
    """Issue 23, item 2: `echo | tether run -it -- bash` hung forever (the pipe's EOF cannot
    reach a terminal). Like `docker run -it`: "the input device is not a TTY", exit 1, and
    nothing started; -t alone (watch the output) and -d are fine, as with docker; an
    interactive `tether attach` from a pipe is refused too."""
    base = terms.argv()
    r = subprocess.run([*base, "run", "-it", "--", "bash"], input=b"echo hi\n",
                       capture_output=True, timeout=30, env=terms.env)
    assert (r.returncode, r.stdout) == (1, b""), r
    assert b"the input device is not a TTY" in r.stderr
    assert daemon.client().exec_list(all=True) == []  # nothing was started
    r = subprocess.run([*base, "run", "-t", "--", "sh", "-c", "echo watched"], input=b"",
                       capture_output=True, timeout=30, env=terms.env)
    assert r.returncode == 0 and b"watched" in r.stdout, r
    xid = terms.start()  # run -d -it from a pipe: started, for a later attach
    r = subprocess.run([*base, "attach", xid], input=b"exit\n", capture_output=True,
                       timeout=30, env=terms.env)
    assert r.returncode == 1 and b"the input device is not a TTY" in r.stderr, r
    assert state(daemon, xid) == "RUNNING"


# ---------------------------------------------------------------------- signals and exit
def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(command name, ppid, process group, terminal's foreground group) of a process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return text[text.index("(") + 1:text.rindex(")")], int(fields[1]), int(fields[2]), int(
        fields[5])


def in_foreground(shell: int, name: str) -> bool:
    """A child of ``shell`` has exec'd ``name`` and leads the terminal's foreground group
    (so a Ctrl-C now can only reach it)."""
    for entry in os.listdir("/proc"):
        st = _stat(int(entry)) if entry.isdigit() else None
        if st and st[0] == name and st[1] == shell and st[2] == st[3] == int(entry):
            return True
    return False


def test_ctrl_c_and_ctrl_z_reach_the_program(terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    shell = daemon.handles(xid)["child"]["pid"]
    a = terms.attach(xid)
    a.send("sleep 100\r")
    wait_for(lambda: in_foreground(shell, "sleep"), what="sleep in the foreground")
    a.sendcontrol("c")
    a.send("echo rc$?x\r")
    a.expect_exact("rc130x")  # sleep died of SIGINT; the client did not
    assert a.isalive()
    a.send("sleep 100\r")
    wait_for(lambda: in_foreground(shell, "sleep"), what="sleep in the foreground")
    a.sendcontrol("z")
    a.expect("Stopped")
    a.send("kill -9 %1; wait; echo rc$?x\r")
    a.expect(rb"rc\d+x")
    type_and_see(a, "alive")
    assert a.isalive()
    assert state(daemon, xid) == "RUNNING"
    detach(a)


def test_every_attached_client_gets_the_exit_status(terms: Terminals,
                                                    daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    b = terms.attach(xid)
    ro = terms.attach(xid, "--read-only", sync=False)
    a.send("exit 5\r")
    for child in (a, b, ro):
        status, text = finished(child)
        assert f"[{xid} exited with code 5]".encode() in text
        assert status == 5
    assert state(daemon, xid) == "FINISHED"


def test_run_it_exits_with_the_programs_code(terms: Terminals) -> None:
    child = terms.tether("run", "-it", "--", "sh", "-c", "read x; echo got-$x; exit 7")
    child.send("it\r")
    child.expect_exact("got-it")
    status, text = finished(child)
    assert re.search(rb"\[[0-9a-f]+ exited with code 7\]", text), text
    assert status == 7


def test_run_it_of_a_program_that_ends_at_once_exits_with_its_code(terms: Terminals) -> None:
    # A race the program mostly wins: try until it shows (once, mostly), at most 10 times.
    for _ in range(10):
        child = terms.tether("run", "-it", "--", "sh", "-c", "exit 7")
        status, text = finished(child)
        assert b"Traceback" not in text
        assert b"exited with code 7" in text
        assert status == 7, text


def test_killed_program_reports_the_signal(terms: Terminals) -> None:
    xid = terms.start()
    a = terms.attach(xid)
    a.send("kill -TERM $$\r")  # an interactive bash ignores SIGTERM
    type_and_see(a, "ignored")
    a.send("kill -KILL $$\r")
    status, text = finished(a)
    assert f"[{xid} killed by signal 9]".encode() in text
    assert status == 128 + 9


# ---------------------------------------------------------------------- detach keys
def test_custom_detach_keys_and_a_lone_first_key_passes_through(terms: Terminals,
                                                                daemon: DaemonProc) -> None:
    xid = terms.start()
    a = terms.attach(xid, "--detach-keys", "ctrl-p,ctrl-q")
    # `read` takes the next line raw from the terminal: ctrl-p then z must both arrive.
    a.send("echo rd$((40+2)); IFS= read -r L; printf '%s' \"$L\" | od -An -tx1\r")
    a.expect_exact("rd42")  # bash has left line editing: the terminal is in line mode again
    a.sendcontrol("p")
    a.send("z\r")
    a.expect(rb"10 7a")
    # ctrl-p then ctrl-q, typed as two keystrokes, detaches.
    a.sendcontrol("p")
    a.sendcontrol("q")
    a.expect(pexpect.EOF)
    a.close()
    assert a.exitstatus == 0
    assert b"detached from" in a.before
    assert state(daemon, xid) == "RUNNING"


def test_detach_keys_from_the_environment(terms: Terminals) -> None:
    xid = terms.start()
    terms.env["TETHER_DETACH_KEYS"] = "ctrl-a,d"
    a = terms.attach(xid)
    detach(a, "\x01d")


def test_bad_detach_keys_are_a_usage_error(terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    r = daemon.cli("attach", "--detach-keys", "ctrl-1", xid)
    assert r.returncode == 2
    assert b"detach-keys" in r.stderr


# ---------------------------------------------------------------------- logs and events
def test_logs_raw_and_plain(terms: Terminals, daemon: DaemonProc) -> None:
    script = r"printf '\033[1;31mred\033[0m-text\n\033]0;title\007end\n'"
    xid = terms.start("sh", "-c", script)
    assert daemon.cli("wait", xid).returncode == 0
    raw = daemon.cli("logs", xid)
    assert raw.returncode == 0
    # Byte for byte what the program wrote, after the terminal's own \n -> \r\n.
    assert raw.stdout == b"\x1b[1;31mred\x1b[0m-text\r\n\x1b]0;title\x07end\r\n"
    plain = daemon.cli("logs", "--plain", xid)
    assert plain.returncode == 0
    assert plain.stdout == b"red-text\nend\n"


def test_logs_plain_with_charset_and_keypad_escapes(terms: Terminals,
                                                    daemon: DaemonProc) -> None:
    # What `tput sgr0` and curses' endwin write on xterm.
    script = r"printf 'a\033(Bb\0337c\0338d\033=e\033>\nlast line\n'"
    xid = terms.start("sh", "-c", script)
    assert daemon.cli("wait", xid).returncode == 0
    plain = daemon.cli("logs", "--plain", xid)
    assert plain.stdout == b"abcde\nlast line\n"


def read_to_prompt(att: Attachment, marker: bytes) -> bytes:
    """Read past ``marker`` up to the next prompt: the shell is then idle."""
    out = att.read_until(marker)
    deadline = time.monotonic() + TIMEOUT
    while not out.endswith(b"$ "):
        assert time.monotonic() < deadline, out
        out += att.read(timeout=1)
    return out


def test_attach_detach_resize_events(terms: Terminals, daemon: DaemonProc) -> None:
    xid = terms.start()
    c = daemon.client()
    att = c.attach(xid, rows=20, cols=70)
    client_id = att.info["client"]
    att.resize(31, 99)
    att.write('echo "sz[$(stty size)]"\r')
    read_to_prompt(att, b"sz[31 99]")
    att.detach()

    def mine() -> list[dict[str, Any]]:
        return [e for e in events_of(daemon, xid)
                if e["type"] in ("exec.attach", "exec.resize", "exec.detach")
                and e["data"].get("client") == client_id]
    wait_for(lambda: any(e["type"] == "exec.detach" for e in mine()), what="detach event")
    evs = mine()
    assert [e["type"] for e in evs] == ["exec.attach", "exec.resize", "exec.resize",
                                        "exec.detach"]
    attach_ev, first, second, detach_ev = evs
    assert {k: attach_ev["data"][k] for k in ("client", "read_only", "rows", "cols")} == {
        "client": client_id, "read_only": False, "rows": 20, "cols": 70}
    assert (first["data"]["rows"], first["data"]["cols"]) == (20, 70)
    assert (second["data"]["rows"], second["data"]["cols"]) == (31, 99)
    assert detach_ev["reason"] == "detached"
    assert all(e["sandbox"] == "default" and e["reason"] for e in evs)
    # The CLI's detach is journaled too.
    a = terms.attach(xid)
    detach(a)
    wait_for(lambda: sum(e["type"] == "exec.detach" for e in events_of(daemon, xid)) == 2,
             what="the CLI's detach")


def test_attach_right_after_start_is_journaled(daemon: DaemonProc) -> None:
    """`tether run -it` attaches as soon as exec.start returns, possibly before the daemon
    watches the terminal; and a stopped daemon widens that window: the attach is journaled
    all the same (the monitor numbers its terminal events and the daemon resumes them)."""
    c = daemon.client()
    for _ in range(3):
        x = c.exec_start(["sleep", "60"], tty=True)
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            with Attachment(x.socket) as early:
                early_id = early.info["client"]
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        wait_for(lambda i=x.id, n=early_id: any(
            e["type"] == "exec.detach" and e["data"]["client"] == n
            for e in events_of(daemon, i)), what="the early client's detach journaled")
        kinds = [e["type"] for e in events_of(daemon, x.id)
                 if e["type"].startswith("exec.") and e["data"].get("client") == early_id]
        assert kinds == ["exec.attach", "exec.detach"]


def test_detach_with_output_queued_is_journaled_as_a_detach(daemon: DaemonProc) -> None:
    c = daemon.client()
    script = "read x; head -c 1000000 /dev/zero | tr '\\0' x; exec sleep 60"
    x = c.exec_start(["sh", "-c", script], tty=True)
    att = c.attach(x.id, replay=0)
    att.write("go\r")  # then read nothing: the monitor queues the output for us
    # All of it is out ("go\r\n" echoed, then the x's) and the monitor is idle again.
    wait_for(lambda: os.path.getsize(x.pty_path) == 1_000_004, what="the output")
    with RawConn(Path(x.socket)) as conn:
        conn.send_obj({"op": "ping"})
        conn.recv_obj()
    monitor = daemon.handles(x.id)["monitor"]["pid"]
    os.kill(monitor, signal.SIGSTOP)  # a busy monitor: it sees the detach and the close at once
    try:
        att.detach()
    finally:
        os.kill(monitor, signal.SIGCONT)

    def detaches() -> list[dict[str, Any]]:
        return [e for e in events_of(daemon, x.id) if e["type"] == "exec.detach"]
    wait_for(detaches, what="the detach event")
    assert detaches()[0]["reason"] == "detached"


def test_detach_while_the_program_writes_is_journaled_as_a_detach(daemon: DaemonProc,
                                                                   tmp_path: Path) -> None:
    c = daemon.client()
    reasons = []
    # The PTY hands output to the monitor's side a moment later, from a kernel worker: try
    # until the output is seen first (mostly at once), at most 10 times.
    for i in range(10):
        ticked = tmp_path / f"ticked{i}"
        script = (f"trap 'echo tick; touch {ticked}' USR1; echo ready; "
                  "while :; do sleep 1 & wait; done")
        x = c.exec_start(["sh", "-c", script], tty=True)
        att = c.attach(x.id)
        att.read_until(b"ready")
        handles = daemon.handles(x.id)
        monitor = handles["monitor"]["pid"]
        os.kill(monitor, signal.SIGSTOP)
        try:
            os.kill(handles["child"]["pid"], signal.SIGUSR1)  # output first ...
            wait_for(ticked.exists, what="the program to write")
            att.detach()  # ... then the detach, both while the monitor is busy elsewhere
        finally:
            os.kill(monitor, signal.SIGCONT)

        def detaches(xid: str = x.id) -> list[dict[str, Any]]:
            return [e for e in events_of(daemon, xid) if e["type"] == "exec.detach"]
        wait_for(detaches, what="the detach event")
        reasons.append(detaches()[0]["reason"])
        if reasons[-1] != "detached":
            break
    assert set(reasons) == {"detached"}


# ---------------------------------------------------------------------- SDK
def test_sdk_attachment_write_read_resize_detach(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(SHELL, tty=True, env={"PS1": "$ ", "HISTFILE": "/dev/null",
                                           "TERM": "xterm", "PATH": os.environ["PATH"]})
    with c.attach(x.id, rows=24, cols=80) as att:
        assert att.info["tty"] is True
        att.write(b"echo sdk$((40+2))\r")
        assert b"sdk42" in att.read_until(b"sdk42")
        att.resize(40, 120)
        att.write('echo "sz[$(stty size)]"\r')
        att.read_until(b"sz[40 120]")
        assert att.read(timeout=0.01) is not None  # nothing pending is not an error
    assert att.closed
    assert c.exec_get(x.id).state == "RUNNING"

    att = c.attach(x.id)
    att.write("exit 4\r")
    with pytest.raises(TimeoutError):
        att.read_until(b"never printed", timeout=TIMEOUT)
    assert att.exit is not None and att.exit["exit_code"] == 4
    assert att.read() == b""
    with pytest.raises(TetherError):
        att.write("too late")
    att.detach()
    assert c.exec_wait(x.id, timeout=10).exit_code == 4


def test_sdk_attach_without_terminal_or_stdin_is_a_clear_error(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "30"])
    with pytest.raises(TetherError) as e:
        c.attach(x.id)
    assert e.value.code == "NO_TERMINAL"
    assert "tether logs -f" in e.value.message
    r = daemon.cli("attach", x.id)
    assert r.returncode == 1
    assert b"no terminal" in r.stderr


def test_sdk_attach_to_an_ended_exec(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c", "exit 0"], tty=True)
    c.exec_wait(x.id, timeout=10)
    with pytest.raises(TetherError) as e:
        c.attach(x.id)
    assert e.value.code == "NOT_RUNNING"


def test_sdk_stdin_without_terminal(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["cat"], stdin=True)
    with c.attach(x.id) as att:
        assert att.info["tty"] is False
        att.write(b"piped ")
        att.write(b"bytes\n")
        att.close_stdin()
        done = c.exec_wait(x.id, timeout=10)
    assert done.exit_code == 0
    assert b"".join(c.read_logs(x.id)) == b"piped bytes\n"


def test_run_i_forwards_piped_stdin(daemon: DaemonProc) -> None:
    data = b"hello\nworld\n" * 1000
    r = daemon.cli("run", "-i", "--", "cat", input=data)
    assert r.returncode == 0, r.stderr
    assert r.stdout == data


# ---------------------------------------------------------------------- units
@pytest.mark.parametrize(("spec", "keys"), [
    ("ctrl-\\", b"\x1c"),
    ("ctrl-p,ctrl-q", b"\x10\x11"),
    ("ctrl-P, ctrl-Q", b"\x10\x11"),
    ("ctrl-a,d", b"\x01d"),
    ("ctrl-@", b"\x00"),
    ("ctrl-[", b"\x1b"),
    ("ctrl-]", b"\x1d"),
    ("ctrl-^", b"\x1e"),
    ("ctrl-_", b"\x1f"),
    ("ctrl-z", b"\x1a"),
    ("x", b"x"),
])
def test_parse_detach_keys(spec: str, keys: bytes) -> None:
    assert parse_detach_keys(spec) == keys


@pytest.mark.parametrize("spec", ["", "ctrl-", "ctrl-1", "ctrl-pq", "alt-p", "ab",
                                  "ctrl-p,,ctrl-q", "ctrl-p,"])
def test_parse_detach_keys_rejects(spec: str) -> None:
    with pytest.raises(BadDetachKeys):
        parse_detach_keys(spec)


def test_detach_matcher_passes_ordinary_input() -> None:
    m = DetachMatcher(b"\x10\x11")
    assert m.feed(b"hello\r") == (b"hello\r", False)
    assert m.feed(b"") == (b"", False)


def test_detach_matcher_finds_the_sequence() -> None:
    assert DetachMatcher(b"\x1c").feed(b"ab\x1c") == (b"ab", True)
    assert DetachMatcher(b"\x10\x11").feed(b"ab\x10\x11") == (b"ab", True)


def test_detach_matcher_sequence_split_across_reads() -> None:
    m = DetachMatcher(b"\x10\x11")
    assert m.feed(b"ls\x10") == (b"ls", False)  # held back: it may be a detach
    assert m.feed(b"\x11") == (b"", True)
    m = DetachMatcher(b"abc")
    assert m.feed(b"a") == (b"", False)
    assert m.feed(b"b") == (b"", False)
    assert m.feed(b"c") == (b"", True)


def test_detach_matcher_releases_a_partial_match() -> None:
    m = DetachMatcher(b"\x10\x11")
    assert m.feed(b"\x10") == (b"", False)
    assert m.feed(b"z") == (b"\x10z", False)  # ctrl-p then z: both reach the program
    assert m.feed(b"\x10x\x10\x11") == (b"\x10x", True)
    m = DetachMatcher(b"\x10\x11")
    assert m.feed(b"\x10\x10\x11") == (b"\x10", True)  # the second ctrl-p starts the match


def test_detach_matcher_is_reusable_after_a_detach() -> None:
    m = DetachMatcher(b"\x10\x11")
    assert m.feed(b"\x10\x11") == (b"", True)
    assert m.feed(b"\x10q") == (b"\x10q", False)


def test_detach_matcher_overlapping_prefix() -> None:
    assert DetachMatcher(b"aab").feed(b"aaab") == (b"a", True)
    assert DetachMatcher(b"\x10\x10\x11").feed(b"\x10\x10\x10\x11") == (b"\x10", True)
    assert DetachMatcher(b"abac").feed(b"ababac") == (b"ab", True)
    m = DetachMatcher(b"aab")  # the same, one byte per read
    assert [m.feed(bytes([b])) for b in b"aaab"] == [(b"", False), (b"", False),
                                                       (b"a", False), (b"", True)]


def _strip(chunks: list[bytes]) -> bytes:
    s = EscapeStripper()
    return b"".join(s.feed(c) for c in chunks) + s.flush()


def test_escape_stripper_removes_csi_osc_and_two_byte_escapes() -> None:
    raw = (b"\x1b[?2004h$ \x1b[1;31mred\x1b[0m \x1b[2J\x1b[H\x1b[10;5Hat\r\n"
           b"\x1b]0;title\x07\x1b]2;other\x1b\\\x1bMup\x1b[38;5;196mx\x1b[m\r\n")
    assert _strip([raw]) == b"$ red at\nupx\n"


def test_escape_stripper_strips_strings_and_short_forms() -> None:
    raw = (b"a\x1b(Bb\x1b7c\x1b8d\x1b=e\x1b>f\x1bcg\x1bPq#0;2\x1b\\h"
           b"\x1b_apc\x1b\\i\x1b^pm\x1b\\j")
    assert _strip([raw]) == b"abcdefghij"
    for cut in range(len(raw) + 1):
        assert _strip([raw[:cut], raw[cut:]]) == b"abcdefghij", cut


def test_escape_stripper_puts_each_rewrite_of_a_line_on_its_own_and_keeps_text() -> None:
    """`logs --plain` is text (issue 23): a progress bar's lone CR was left in it."""
    assert _strip([b"50%\r100%\r\n"]) == b"50%\n100%\n"
    assert _strip([b"plain text, no escapes\n"]) == b"plain text, no escapes\n"
    assert _strip([b"a stray \x1b\nand more\n"]) == b"a stray \x1b\nand more\n"
    assert _strip([b"progress 99%\r"]) == b"progress 99%\n"  # flushed at the end


def test_escape_stripper_csi_split_across_chunks() -> None:
    raw = b"a\x1b[1;31mred\x1b[0m b\x1b[?25lc\x1b[10;20Hd\x1bMe"
    want = b"ared bcde"
    assert _strip([raw]) == want
    assert _strip([bytes([b]) for b in raw]) == want
    for cut in range(len(raw) + 1):
        assert _strip([raw[:cut], raw[cut:]]) == want, cut


@pytest.mark.parametrize(("raw", "want"), [
    (b"x\x1b]0;title\x07y", b"xy"),
    (b"x\x1b]0;t\x1b\\y", b"xy"),
    (b"a\r\nb", b"a\nb"),
])
def test_escape_stripper_osc_and_crlf_split_across_chunks(raw: bytes, want: bytes) -> None:
    assert _strip([raw]) == want
    for cut in range(len(raw) + 1):
        assert _strip([raw[:cut], raw[cut:]]) == want, cut
