"""A docker exec's child: a fork of its monitor that starts the exec and carries its streams.

This is what ``docker exec`` did for a docker sandbox's execs, without the Go client's
start-up on the critical path. The monitor creates the exec through the Engine API
(:mod:`tether.monitor.dockerapi`: a refusal — no such container, not running — is then a
failed start, like a command not found), and forks this child, which
(:func:`spawn_client`):

* becomes what a spawned child would: its own process group (a session on a terminal),
  the file actions the monitor prepared applied (stdin ``/dev/null``, a pipe or the PTY;
  stdout and stderr the log files or the PTY; the gate on fd 3), the signal dispositions
  reset, every other descriptor of the monitor closed;
* connects to dockerd, then waits at the gate (fd 3): EOF (the monitor died before it
  recorded the start) ends it with 125 and the exec never starts;
* starts the exec attached (``POST /exec/{id}/start``, the connection hijacked) and copies
  its streams: without a terminal dockerd multiplexes stdout and stderr (8-byte frame
  headers) and each payload goes, as it arrives, to fd 1 or fd 2 — the log files, byte for
  byte; with a terminal the raw stream goes to the PTY (raw mode: the terminal inside the
  container is the one that cooks) and what is typed goes back; ``stdin``: fd 0 to dockerd,
  then a half close, which closes the command's stdin;
* on a terminal, follows the window size (SIGWINCH → ``/exec/{id}/resize``; a SIGWINCH
  with the size unchanged is a redraw: one row more, then back);
* once the stream ends, exits with the exec's exit code (``/exec/{id}/json``; polled while
  dockerd still says it runs: a command that closed its output runs on).

So the monitor treats it as any child: its pid in the handles file, its exit status in the
exit file, SIGKILL to its group ends it. A signal for the command goes into the container
(:func:`spawn_helper`: a forked helper runs ``signal`` there, as ``docker exec`` did).

Standard library only, and low-level modules (see :mod:`tether.monitor.main`); imported
only by the monitors of docker execs.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import fcntl
import os
import select
import struct
import termios
import time

from tether.monitor import dockerapi as api
from tether.monitor.dispositions import RESET_SIGNALS
from tether.monitor.pin import GATE_FD

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

#: Typed input held for dockerd before fd 0 is no longer read (the monitor holds more).
MAX_PENDING_INPUT = 1024 * 1024
#: The first resize races the exec's start (dockerd answers the start before the process
#: exists): tried again after these delays, as ``docker exec`` does.
RESIZE_RETRIES = (0.01, 0.02, 0.04, 0.08, 0.16)
#: How long a connection problem may hide the exit code before the exec is given up on.
INSPECT_PATIENCE = 10.0
FRAME_HEAD = 8


def _say(message: str) -> None:
    """A line on stderr: the exec's (as the docker CLI's errors were), or the helper's."""
    try:
        os.write(2, f"tether: {message}\n".encode())
    except OSError:
        pass


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _opened_ahead(actions: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], list[int]]:
    """The file actions with each open done now, in the monitor (``O_NOCTTY``: the
    monitor never takes a terminal), and the fds so opened, to close once forked. A PTY's
    slave must be open before the fork returns, as it is when ``posix_spawn`` returns:
    with no slave open the master reads EIO and the monitor would stop reading it."""
    out: list[tuple[Any, ...]] = []
    opened: list[int] = []
    for act in actions:
        if act[0] == os.POSIX_SPAWN_OPEN:
            _, fd, path, flags, mode = act
            opened.append(os.open(path, flags | os.O_NOCTTY | os.O_CLOEXEC, mode))
            out.append((os.POSIX_SPAWN_DUP2, opened[-1], fd))
        else:
            out.append(act)
    return out, opened


def _become_child(actions: list[tuple[Any, ...]], setsid: bool, keep: int) -> None:
    """What ``posix_spawn`` does for a spawned child, in the forked monitor: its own
    process group or session (then fd 0, a terminal, its controlling one), the file
    actions (opens done ahead: :func:`_opened_ahead`), default signal dispositions;
    and every descriptor of the monitor's but 0 to ``keep`` closed."""
    signal.set_wakeup_fd(-1)  # the monitor's wake-up pipe is not ours
    if setsid:
        os.setsid()
    else:
        os.setpgid(0, 0)
    for act in actions:
        if act[0] == os.POSIX_SPAWN_DUP2:
            os.dup2(act[1], act[2])
        elif act[0] == os.POSIX_SPAWN_CLOSE:
            os.close(act[1])
    if setsid and os.isatty(0):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    for s in RESET_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a closed peer is an error, not death


def _forked(work: Any) -> int:
    """Fork; the child runs ``work()`` (its exit code) and never returns here."""
    pid = os.fork()
    if pid:
        return pid
    code = 255
    try:
        code = work()
    except BaseException as e:  # whatever it is: say it, and exit
        _say(f"docker exec client: {e!r}")
    finally:
        os._exit(code)


# ---------------------------------------------------------------------- the client
def spawn_client(engine: dict[str, Any], actions: list[tuple[Any, ...]], setsid: bool, *,
                 tty: bool, stdin: bool, size: tuple[int, int] = (24, 80)) -> int:
    """Create the exec (raises :class:`~tether.monitor.dockerapi.EngineError` when dockerd
    refuses or cannot be reached: nothing ran), then fork the child that runs it; its
    pid. ``size``: a terminal's, for dockerd to start it with (API 1.42, Docker 23; an
    older one ignores it and learns the size once the exec runs, as from ``docker
    exec``, so a program that asks at once may see none)."""
    host: str = engine["host"]
    config = engine["config"]
    if tty:
        config = {**config, "ConsoleSize": list(size)}
    exec_id = api.exec_create(host, engine["container"], config)
    actions, opened = _opened_ahead(actions)

    def client() -> int:
        _become_child(actions, setsid, keep=GATE_FD)
        if tty:
            _raw(0)
        sock = api.connect(host)  # ahead of the gate: the start is then one round trip
        if not _gate():
            return 125  # never started: as a cold start's gate
        sock, rest = api.exec_start(host, exec_id, tty, sock)
        Relay(host, exec_id, sock, tty=tty, stdin=stdin or tty).run(rest)
        return exit_code(host, exec_id)

    try:
        return _forked(client)
    finally:
        for fd in opened:
            os.close(fd)


def _gate() -> bool:
    """Wait for the monitor's line on the gate (it has recorded the start); False on EOF."""
    while True:
        try:
            opened = bool(os.read(GATE_FD, 64))
            break
        except InterruptedError:
            continue
        except OSError:
            opened = False
            break
    os.close(GATE_FD)
    return opened


def _raw(fd: int) -> None:
    """The PTY in raw mode (``cfmakeraw``): the container's own terminal echoes, cooks
    and turns ctrl-C into SIGINT; ours must pass every byte through as it is."""
    try:
        attrs = termios.tcgetattr(fd)
    except termios.error:
        return
    attrs[0] &= ~(termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP
                  | termios.INLCR | termios.IGNCR | termios.ICRNL | termios.IXON)
    attrs[1] &= ~termios.OPOST
    attrs[2] &= ~(termios.CSIZE | termios.PARENB)
    attrs[2] |= termios.CS8
    attrs[3] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG
                  | termios.IEXTEN)
    attrs[6][termios.VMIN] = 1
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def _winsize(fd: int) -> tuple[int, int]:
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols


class Relay:
    """The exec's streams between dockerd's hijacked connection and fds 0, 1 and 2."""

    def __init__(self, host: str, exec_id: str, sock: Any, *, tty: bool, stdin: bool,
                 stdout: int = 1, stderr: int = 2) -> None:
        self.host, self.exec_id, self.sock, self.tty = host, exec_id, sock, tty
        self.stdout, self.stderr = stdout, stderr
        self.sock_fd = sock.fileno()
        self.poll = select.epoll()
        self.reading_input = stdin
        self.input_eof = False
        self.pending = bytearray()  # typed input dockerd has not taken yet
        self.half_closed = False
        # Without a terminal: the frame being copied (its fd and bytes left), or the
        # part of a frame head read so far.
        self.head = bytearray()
        self.frame_fd = stdout
        self.frame_left = 0
        self.out_ok: dict[int, bool] = {}
        # On a terminal: the size dockerd was last told, and the retries of the first.
        self.size: tuple[int, int] | None = None
        self.resize_at: float | None = None
        self.resize_tries = 0
        self.wake_r = -1

    # -------------------------------------------------------------- loop
    def run(self, first: bytes) -> None:
        self.sock.setblocking(False)
        self.poll.register(self.sock_fd, select.EPOLLIN)
        if self.reading_input:
            self.poll.register(0, select.EPOLLIN)
        if self.tty:
            self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
            signal.signal(signal.SIGWINCH, lambda *_: None)
            self.poll.register(self.wake_r, select.EPOLLIN)
            self.resize_at = time.monotonic()
        if first and not self.output(first):
            return
        while True:
            timeout = -1.0
            if self.resize_at is not None:
                timeout = max(0.0, self.resize_at - time.monotonic())
            try:
                ready = self.poll.poll(timeout)
            except InterruptedError:
                ready = []
            for fd, events in ready:
                if fd == self.sock_fd:
                    if events & select.EPOLLOUT:
                        self.flush()
                    if (events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR)
                            and not self.receive()):
                        return
                elif fd == 0:
                    self.read_input()
                elif fd == self.wake_r:
                    self.on_winch()
            if self.resize_at is not None and time.monotonic() >= self.resize_at:
                self.resize()

    def receive(self) -> bool:
        """Read what dockerd sent; False at the end of the stream."""
        for _ in range(16):  # bounded: typed input and resizes are served under a flood
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            except OSError:  # reset: the same as the end
                return False
            if not data:
                return False
            if not self.output(data):
                return False
        return True

    # -------------------------------------------------------------- output
    def output(self, data: bytes) -> bool:
        if self.tty:
            self.write(1, data)
            return True
        view = memoryview(data)
        while view:
            if self.frame_left:
                part = view[:self.frame_left]
                self.write(self.frame_fd, part)
                self.frame_left -= len(part)
                view = view[len(part):]
                continue
            need = FRAME_HEAD - len(self.head)
            self.head += view[:need]
            view = view[need:]
            if len(self.head) < FRAME_HEAD:
                break
            kind, size = self.head[0], int.from_bytes(self.head[4:8], "big")
            self.head.clear()
            # 0 (stdin, echoed) and 1: stdout; 2: stderr; 3: an error of dockerd's own.
            self.frame_fd = self.stderr if kind in (2, 3) else self.stdout
            self.frame_left = size
        return True

    def write(self, fd: int, data: bytes | memoryview) -> None:
        """All of ``data`` to ``fd``. A log that cannot take it (a full disk) or a PTY
        whose monitor is gone drops it: the stream is drained all the same, so the
        command is never blocked on its output."""
        if not self.out_ok.get(fd, True):
            return
        try:
            _write_all(fd, data)
        except OSError as e:
            self.out_ok[fd] = False
            _say(f"output dropped from here on: {e}")

    # -------------------------------------------------------------- input
    def read_input(self) -> None:
        try:
            data = os.read(0, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: the monitor's side of the PTY is gone
            data = b""
        if not data:
            self.poll.unregister(0)
            self.reading_input = False
            self.input_eof = True
        else:
            self.pending += data
            if len(self.pending) >= MAX_PENDING_INPUT:  # until dockerd takes some
                self.poll.unregister(0)
                self.reading_input = False
        self.flush()

    def flush(self) -> None:
        while self.pending:
            try:
                n = self.sock.send(self.pending)
            except BlockingIOError:
                break
            except OSError:  # dockerd closed its side: the command has ended
                self.pending.clear()
                self.input_eof = True
                break
            del self.pending[:n]
        self.poll.modify(self.sock_fd, select.EPOLLIN | (select.EPOLLOUT if self.pending
                                                         else 0))
        if not self.pending and not self.input_eof and not self.reading_input:
            self.poll.register(0, select.EPOLLIN)  # room again
            self.reading_input = True
        if not self.pending and self.input_eof and not self.half_closed:
            self.half_closed = True  # dockerd closes the command's stdin
            try:
                self.sock.shutdown(1)  # SHUT_WR
            except OSError:
                pass

    # -------------------------------------------------------------- window size
    def on_winch(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        self.resize_tries = len(RESIZE_RETRIES)  # a retry is no longer wanted
        self.resize(redraw=True)

    def resize(self, redraw: bool = False) -> None:
        """Tell dockerd the PTY's size. The same size again is a redraw request: dockerd
        (the kernel) would not signal the program for it, so one row more first."""
        self.resize_at = None
        try:
            rows, cols = _winsize(0)
        except OSError:
            return
        if rows < 1 or cols < 1:
            return
        try:
            if redraw and (rows, cols) == self.size:
                api.exec_resize(self.host, self.exec_id, rows + 1, cols)
            api.exec_resize(self.host, self.exec_id, rows, cols)
            self.size = (rows, cols)
        except api.EngineError:
            if self.resize_tries < len(RESIZE_RETRIES):
                self.resize_at = time.monotonic() + RESIZE_RETRIES[self.resize_tries]
                self.resize_tries += 1


def exit_code(host: str, exec_id: str) -> int:
    """The exec's exit code, once dockerd says it has ended (it may run on after its
    stream: a command that closed its stdout and stderr). 255 when dockerd cannot say."""
    delay, lost_since = 0.005, None
    while True:
        try:
            info = api.exec_inspect(host, exec_id)
        except api.EngineError as e:
            now = time.monotonic()
            lost_since = now if lost_since is None else lost_since
            if e.status or now - lost_since > INSPECT_PATIENCE:
                _say(f"the command's exit status is unknown: dockerd: {e}")
                return 255
        else:
            lost_since = None
            code = info.get("ExitCode")
            if not info.get("Running") and isinstance(code, int):
                return code & 0xFF
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


# ---------------------------------------------------------------------- helpers
def run_inside(host: str, container: str, cmd: list[str]) -> None:
    """Run ``cmd`` in ``container`` and wait until it has ended (its stream closed);
    what it writes goes to our stderr."""
    exec_id = api.exec_create(host, container, {"AttachStdout": True, "AttachStderr": True,
                                                "Cmd": cmd})
    sock, data = api.exec_start(host, exec_id, False)
    relay = Relay(host, exec_id, sock, tty=False, stdin=False, stdout=2)
    try:
        while True:
            relay.output(data)
            data = sock.recv(65536)
            if not data:
                break
    finally:
        sock.close()


def spawn_helper(host: str, container: str, cmd: list[str]) -> int:
    """Fork a helper that runs ``cmd`` in the container (own process group, stdin
    ``/dev/null``, output to the monitor's log, as ``docker exec`` helpers were); its pid,
    for the monitor to reap."""
    def helper() -> int:
        null = os.open(os.devnull, os.O_RDONLY)
        _become_child([(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, 2, 1)], False,
                      keep=2)
        run_inside(host, container, cmd)
        return 0

    return _forked(helper)
