"""The monitor process. Run as ``python -I -S .../tether/monitor/main.py``.

Life of a monitor (no asyncio; one ``epoll`` loop):

1. Read one JSON spec line from stdin. A pooled monitor waits here until the
   daemon hands it an exec; EOF (the daemon died) means exit quietly.
2. Claim the exec (``O_EXCL`` claim file, ``flock`` held for life). If a
   recovering daemon claimed it first, start nothing.
3. Start the child with ``posix_spawnp`` in its own process group, its stdout
   and stderr *being* the log files: no byte passes through any tether process.
4. Write the handles file, report ``{"pid": ...}`` on stdout, close both pipes:
   from here on the daemon may die at any moment without affecting us.
5. Serve the control socket (cancel/ping), enforce the timeout, and when the
   child ends write the exit file (atomic, fsynced) and exit.
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
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tether.monitor import tinyjson as json  # noqa: E402
from tether.monitor.files import (  # noqa: E402
    claim,
    proc_start_time,
    write_exit,
    write_handles,
)

_VALID_SIGNALS = set(range(1, signal.NSIG))

# Signals a child must start with default dispositions (Python ignores SIGPIPE
# and SIGXFSZ; a daemon started under nohup ignores SIGHUP).
_RESET_SIGNALS = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                  signal.SIGTERM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD,
                  signal.SIGUSR1, signal.SIGUSR2}
MAX_CONTROL_LINE = 64 * 1024


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


class Monitor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.exec_id: str = spec["exec_id"]
        self.paths: dict[str, str] = spec["paths"]
        self.poll = select.epoll()
        self.fds: dict[int, Any] = {}  # fd -> "wake" | "listen" | client socket
        self.pid = 0
        self.started_at = 0.0
        self.cancel: dict[str, Any] | None = None  # {"reason", "signal", "kill_at"}
        self.deadline: float | None = None
        self.clients: dict[int, bytes] = {}
        self.listener: socket.socket | None = None

    # -------------------------------------------------------------- start
    def start(self) -> int:
        fd = claim(self.paths["claim"], f"monitor {os.getpid()}\n")
        if fd is None:
            _report({"error": "exec was already claimed (a recovering daemon failed it)",
                     "code": "CLAIMED"})
            return 3
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by our exit; tells the daemon we live
        self._claim_fd = fd

        log = os.open(self.paths["monitor_log"],
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.dup2(log, 2)
        os.close(log)

        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out = os.open(self.paths["stdout"], flags, 0o600)
        err = os.open(self.paths["stderr"], flags, 0o600)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

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
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self._wake_r = rfd

        argv: list[str] = self.spec["argv"]
        env: dict[str, str] = self.spec["env"]
        try:
            if self.spec.get("cwd"):
                os.chdir(self.spec["cwd"])
            self.pid = os.posix_spawnp(
                argv[0], argv, env,
                file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out, 1),
                              (os.POSIX_SPAWN_DUP2, err, 2)],
                setpgroup=0, setsigmask=(), setsigdef=_RESET_SIGNALS,
            )
        except OSError as e:
            what = {errno.ENOENT: "command not found", errno.EACCES: "permission denied",
                    errno.ENOTDIR: "not a directory"}.get(e.errno or 0, e.strerror or str(e))
            where = argv[0]
            if self.spec.get("cwd") and not os.path.isdir(self.spec["cwd"]):
                what, where = "working directory does not exist", self.spec["cwd"]
            msg = f"{what}: {where}"
            now = time.time()
            write_exit(self.paths["exit"], {"exit_code": 127, "signal": None, "ended_at": now,
                                            "started_at": None, "outcome": "start_failed",
                                            "reason": msg})
            _report({"error": msg, "code": "START_FAILED"})
            return 0
        finally:
            os.close(out)
            os.close(err)
            os.close(null)
        self.started_at = time.time()
        start_time = proc_start_time(self.pid)
        me = {"pid": os.getpid(), "start_time": proc_start_time(os.getpid())}
        write_handles(self.paths["handles"], {
            "exec": self.exec_id, "monitor": me,
            "child": {"pid": self.pid, "pgid": self.pid, "start_time": start_time},
            "socket": self.paths["socket"], "started_at": self.started_at,
        })
        timeout = self.spec.get("timeout")
        if timeout:
            self.deadline = time.monotonic() + float(timeout)
        _report({"pid": self.pid, "start_time": start_time, "started_at": self.started_at,
                 "monitor": me})
        _detach_pipes()
        return self.loop()

    # -------------------------------------------------------------- loop
    def loop(self) -> int:
        assert self.listener is not None
        self._register(self._wake_r, "wake")
        self._register(self.listener.fileno(), "listen")
        while True:
            status = self._poll_child()
            if status is not None:
                return self._finish(status)
            now = time.monotonic()
            timers = [t for t in (self.deadline,
                                  self.cancel["kill_at"] if self.cancel else None) if t]
            wait = max(0.0, min(timers) - now) if timers else -1
            try:
                ready = self.poll.poll(wait)
            except InterruptedError:
                ready = []
            for fd, _ in ready:
                what = self.fds.get(fd)
                if what == "wake":
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                elif what == "listen":
                    self._accept()
                elif what is not None:
                    self._client_readable(what)
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline and self.cancel is None:
                self._begin_cancel("timeout", signal.SIGTERM,
                                   float(self.spec.get("kill_grace", 5.0)))
            if self.cancel and self.cancel["kill_at"] and now >= self.cancel["kill_at"]:
                self._killpg(signal.SIGKILL)
                self.cancel["kill_at"] = None

    def _register(self, fd: int, what: Any) -> None:
        self.fds[fd] = what
        self.poll.register(fd, select.EPOLLIN)

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
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return (None, os.WTERMSIG(status))
        return (os.WEXITSTATUS(status), None)

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _begin_cancel(self, outcome: str, sig: int, grace: float, reason: str = "") -> None:
        if self.cancel is None:
            self.cancel = {"outcome": outcome, "signal": int(sig), "reason": reason,
                           "kill_at": time.monotonic() + max(0.0, grace)}
        elif grace < 0.001 or sig == signal.SIGKILL:
            self.cancel["kill_at"] = time.monotonic()
        self._killpg(sig)

    # -------------------------------------------------------------- control socket
    def _accept(self) -> None:
        assert self.listener is not None
        try:
            fd, _ = self.listener._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
        os.set_inheritable(fd, False)
        conn.setblocking(False)
        self.clients[fd] = b""
        self._register(fd, conn)

    def _drop(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        self.poll.unregister(fd)
        self.fds.pop(fd, None)
        self.clients.pop(fd, None)
        conn.close()

    def _client_readable(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        buf = self.clients[conn.fileno()] + chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            self._send(conn, self._command(line))
        if len(buf) > MAX_CONTROL_LINE:
            self._drop(conn)
            return
        self.clients[conn.fileno()] = buf

    def _send(self, conn: socket.socket, reply: dict[str, Any]) -> None:
        try:
            conn.settimeout(1.0)
            conn.sendall((json.dumps(reply) + "\n").encode())
            conn.setblocking(False)
        except OSError:
            pass

    def _command(self, line: bytes) -> dict[str, Any]:
        try:
            cmd = json.loads(line)
            op = cmd["op"]
        except (ValueError, KeyError, TypeError):
            return {"ok": False, "error": "bad command"}
        if op == "ping":
            return {"ok": True, "pid": self.pid, "exec": self.exec_id}
        if op == "cancel":
            try:
                sig = int(cmd.get("signal", signal.SIGTERM))
                grace = float(cmd.get("grace", 5.0))
            except (ValueError, TypeError):
                return {"ok": False, "error": "bad signal or grace"}
            if sig not in _VALID_SIGNALS:
                return {"ok": False, "error": f"bad signal {sig}"}
            self._begin_cancel("cancelled", sig, grace, str(cmd.get("reason", "")))
            return {"ok": True}
        if op == "signal":
            try:
                sig = int(cmd["signal"])
            except (ValueError, TypeError, KeyError):
                return {"ok": False, "error": "bad signal"}
            if sig not in _VALID_SIGNALS:
                return {"ok": False, "error": f"bad signal {sig}"}
            self._killpg(sig)
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # -------------------------------------------------------------- end
    def _finish(self, status: tuple[int | None, int | None]) -> int:
        code, sig = status
        outcome = self.cancel["outcome"] if self.cancel else "exited"
        record = {"exit_code": code, "signal": sig, "ended_at": time.time(),
                  "started_at": self.started_at, "outcome": outcome,
                  "reason": (self.cancel or {}).get("reason") or None}
        if outcome == "timeout":
            record["reason"] = f"timeout after {self.spec.get('timeout')}s"
        write_exit(self.paths["exit"], record)
        for fd in list(self.clients):
            conn = self.fds[fd]
            self._send(conn, {"event": "exit", **record})
            self._drop(conn)
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
