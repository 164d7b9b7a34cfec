"""The attached terminal: raw mode, detach keys, window size, and the two ways to be
attached; and escape sequences stripped from a terminal log (``tether logs --plain``).

When this terminal is handed to the monitor (``Attachment.direct``) the monitor writes
the output to it and reads the keys: ``wait_loop`` only forwards window sizes and waits
for the detach or the exit. Otherwise (the monitor refused, or stdin/stdout are not one
terminal) ``copy_loop`` relays the bytes both ways.

The local terminal is put in raw mode only while attached and restored on every
way out: detach, program exit, a lost monitor, an exception, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from typing import Any

from tether.client.attach import Attachment
from tether.client.errors import TetherError
from tether.monitor.screen import ScreenModes
from tether.monitor.userterm import DetachMatcher as DetachMatcher  # the monitor's, too

DEFAULT_DETACH_KEYS = "ctrl-\\"
_CTRL_PUNCT = {"@": 0, "[": 27, "\\": 28, "]": 29, "^": 30, "_": 31}


class BadDetachKeys(ValueError):
    pass


def parse_detach_keys(spec: str) -> bytes:
    """Docker's syntax: comma-separated keys, each a single character or ``ctrl-X``."""
    out = bytearray()
    for key in spec.split(","):
        key = key.strip()
        if key.startswith("ctrl-") and len(key) == 6:
            ch = key[5]
            if ch.isalpha():
                out.append(ord(ch.lower()) - ord("a") + 1)
            elif ch in _CTRL_PUNCT:
                out.append(_CTRL_PUNCT[ch])
            else:
                raise BadDetachKeys(f"unknown key {key!r}")
        elif len(key) == 1:
            out.append(ord(key))
        else:
            raise BadDetachKeys(
                f"unknown key {key!r}: use single characters or ctrl-<a-z, @, [, \\, ], ^, _>, "
                "separated by commas (e.g. ctrl-p,ctrl-q)")
    if not out:
        raise BadDetachKeys("the detach sequence is empty")
    return bytes(out)


def terminal_size(fd: int) -> tuple[int, int] | None:
    """(rows, cols), or None for no terminal or one nobody sized (0x0: a serial console)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return (size.lines, size.columns) if size.lines and size.columns else None


def passable_terminal(in_fd: int, out_fd: int) -> int | None:
    """The fd to hand the monitor: stdin, when stdin and stdout are one terminal."""
    try:
        if not (os.isatty(in_fd) and os.isatty(out_fd)):
            return None
        return in_fd if os.fstat(in_fd).st_rdev == os.fstat(out_fd).st_rdev else None
    except OSError:
        return None


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode for ``fd`` if it is a terminal, restored on every exit path."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)

    def restore() -> None:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    def on_signal(signum: int, frame: Any) -> None:
        restore()
        sys.stderr.write(f"\r\ntether: terminal restored ({signal.Signals(signum).name})\r\n")
        os._exit(128 + signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        restore()
        for s, h in old.items():
            signal.signal(s, h)


class AttachResult:
    """How an attachment ended. (A plain class: ``dataclasses`` costs ``tether attach``
    a few ms of start.)"""

    def __init__(self, how: str, exit: dict[str, Any] | None = None) -> None:
        self.how = how  # "detached" | "exited" | "lost"
        self.exit = exit


#: Opens the attachment: (this terminal's size or None, the fd to pass or None).
Connect = Callable[[tuple[int, int] | None, int | None], Attachment]


def attach_session(connect: Connect, keys: bytes, *, read_only: bool,
                   ended: Callable[[str], object] | None = None) -> int | None:
    """Attach stdin/stdout and stay until detached or ended; the CLI's exit code, or
    None when the exec was not running (``NOT_RUNNING``) by the time of the attach.
    ``ended`` is told how the attachment ended (``AttachResult.how``).

    This terminal is offered to the monitor (which then writes and reads it directly,
    with no copy through this process); raw mode is set first, since the monitor may
    write the replay and read keys as soon as it answers."""
    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    with raw_terminal(in_fd):
        try:
            att = connect(terminal_size(in_fd), passable_terminal(in_fd, out_fd))
        except TetherError as e:
            if e.code != "NOT_RUNNING":
                raise
            return None
        if not read_only and not att.direct and not os.isatty(in_fd):
            # As `docker attach` from a pipe: its EOF cannot reach a terminal program,
            # which would wait for keys forever.
            att.detach()
            sys.stderr.write("tether: the input device is not a TTY; attach from a terminal, "
                             "or --read-only to watch its output\n")
            return 1
        result = (wait_loop(att, size_fd=in_fd) if att.direct else
                  copy_loop(att, stdin_fd=in_fd, stdout_fd=out_fd, detach_keys=keys,
                            forward_input=not read_only))
        att.detach()
    if ended is not None:
        ended(result.how)
    return report(att.info, result)


def report(info: dict[str, Any], result: AttachResult) -> int:
    """Say how the attachment ended, naming the exec by its name; the CLI's exit code
    (the lean attach's words: ``lean.attach_report``)."""
    from tether.cli.lean import attach_report

    return attach_report(info, result.how, result.exit)


def exit_code(state: str, code: Any, sig: Any) -> int:
    """The CLI's exit code for an ended exec (128+N when killed by signal N)."""
    if code is not None:
        return int(code)
    if sig:
        return 128 + int(sig)
    return 1 if state == "FAILED" else 0


def copy_loop(att: Attachment, *, stdin_fd: int, stdout_fd: int, detach_keys: bytes,
              forward_input: bool = True) -> AttachResult:
    """Copy terminal input to the program and its output to the terminal until one ends."""
    matcher = DetachMatcher(detach_keys)
    screen = ScreenModes.from_state(att.info.get("screen"))
    try:
        return _copy(att, stdin_fd, stdout_fd, matcher, screen, forward_input)
    finally:  # the terminal back as tmux gives it: out of the program's screen and modes
        with contextlib.suppress(OSError):
            _write_all(stdout_fd, screen.restore())


def _copy(att: Attachment, stdin_fd: int, stdout_fd: int, matcher: DetachMatcher,
          screen: ScreenModes, forward_input: bool) -> AttachResult:
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    old_winch = signal.signal(signal.SIGWINCH, lambda *_: None)
    # Read-only clients read the keyboard too, for the detach keys; nothing is sent.
    poller = select.poll()
    for fd in (att.fileno(), wake_r, stdin_fd):
        poller.register(fd, select.POLLIN)
    try:
        pending = att.read(0)  # anything already buffered (e.g. the replay)
        while True:
            if pending:
                screen.feed(pending)
                _write_all(stdout_fd, pending)
            if att.closed:
                return AttachResult("exited" if att.exit else "lost", att.exit)
            ready = {fd for fd, _ in poller.poll()}
            pending = b""
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                size = terminal_size(stdin_fd)
                if size:
                    att.resize(*size)
            if stdin_fd in ready:
                data = os.read(stdin_fd, 65536)
                if not data:
                    poller.unregister(stdin_fd)
                    if forward_input and not att.info.get("tty"):
                        att.close_stdin()
                    continue
                send, detached = matcher.feed(data)
                if send and forward_input:
                    att.write(send)
                if detached:
                    att.detach()
                    return AttachResult("detached")
            if att.fileno() in ready:
                pending = att.read_ready()
    finally:
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGWINCH, old_winch)
        os.close(wake_r)
        os.close(wake_w)


def wait_loop(att: Attachment, *, size_fd: int) -> AttachResult:
    """The monitor has the terminal: send window sizes until it says detached or ended."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    old_winch = signal.signal(signal.SIGWINCH, lambda *_: None)
    poller = select.poll()
    for fd in (att.fileno(), wake_r):
        poller.register(fd, select.POLLIN)
    try:
        while True:
            att.read(0)  # no output comes here: only the end (EXIT, DETACH or EOF)
            if att.closed:
                how = "detached" if att.detached else "exited" if att.exit else "lost"
                return AttachResult(how, att.exit)
            ready = {fd for fd, _ in poller.poll()}
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                size = terminal_size(size_fd)
                if size:
                    with contextlib.suppress(OSError):
                        att.resize(*size)
    finally:
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGWINCH, old_winch)
        os.close(wake_r)
        os.close(wake_w)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


class EscapeStripper:
    """Removes terminal escape sequences (ECMA-48: CSI, OSC, DCS/SOS/PM/APC strings, and
    the short ESC forms) and the CR of CRLF, across chunk boundaries: an incomplete
    sequence at the end of a chunk is held back until the next one (or ``flush``). What
    is left is text: a carriage return that rewrites a line (a progress bar) starts a new
    one, a backspace takes the character before it back, and the other control
    characters (a bell, the shift-in ^O that ``tput sgr0`` sends) go."""

    _SEQ = re.compile(
        rb"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
        rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC, ended by BEL or ST
        rb"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings, ended by ST
        rb"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"  # short forms: ESC 7, ESC c, ESC ( B, ...
        rb"|\r(?=\n)")
    # What an unfinished sequence looks like at the very end of a chunk.
    _PARTIAL = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?"
                          rb"|[ -/]*)\Z")
    _HOLD = 64 * 1024  # longest incomplete sequence held back

    def __init__(self) -> None:
        self.tail = b""

    def feed(self, data: bytes) -> bytes:
        data = self.tail + data
        self.tail = b""
        i = 0
        while (pos := data.find(b"\x1b", i)) >= 0:
            m = self._SEQ.match(data, pos)
            if m is not None:
                i = m.end()
            elif len(data) - pos < self._HOLD and self._PARTIAL.match(data, pos):
                data, self.tail = data[:pos], data[pos:]  # finish it with the next chunk
                break
            else:
                i = pos + 1  # a stray ESC: leave it
        if not self.tail and data.endswith(b"\r"):
            kept = data.rstrip(b"\r")  # maybe the CRs of a CRLF (a terminal's \r\r\n)
            data, self.tail = kept, data[len(kept):]
        return self._text(self._SEQ.sub(b"", data))

    def flush(self) -> bytes:
        rest, self.tail = self.tail, b""
        return self._text(self._SEQ.sub(b"", rest))

    _CRS = re.compile(rb"\r+\n")  # a line's end, however many CRs a terminal put there
    _ERASED = re.compile(rb"[^\x08\n]\x08")
    _CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")

    def _text(self, data: bytes) -> bytes:
        data = self._CRS.sub(b"\n", data).replace(b"\r", b"\n")
        while self._ERASED.search(data):
            data = self._ERASED.sub(b"", data)
        return self._CONTROL.sub(b"", data)
