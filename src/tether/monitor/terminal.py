"""The monitor's side of the child's stdio: log files, the PTY and its size, typed input.

Without a terminal the child's stdout and stderr *are* the log files: no byte passes
through the monitor. With a terminal (``tty``) the child is a session leader on a PTY
whose master we own; its output is copied to ``pty.log`` and to the attached clients
(through ``on_output``). Typed input (from attached clients) is buffered here until the
program reads it. Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import fcntl
import os
import select
import struct
import termios

from tether.monitor import attachproto as proto
from tether.monitor import queries

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tether.monitor.loop import Poller

MAX_INPUT_BACKLOG = 1024 * 1024  # typed input the program has not read yet


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Terminal:
    def __init__(self, spec: dict[str, Any], poller: Poller) -> None:
        self.paths: dict[str, str] = spec["paths"]
        self.tty = bool(spec.get("tty"))
        self.keep_stdin = bool(spec.get("stdin"))
        self.poller = poller
        self.master = -1  # PTY master (tty mode)
        self.stdin_w = -1  # write end of the child's stdin pipe (stdin without tty)
        self.input = bytearray()  # typed input not yet accepted by the program
        self.pty_log = -1
        self.rows = int(spec.get("rows") or 24)
        self.cols = int(spec.get("cols") or 80)
        self.input_wants_out = False  # EPOLLOUT registered for the input fd
        self.pending_eof = False
        # Wired to the clients by the monitor: the program's output, for every attached
        # client; and "the input has room again" (read paused clients).
        self.on_output: Callable[[bytes], None]
        self.on_input_room: Callable[[], None]

    # -------------------------------------------------------------- start
    def open(self) -> tuple[list[tuple[Any, ...]], bool, list[int]]:
        """Open the logs (and the PTY, or the stdin pipe): the child's spawn file actions,
        whether it must be a session leader, and the fds to close once it is spawned."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out = os.open(self.paths["stdout"], flags, 0o600)
        err = os.open(self.paths["stderr"], flags, 0o600)
        to_close = [out, err]
        if self.tty:
            self.pty_log = os.open(self.paths["pty"], flags, 0o600)
            self.master, slave = os.openpty()
            set_winsize(self.master, self.rows, self.cols)
            slave_name = os.ttyname(slave)
            os.close(slave)
            # A session leader that opens a terminal acquires it as its controlling tty.
            actions: list[tuple[Any, ...]] = [
                (os.POSIX_SPAWN_OPEN, 0, slave_name, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
            return actions, True, to_close
        if self.keep_stdin:
            child_in, self.stdin_w = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(self.stdin_w, False)
        else:
            child_in = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        to_close.append(child_in)
        actions = [(os.POSIX_SPAWN_DUP2, child_in, 0), (os.POSIX_SPAWN_DUP2, out, 1),
                   (os.POSIX_SPAWN_DUP2, err, 2)]
        return actions, False, to_close

    def watch(self) -> None:
        if self.master >= 0:
            os.set_blocking(self.master, False)
            self.poller.register(self.master, "master")

    def ready(self, events: int) -> None:
        """The loop's call when the PTY master is ready."""
        if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            self.pty_readable()
        if events & select.EPOLLOUT and self.master >= 0:
            self.flush_input()

    # -------------------------------------------------------------- output
    def pty_readable(self) -> None:
        """Copy what the program wrote to the PTY log and to every attached client."""
        for _ in range(16):  # bounded, so clients and timers are served under a flood
            try:
                data = os.read(self.master, 65536)
            except BlockingIOError:
                return
            except OSError:  # EIO: every holder of the terminal has closed it
                data = b""
            if not data:
                self.poller.unregister(self.master)
                return
            # Clients first (they are waiting on it), then the log. Nothing can run in
            # between (one thread), so a replay still sees every byte exactly once.
            self.on_output(data)
            view = memoryview(data)
            while view:
                view = view[os.write(self.pty_log, view):]
            if len(data) < 65536:
                return  # drained; the next EPOLLIN says when there is more

    def drain(self) -> None:
        """What the program wrote just before it ended."""
        if self.master >= 0 and self.master in self.poller.fds:
            self.pty_readable()

    def tail(self, nbytes: int) -> list[bytes]:
        """The last ``nbytes`` of ``pty.log`` without the terminal queries in them (the
        client's terminal would answer them into the program's input:
        :mod:`tether.monitor.queries`), in chunks of at most one frame."""
        size = os.fstat(self.pty_log).st_size
        start = max(0, size - nbytes)
        with open(self.paths["pty"], "rb") as f:
            f.seek(start)
            data = queries.strip(f.read(size - start))
        return [data[i:i + proto.MAX_FRAME] for i in range(0, len(data), proto.MAX_FRAME)]

    # -------------------------------------------------------------- input
    def has_input(self) -> bool:
        """Whether anything can be typed: a terminal or an open stdin pipe."""
        return self.tty or self.stdin_w >= 0

    def _input_fd(self) -> int:
        return self.master if self.master >= 0 else self.stdin_w

    def input_full(self) -> bool:
        return len(self.input) >= MAX_INPUT_BACKLOG

    def write_input(self, data: bytes) -> None:
        fd = self._input_fd()
        if fd < 0:
            return
        if not self.input:  # the common case, a keystroke: no backlog, nobody paused
            try:
                n = os.write(fd, data)
            except BlockingIOError:
                n = 0
            except OSError:  # the program closed its input
                return
            if n == len(data):
                return
            data = data[n:]
        self.input += data  # callers stop reading clients while it is full
        self.flush_input()

    def flush_input(self) -> None:
        fd = self._input_fd()
        while self.input and fd >= 0:
            try:
                n = os.write(fd, self.input)
            except BlockingIOError:
                break
            except OSError:  # the program closed its input
                self.input.clear()
                break
            del self.input[:n]
        self._want_writable_input(bool(self.input))
        if not self.input_full():
            self.on_input_room()  # the program caught up: read paused clients again
        if not self.input and self.pending_eof:
            self.pending_eof = False
            self.close_stdin()

    def _want_writable_input(self, want: bool) -> None:
        fd = self._input_fd()
        if fd < 0 or want == self.input_wants_out:
            return
        self.input_wants_out = want
        mask = select.EPOLLOUT if want else 0
        if fd == self.master and fd in self.poller.fds:
            self.poller.modify(fd, select.EPOLLIN | mask)
        elif fd == self.stdin_w:
            if want and fd not in self.poller.fds:
                self.poller.register(fd, "stdin", select.EPOLLOUT)
            elif not want and fd in self.poller.fds:
                self.poller.unregister(fd)

    def close_stdin(self) -> None:
        if self.stdin_w < 0:
            return
        if self.input:
            self.pending_eof = True  # after the buffered input has been delivered
            return
        self.poller.unregister(self.stdin_w)
        os.close(self.stdin_w)
        self.stdin_w = -1

    # -------------------------------------------------------------- size
    def resize(self, rows: int, cols: int) -> bool:
        """Set the window size; whether it changed (the kernel then sends SIGWINCH)."""
        if rows < 1 or cols < 1 or self.master < 0:
            return False
        if (rows, cols) == (self.rows, self.cols):
            return False
        self.rows, self.cols = rows, cols
        try:
            set_winsize(self.master, rows, cols)
        except OSError:
            return False
        return True

    def redraw(self) -> None:
        """Ask a full-screen program to repaint: SIGWINCH to the terminal's foreground."""
        try:
            os.killpg(os.tcgetpgrp(self.master), signal.SIGWINCH)
        except OSError:
            pass
