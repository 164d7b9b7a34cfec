"""The monitor process. Run as ``python -I -S .../tether/monitor/main.py``.

Life of a monitor (no asyncio; one ``epoll`` loop):

1. Read one JSON spec line from stdin. A pooled monitor waits here until the
   daemon hands it an exec; EOF (the daemon died) means exit quietly.
2. Claim the exec (``O_EXCL`` claim file, ``flock`` held for life). If a
   recovering daemon claimed it first, start nothing.
3. Start the child with ``posix_spawnp`` in its own process group. Without a
   terminal its stdout and stderr *are* the log files: no byte passes through
   any tether process. With a terminal (``tty``) the child is a session leader
   on a PTY whose master we own; we copy its output to ``pty.log`` and to every
   attached client.
4. Write the handles file, report ``{"pid": ...}`` on stdout, close both pipes:
   from here on the daemon may die at any moment without affecting us.
5. Serve the socket (control commands, attach clients, daemon watchers),
   enforce the timeout, and when the child ends write the exit file (atomic,
   fsynced) and exit.

The socket speaks JSON lines until a client sends ``{"op": "attach"}``; from
then on both directions are frames: 1 type byte, 4-byte big-endian length,
payload (docs/PROTOCOL.md, "Attach protocol").
"""

from __future__ import annotations

# Low-level modules on purpose (``_signal``, ``_socket``, ``select.epoll``, our
# ``tinyjson``): ``signal``/``socket`` pull in ``enum``, ``selectors`` and ``json``
# pull in more; together ~2.5 MB of RSS in a process we run once per exec.
import _signal as signal  # type: ignore[import-not-found]
import _socket as socket
import errno
import fcntl
import os
import select
import struct
import sys
import termios
import time
from _collections import deque  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tether.hostio.proc import proc_start_time  # noqa: E402
from tether.monitor import attachproto as proto  # noqa: E402
from tether.monitor import tinyjson as json  # noqa: E402
from tether.monitor.files import claim, write_exit, write_handles  # noqa: E402

_VALID_SIGNALS = set(range(1, signal.NSIG))
# Signals a child must start with default dispositions (Python ignores SIGPIPE
# and SIGXFSZ; a daemon started under nohup ignores SIGHUP).
_RESET_SIGNALS = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                  signal.SIGTERM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD,
                  signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH}
MAX_CONTROL_LINE = 64 * 1024
MAX_CLIENT_BACKLOG = 4 * 1024 * 1024  # an attached client further behind is dropped
MAX_INPUT_BACKLOG = 1024 * 1024  # typed input the program has not read yet
MAX_TTY_EVENTS = 10000  # terminal events kept for a daemon that catches up
frame = proto.frame

def _report(obj: dict[str, Any]) -> None:
    try:
        os.write(1, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass  # the daemon is gone; the files say everything


def _detach_pipes() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def _read_spec() -> dict[str, Any] | None:
    buf = b""
    while not buf.endswith(b"\n"):
        try:
            chunk = os.read(0, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return None
        buf += chunk
    spec = json.loads(buf)
    if not isinstance(spec, dict):
        raise ValueError("spec is not an object")
    return spec


def resolve_command(name: str, env: dict[str, str]) -> str:
    """``name`` looked up in the *exec's* PATH (posix_spawnp would use ours)."""
    if "/" in name:
        return name
    for d in env.get("PATH", os.defpath).split(":"):
        path = os.path.join(d or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, "command not found", name)


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Client:
    """One connection to the monitor's socket."""

    def __init__(self, sock: socket.socket, ident: int) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.id = ident
        self.mode = "control"  # "control" | "attach" | "watch"
        self.inbuf = bytearray()
        # Unsent output as whole frames (a backlog can be dropped at a frame boundary);
        # ``out_off`` bytes of the first one have been sent already.
        self.out: deque[bytes] = deque()
        self.out_off = 0
        self.out_size = 0
        self.read_only = False
        self.rows = 0
        self.cols = 0
        self.writable_wanted = False
        self.replay_left = 0  # replay bytes still queued (exempt from the backlog limit)
        self.skips = 0  # times it fell behind and skipped ahead


class Monitor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.exec_id: str = spec["exec_id"]
        self.paths: dict[str, str] = spec["paths"]
        self.tty = bool(spec.get("tty"))
        self.keep_stdin = bool(spec.get("stdin"))
        self.poll = select.epoll()
        self.fds: dict[int, Any] = {}  # fd -> "wake" | "listen" | "master" | "stdin" | Client
        self.pid = 0
        self.started_at = 0.0
        self.cancel: dict[str, Any] | None = None  # {"outcome", "signal", "reason", "kill_at"}
        self.deadline: float | None = None
        self.clients: dict[int, Client] = {}
        self.next_client = 1
        self.listener: socket.socket | None = None
        self.master = -1  # PTY master (tty mode)
        self.stdin_w = -1  # write end of the child's stdin pipe (stdin without tty)
        self.input = bytearray()  # typed input not yet accepted by the program
        self.pty_log = -1
        self.rows = int(spec.get("rows") or 24)
        self.cols = int(spec.get("cols") or 80)
        self.active: Client | None = None  # the most recently active attached client
        self.paused: set[Client] = set()  # attach clients not read while input is full
        self.input_wants_out = False  # EPOLLOUT registered for the input fd
        self.child_may_have_ended = True  # set by SIGCHLD; saves a waitid per wake-up
        self.pending_eof = False
        self.tty_events: list[dict[str, Any]] = []  # attach/detach/resize, numbered
        self.tty_events_base = 0
        self.helpers: set[int] = set()  # signal helpers still to be reaped

    # -------------------------------------------------------------- start
    def start(self) -> int:
        # Held (locked) until we exit: tells the daemon this exec has a live monitor.
        fd = claim(self.paths["claim"], f"monitor {os.getpid()}\n", locked=True)
        if fd is None:
            _report({"error": "exec was already claimed (a recovering daemon failed it)",
                     "code": "CLAIMED"})
            return 3
        self._claim_fd = fd

        log = os.open(self.paths["monitor_log"],
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.dup2(log, 2)
        os.close(log)

        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out = os.open(self.paths["stdout"], flags, 0o600)
        err = os.open(self.paths["stderr"], flags, 0o600)
        to_close = [out, err]
        setsid = False
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
            setsid = True
        else:
            if self.keep_stdin:
                child_in, self.stdin_w = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(self.stdin_w, False)
            else:
                child_in = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            to_close.append(child_in)
            actions = [(os.POSIX_SPAWN_DUP2, child_in, 0), (os.POSIX_SPAWN_DUP2, out, 1),
                       (os.POSIX_SPAWN_DUP2, err, 2)]

        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(self.paths["socket"])
        except FileNotFoundError:
            pass
        self.listener.bind(self.paths["socket"])
        os.chmod(self.paths["socket"], 0o600)
        self.listener.listen(16)
        self.listener.setblocking(False)
        os.set_inheritable(self.listener.fileno(), False)

        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self._wake_r = rfd

        argv: list[str] = self.spec["argv"]
        env: dict[str, str] = self.spec["env"]
        try:
            if self.spec.get("cwd"):
                os.chdir(self.spec["cwd"])
            spawn_kw: dict[str, Any] = {"setsid": True} if setsid else {"setpgroup": 0}
            self.pid = os.posix_spawn(resolve_command(argv[0], env), argv, env,
                                      file_actions=actions, setsigmask=(),
                                      setsigdef=_RESET_SIGNALS, **spawn_kw)
        except OSError as e:
            what = {errno.ENOENT: "command not found", errno.EACCES: "permission denied",
                    errno.ENOTDIR: "not a directory"}.get(e.errno or 0, e.strerror or str(e))
            where = argv[0]
            if self.spec.get("cwd") and not os.path.isdir(self.spec["cwd"]):
                what, where = "working directory does not exist", self.spec["cwd"]
            msg = f"{what}: {where}"
            now = time.time()
            try:
                os.unlink(self.paths["socket"])
            except OSError:
                pass
            write_exit(self.paths["exit"], {"exit_code": 127, "signal": None, "ended_at": now,
                                            "started_at": None, "outcome": "start_failed",
                                            "reason": msg})
            _report({"error": msg, "code": "START_FAILED"})
            return 0
        finally:
            for f in to_close:
                os.close(f)
        self.started_at = time.time()
        try:
            self._announce()
        except BaseException:
            # The command runs but nobody could track it: end it, and say so on disk.
            self._killpg(signal.SIGKILL)
            try:
                os.waitpid(self.pid, 0)
                write_exit(self.paths["exit"], {
                    "exit_code": None, "signal": signal.SIGKILL, "ended_at": time.time(),
                    "started_at": self.started_at, "outcome": "start_failed",
                    "reason": "the monitor failed right after starting the command; it "
                              "was killed"})
            except OSError:
                pass
            raise
        return self.loop()

    def _announce(self) -> None:
        """Handles file and start report (the command already runs; the child is unreaped,
        so its pid cannot have been reused if this fails and it must be killed)."""
        start_time = proc_start_time(self.pid)
        me = {"pid": os.getpid(), "start_time": proc_start_time(os.getpid())}
        write_handles(self.paths["handles"], {
            "exec": self.exec_id, "name": self.spec.get("name"), "monitor": me,
            "child": {"pid": self.pid, "pgid": self.pid, "start_time": start_time},
            "socket": self.paths["socket"], "started_at": self.started_at, "tty": self.tty,
            "boot_id": boot_id(),
            "stdin": self.keep_stdin or self.tty,
        })
        timeout = self.spec.get("timeout")
        if timeout:
            self.deadline = time.monotonic() + float(timeout)
        _report({"pid": self.pid, "start_time": start_time, "started_at": self.started_at,
                 "monitor": me})
        _detach_pipes()

    # -------------------------------------------------------------- loop
    def loop(self) -> int:
        assert self.listener is not None
        self._register(self._wake_r, "wake")
        self._register(self.listener.fileno(), "listen")
        if self.master >= 0:
            os.set_blocking(self.master, False)
            self._register(self.master, "master")
        while True:
            if self.child_may_have_ended:
                self.child_may_have_ended = False
                if self.helpers:
                    self._reap_helpers()
                status = self._poll_child()
                if status is not None:
                    return self._finish(status)
            now = time.monotonic()
            timers = [t for t in (self.deadline,
                                  self.cancel["kill_at"] if self.cancel else None) if t]
            # Capped: epoll cannot wait longer than ~24.8 days, and the loop recomputes.
            wait = min(3600.0, max(0.0, min(timers) - now)) if timers else 3600.0
            try:
                ready = self.poll.poll(wait)
            except InterruptedError:
                ready = []
            for fd, events in ready:
                what = self.fds.get(fd)
                if what is None:
                    continue
                if what == "wake":
                    self._drain_wake()
                elif what == "listen":
                    self._accept()
                elif what == "master":
                    if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                        self._pty_readable()
                    if events & select.EPOLLOUT and self.master >= 0:
                        self._flush_input()
                elif what == "stdin":
                    self._flush_input()
                else:
                    try:
                        # Read first: a client that sent "detach" and closed must be seen
                        # detaching, not failing on the write of its pending output.
                        if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                            self._client_readable(what)
                        if events & select.EPOLLOUT and what.fd in self.clients:
                            self._flush_client(what)
                    except Exception as e:  # a hostile client costs only its connection
                        sys.stderr.write(f"monitor: dropping client {what.id}: {e!r}\n")
                        self._drop(what, "protocol error")
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline and self.cancel is None:
                self._begin_cancel("timeout", signal.SIGTERM,
                                   float(self.spec.get("kill_grace", 5.0)))
            if self.cancel and self.cancel["kill_at"] and now >= self.cancel["kill_at"]:
                self._signal(signal.SIGKILL)
                self.cancel["kill_at"] = None

    def _register(self, fd: int, what: Any) -> None:
        self.fds[fd] = what
        self.poll.register(fd, select.EPOLLIN)

    def _unregister(self, fd: int) -> None:
        if self.fds.pop(fd, None) is not None:
            self.poll.unregister(fd)

    def _drain_wake(self) -> None:
        self.child_may_have_ended = True  # the wake-up fd carries SIGCHLD (and SIGTERM)
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _poll_child(self) -> tuple[int | None, int | None] | None:
        # Observe the exit without reaping, so the pgid cannot be reused while we
        # SIGKILL the rest of a cancelled group; then reap.
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return (None, None)
        if info is None:
            return None
        if self.cancel is not None:
            self._killpg(signal.SIGKILL)
            if self.spec.get("signal_argv"):  # and what the client left running elsewhere
                self._spawn_helper([*self.spec["signal_argv"], str(int(signal.SIGKILL))])
                self._wait_helpers(2.0)  # done before the exit file says it ended
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return (None, os.WTERMSIG(status))
        return (os.WEXITSTATUS(status), None)

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal(self, sig: int) -> None:
        """Deliver ``sig`` to what the exec runs. When the child only drives the command
        elsewhere (a ``docker exec`` client), ``signal_argv`` delivers it there; SIGKILL
        also ends the client, so a hung engine cannot keep the exec alive."""
        helper = self.spec.get("signal_argv")
        if helper:
            self._spawn_helper([*helper, str(int(sig))])
            if sig != signal.SIGKILL:
                return
        self._killpg(sig)

    def _spawn_helper(self, argv: list[str]) -> None:
        env: dict[str, str] = self.spec["env"]
        try:
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                pid = os.posix_spawn(resolve_command(argv[0], env), argv, env,
                                     file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                                   (os.POSIX_SPAWN_DUP2, 2, 1)],
                                     setpgroup=0, setsigdef=_RESET_SIGNALS)
            finally:
                os.close(null)
        except OSError as e:
            sys.stderr.write(f"monitor: signal helper {argv[0]} failed: {e}\n")
            return
        self.helpers.add(pid)

    def _wait_helpers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.helpers and time.monotonic() < deadline:
            self._reap_helpers()
            if self.helpers:
                time.sleep(0.02)

    def _reap_helpers(self) -> None:
        for pid in list(self.helpers):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.helpers.discard(pid)

    def _begin_cancel(self, outcome: str, sig: int, grace: float, reason: str = "") -> None:
        kill_at = time.monotonic() + (0.0 if sig == signal.SIGKILL else max(0.0, grace))
        if self.cancel is None:
            self.cancel = {"outcome": outcome, "signal": int(sig), "reason": reason,
                           "kill_at": kill_at}
        elif self.cancel["kill_at"] is not None:
            self.cancel["kill_at"] = min(self.cancel["kill_at"], kill_at)  # sooner wins
        self._signal(sig)

    # -------------------------------------------------------------- terminal
    def _pty_readable(self) -> None:
        """Copy what the program wrote to the PTY log and to every attached client."""
        for _ in range(16):  # bounded, so clients and timers are served under a flood
            try:
                data = os.read(self.master, 65536)
            except BlockingIOError:
                return
            except OSError:  # EIO: every holder of the terminal has closed it
                data = b""
            if not data:
                self._unregister(self.master)
                return
            # Clients first (they are waiting on it), then the log. Nothing can run in
            # between (one thread), so a replay still sees every byte exactly once.
            out = frame(proto.DATA, data)
            for c in list(self.clients.values()):
                if c.mode == "attach":
                    self._queue(c, out)
            view = memoryview(data)
            while view:
                view = view[os.write(self.pty_log, view):]
            if len(data) < 65536:
                return  # drained; the next EPOLLIN says when there is more

    def _input_fd(self) -> int:
        return self.master if self.master >= 0 else self.stdin_w

    def _input_full(self) -> bool:
        return len(self.input) >= MAX_INPUT_BACKLOG

    def _write_input(self, data: bytes) -> None:
        if self._input_fd() < 0:
            return
        self.input += data  # callers stop reading clients while it is full
        self._flush_input()

    def _flush_input(self) -> None:
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
        if not self._input_full() and self.paused:
            for c in list(self.paused):  # the program caught up: read clients again
                self.paused.discard(c)
                if c.fd in self.clients:
                    self._set_mask(c)
                    self._process_frames(c)
        if not self.input and self.pending_eof:
            self.pending_eof = False
            self._close_stdin()

    def _want_writable_input(self, want: bool) -> None:
        fd = self._input_fd()
        if fd < 0 or want == self.input_wants_out:
            return
        self.input_wants_out = want
        mask = select.EPOLLOUT if want else 0
        if fd == self.master and fd in self.fds:
            self.poll.modify(fd, select.EPOLLIN | mask)
        elif fd == self.stdin_w:
            if want and fd not in self.fds:
                self.fds[fd] = "stdin"
                self.poll.register(fd, select.EPOLLOUT)
            elif not want and fd in self.fds:
                self._unregister(fd)

    def _close_stdin(self) -> None:
        if self.stdin_w < 0:
            return
        if self.input:
            self.pending_eof = True  # after the buffered input has been delivered
            return
        self._unregister(self.stdin_w)
        os.close(self.stdin_w)
        self.stdin_w = -1

    def _resize(self, rows: int, cols: int, who: Client | None) -> None:
        if rows < 1 or cols < 1 or self.master < 0:
            return
        if (rows, cols) != (self.rows, self.cols):
            self.rows, self.cols = rows, cols
            try:
                set_winsize(self.master, rows, cols)  # the kernel sends SIGWINCH
            except OSError:
                return
            self._notify_watchers({"event": "resize", "rows": rows, "cols": cols,
                                   "client": who.id if who else None})

    def _redraw(self) -> None:
        """Ask a full-screen program to repaint: SIGWINCH to the terminal's foreground."""
        try:
            os.killpg(os.tcgetpgrp(self.master), signal.SIGWINCH)
        except OSError:
            pass

    def _make_active(self, c: Client) -> None:
        """The most recently active client (attach, input, resize) sets the size."""
        self.active = c
        if c.rows and c.cols:
            self._resize(c.rows, c.cols, c)

    # -------------------------------------------------------------- socket
    def _accept(self) -> None:
        assert self.listener is not None
        try:
            fd, _ = self.listener._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
        os.set_inheritable(fd, False)
        conn.setblocking(False)
        c = Client(conn, self.next_client)
        self.next_client += 1
        self.clients[fd] = c
        self._register(fd, c)

    def _drop(self, c: Client, reason: str = "closed") -> None:
        if self.clients.get(c.fd) is not c:
            return  # already dropped
        self.paused.discard(c)
        self._unregister(c.fd)
        self.clients.pop(c.fd, None)
        c.sock.close()
        if c.mode == "attach":
            if self.active is c:
                self.active = None
            self._notify_watchers({"event": "detach", "client": c.id, "reason": reason})

    def _queue(self, c: Client, data: bytes, *, replay: bool = False) -> None:
        if c.fd not in self.clients:
            return
        c.out.append(data)
        c.out_size += len(data)
        # The replay a client asked for does not count against its backlog.
        if c.out_size - c.replay_left > MAX_CLIENT_BACKLOG and c.mode == "attach":
            self._skip_ahead(c)
        self._flush_client(c)

    def _skip_ahead(self, c: Client) -> None:
        """A client far behind (a slow terminal or link) jumps to the present instead of
        being dropped or slowing the program: its backlog is discarded, its terminal is
        reset and shown the recent output, and the program is asked to redraw. Nothing
        is lost: every byte is in pty.log."""
        head = c.out[0] if c.out and c.out_off else None  # finish a half-sent frame
        c.out.clear()
        c.out_size = 0
        if head is not None:
            c.out.append(head)
            c.out_size = len(head) - c.out_off
        else:
            c.out_off = 0
        c.skips += 1
        for chunk in (b"\x1bc", *self._tail(proto.DEFAULT_REPLAY)):
            c.out.append(frame(proto.DATA, chunk))
            c.out_size += len(c.out[-1])
        c.replay_left = c.out_size
        self._redraw()

    def _flush_client(self, c: Client) -> None:
        while c.out:
            views = [memoryview(c.out[0])[c.out_off:], *list(c.out)[1:64]]
            try:
                n = c.sock.sendmsg(views)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._read_last_words(c)  # a DETACH it sent before closing counts
                self._drop(c, "connection lost")
                return
            c.out_size -= n
            c.replay_left = max(0, c.replay_left - n)
            n += c.out_off
            while c.out and n >= len(c.out[0]):
                n -= len(c.out.popleft())
            c.out_off = n
        want = bool(c.out)
        if want != c.writable_wanted and c.fd in self.fds:
            c.writable_wanted = want
            self._set_mask(c)

    def _read_last_words(self, c: Client) -> None:
        """Process whatever a client sent before its connection broke."""
        c.sock.setblocking(False)
        while c.fd in self.clients:
            try:
                chunk = c.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            c.inbuf += chunk
            self._process_frames(c)

    def _set_mask(self, c: Client) -> None:
        mask = (0 if c in self.paused else select.EPOLLIN) | (
            select.EPOLLOUT if c.writable_wanted else 0)
        self.poll.modify(c.fd, mask)

    def _send_line(self, c: Client, obj: dict[str, Any]) -> None:
        self._queue(c, (json.dumps(obj) + "\n").encode())

    def _notify_watchers(self, event: dict[str, Any]) -> None:
        """Number the terminal event, keep it, and push it to the daemon's watchers.

        The numbered backlog lets a daemon that was not watching (not yet, or not
        running) journal every event exactly once, resuming from its own count.
        """
        event["n"] = self.tty_events_base + len(self.tty_events)
        self.tty_events.append(event)
        if len(self.tty_events) > MAX_TTY_EVENTS:
            drop = len(self.tty_events) - MAX_TTY_EVENTS
            del self.tty_events[:drop]
            self.tty_events_base += drop
        for c in list(self.clients.values()):
            if c.mode == "watch":
                self._send_line(c, event)

    def _client_readable(self, c: Client) -> None:
        try:
            chunk = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(c, "client went away")
            return
        c.inbuf += chunk
        self._process_frames(c)

    def _process_frames(self, c: Client) -> None:
        while c.fd in self.clients and c not in self.paused:
            if c.mode == "attach":
                if not self._attach_frame(c):
                    break
                continue
            if b"\n" not in c.inbuf:
                if len(c.inbuf) > MAX_CONTROL_LINE:
                    self._drop(c, "control line too long")
                break
            nl = c.inbuf.index(b"\n")
            line = bytes(c.inbuf[:nl])
            del c.inbuf[:nl + 1]
            self._command(c, line)

    def _attach_frame(self, c: Client) -> bool:
        try:
            got = proto.split(c.inbuf)
        except ValueError:
            self._drop(c, "frame too large")
            return False
        if got is None:
            return False
        kind, payload = got
        if kind == proto.DATA:
            if not c.read_only:
                if self.active is not c:
                    self._make_active(c)
                self._write_input(payload)
                if self._input_full():
                    self.paused.add(c)  # backpressure: stop reading until it drains
                    self._set_mask(c)
                    return False
        elif kind == proto.RESIZE and len(payload) == proto.SIZE.size:
            if not c.read_only:  # watchers do not size the window
                c.rows, c.cols = proto.SIZE.unpack(payload)
                self._make_active(c)
        elif kind == proto.EOF:
            if not c.read_only:
                self._close_stdin()
        elif kind == proto.DETACH:
            self._drop(c, "detached")
            return False
        return True

    def _command(self, c: Client, line: bytes) -> None:
        try:
            cmd = json.loads(line)
            op = cmd["op"]
        except (ValueError, KeyError, TypeError):
            self._send_line(c, {"ok": False, "error": "bad command"})
            return
        if op == "ping":
            self._send_line(c, {"ok": True, "pid": self.pid, "exec": self.exec_id,
                                "tty": self.tty, "clients": self._attached()})
        elif op == "cancel":
            try:
                sig = int(cmd.get("signal", signal.SIGTERM))
                grace = float(cmd.get("grace", 5.0))
            except (ValueError, TypeError, OverflowError):
                self._send_line(c, {"ok": False, "error": "bad signal or grace"})
                return
            if grace != grace:  # NaN
                grace = 5.0
            if sig not in _VALID_SIGNALS:
                self._send_line(c, {"ok": False, "error": f"bad signal {sig}"})
                return
            self._begin_cancel("cancelled", sig, grace, str(cmd.get("reason", "")))
            self._send_line(c, {"ok": True})
        elif op == "signal":
            try:
                sig = int(cmd["signal"])
            except (ValueError, TypeError, KeyError, OverflowError):
                sig = 0
            if sig not in _VALID_SIGNALS:
                self._send_line(c, {"ok": False, "error": "bad signal"})
                return
            self._signal(sig)
            self._send_line(c, {"ok": True})
        elif op == "watch":
            try:
                since = max(0, int(cmd.get("since", 0)))
            except (ValueError, TypeError, OverflowError):
                since = 0
            c.mode = "watch"
            self._send_line(c, {"ok": True, "clients": self._attached(),
                                "next": self.tty_events_base + len(self.tty_events)})
            for ev in self.tty_events[max(0, since - self.tty_events_base):]:
                self._send_line(c, ev)
        elif op == "attach":
            self._attach(c, cmd)
        else:
            self._send_line(c, {"ok": False, "error": f"unknown op {op!r}"})

    def _attached(self) -> int:
        return sum(1 for c in self.clients.values() if c.mode == "attach")

    def _attach(self, c: Client, cmd: dict[str, Any]) -> None:
        if not self.tty and self.stdin_w < 0:
            self._send_line(c, {"ok": False, "error": "this exec has no terminal and no open "
                                "stdin; follow its output with `tether logs -f`"})
            return
        c.read_only = bool(cmd.get("read_only"))
        try:
            c.rows = max(0, min(int(cmd.get("rows") or 0), 65535))
            c.cols = max(0, min(int(cmd.get("cols") or 0), 65535))
            replay = max(0, min(int(cmd.get("replay", proto.DEFAULT_REPLAY)),
                                16 * proto.MAX_FRAME))
        except (ValueError, TypeError, OverflowError):
            self._send_line(c, {"ok": False, "error": "bad rows, cols or replay"})
            return
        self._send_line(c, {"ok": True, "exec": self.exec_id, "pid": self.pid, "tty": self.tty,
                            "client": c.id, "rows": self.rows, "cols": self.cols})
        c.mode = "attach"
        self._notify_watchers({"event": "attach", "client": c.id, "read_only": c.read_only,
                               "rows": c.rows, "cols": c.cols})
        if self.tty and replay:
            for chunk in self._tail(replay):
                c.replay_left += len(chunk) + proto.HEADER.size
                self._queue(c, frame(proto.DATA, chunk), replay=True)
        if c.fd not in self.clients:
            return
        if self.tty and not c.read_only:
            before = (self.rows, self.cols)
            self._make_active(c)
            if (self.rows, self.cols) == before:
                self._redraw()

    def _tail(self, nbytes: int) -> list[bytes]:
        size = os.fstat(self.pty_log).st_size
        start = max(0, size - nbytes)
        chunks = []
        with open(self.paths["pty"], "rb") as f:
            f.seek(start)
            while start < size:
                data = f.read(min(proto.MAX_FRAME, size - start))
                if not data:
                    break
                start += len(data)
                chunks.append(data)
        return chunks

    # -------------------------------------------------------------- end
    def _finish(self, status: tuple[int | None, int | None]) -> int:
        if self.master >= 0 and self.master in self.fds:
            self._pty_readable()  # what the program wrote just before it ended
        code, sig = status
        outcome = self.cancel["outcome"] if self.cancel else "exited"
        record = {"exit_code": code, "signal": sig, "ended_at": time.time(),
                  "started_at": self.started_at, "outcome": outcome,
                  "reason": (self.cancel or {}).get("reason") or None}
        if outcome == "timeout":
            record["reason"] = f"timeout after {self.spec.get('timeout')}s"
        write_exit(self.paths["exit"], record)
        exit_frame = frame(proto.EXIT, json.dumps(record).encode())
        for c in list(self.clients.values()):
            # Control connections are request/reply: they only see their own replies.
            last = {"attach": exit_frame,
                    "watch": (json.dumps({"event": "exit", **record}) + "\n").encode(),
                    }.get(c.mode, b"")
            pending = b"".join(c.out)[c.out_off:] + last
            try:
                c.sock.settimeout(1.0)
                c.sock.sendall(pending)
            except OSError:
                pass
            c.sock.close()
        try:
            os.unlink(self.paths["socket"])
        except OSError:
            pass
        return 0


def main() -> int:
    try:
        spec = _read_spec()
    except (ValueError, OSError) as e:
        _report({"error": f"bad spec: {e}", "code": "BAD_SPEC"})
        return 2
    if spec is None:
        return 0  # pooled monitor whose daemon went away
    return Monitor(spec).start()


if __name__ == "__main__":
    sys.exit(main())
