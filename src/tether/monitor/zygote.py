"""A zygote: a sandbox started before its exec, in an idle monitor, so an exec's start
skips the sandbox's set-up (bubblewrap's namespaces and mounts: most of a bwrap start).

The daemon pre-starts a monitor with a ``{"zygote": {"argv", "dir"}}`` line: the monitor
spawns ``argv`` (bwrap, its sandbox arguments, then :data:`STUB`) at once, its stdout and
stderr unnamed files (``O_TMPFILE``) in the sandbox's log directory, its stdin
``/dev/null``, and pins the stub (:class:`~tether.monitor.pin.Pin`) while it waits. The
stub reads a shell function from fd 4 (:data:`SCRIPT_FD`), then the gate line from fd 3,
and only then runs the function: ``cd`` to the exec's directory, ``exec env -i`` the
exec's environment, then ``sh`` the command (as a cold gate does), so the command keeps
the stub's pid, process group and session. When the exec arrives (the next spec line,
with ``warm``), the monitor links the files under the exec's log names, writes the
function, and goes on exactly as for a cold start: handles, start report, then the gate.
Anything amiss (the stub gone, a link refused) and the zygote is discarded and the exec
starts cold. EOF on stdin (the daemon gone, or the sandbox stopped or deleted) kills the
zygote's process group; a killed monitor takes it along (``--die-with-parent``, and the
gate reads EOF).

Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import fcntl
import os

from tether.hostio.proc import proc_start_time
from tether.monitor.dispositions import RESET_SIGNALS
from tether.monitor.pin import GATE_FD, Pin

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

#: The fd the stub reads its command from (a shell function, ``tether_run``).
SCRIPT_FD = 4
#: What a zygote's sandbox runs until its exec arrives: nothing runs before the gate
#: opens, and a partial function (the monitor killed while writing it) never runs.
#: The gate first: the monitor writes the function into the pipe before it opens the
#: gate, and the stub, asleep on the gate, does not wake to read it meanwhile.
STUB = ["/bin/sh", "-c", f"read -r _ <&{GATE_FD} && . /dev/fd/{SCRIPT_FD} && tether_run; "
        "exit 125", "tether-zygote"]
#: What sets the exec's environment, exactly, inside the sandbox.
ENV = "/usr/bin/env"
#: Then the command runs as behind a cold start's gate (``bwrap.GATE``): looked up in the
#: exec's ``PATH`` by the same shell, with the same environment (the shell adds ``PWD``).
EXEC = ["/bin/sh", "-c", 'exec "$@"', "sh"]


def _high(fd: int) -> int:
    """``fd`` moved above the fds the spawn's dup2s write (0 to 4)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return int(high)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def script(cwd: str, env: dict[str, str], argv: list[str], umask: int = 0o022) -> bytes:
    """The function the stub runs once the gate opens (a definition: no side effect). The
    stub was spawned with the monitor's umask: the exec's (its user's) is set here."""
    words = [ENV, "-i", "--", *(f"{k}={v}" for k, v in env.items()), *EXEC, *argv]
    return (f"tether_run() {{\numask {umask & 0o777:04o}\n"
            f"cd -- {_quote(cwd)} || exit 126\n"
            f"exec {' '.join(_quote(w) for w in words)} {GATE_FD}<&- {SCRIPT_FD}<&-\n}}\n"
            ).encode()


class Zygote:
    """The pre-started child, its pin, its unnamed log files and its two pipes (the exec's
    other files are made ahead too: :mod:`tether.monitor.ahead`)."""

    def __init__(self, prep: dict[str, Any]) -> None:
        self.argv: list[str] = prep["argv"]
        self.dir: str = prep["dir"]
        self.pid = 0
        self.pin = Pin()
        self.fds: dict[str, int] = {}
        self.known: dict[str, Any] = {}  # the stub's kernel start time, read ahead
        self.script_rest = b""  # what of the function the pipe had no room for yet

    def start(self) -> None:
        """Spawn the sandbox and pin its stub. Raises OSError (the zygote is unusable)."""
        flags = os.O_TMPFILE | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        fds = self.fds
        fds["out"] = _high(os.open(self.dir, flags, 0o600))
        fds["err"] = _high(os.open(self.dir, flags, 0o600))
        null = _high(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        gate_r, fds["gate"] = (_high(f) for f in os.pipe2(os.O_CLOEXEC))
        script_r, fds["script"] = (_high(f) for f in os.pipe2(os.O_CLOEXEC))
        actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, fds["out"], 1),
                   (os.POSIX_SPAWN_DUP2, fds["err"], 2), (os.POSIX_SPAWN_DUP2, gate_r, GATE_FD),
                   (os.POSIX_SPAWN_DUP2, script_r, SCRIPT_FD)]
        try:
            self.pid = os.posix_spawn(self.argv[0], self.argv, {}, file_actions=actions,
                                      setpgroup=0, setsigmask=(), setsigdef=RESET_SIGNALS)
        finally:
            for f in (null, gate_r, script_r):
                os.close(f)
        self.pin.find(self.pid)
        if self.pin.pidfd is None:
            raise OSError("the zygote's stub did not appear")
        self._prepare(fds)

    def _prepare(self, fds: dict[str, int]) -> None:
        """What the hand-off needs ready: the log directory, the stub's start time."""
        fds["logdir"] = os.open(self.dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.known = {"child": proc_start_time(self.pid)}

    def usable(self, warm: dict[str, Any] | None) -> bool:
        """Whether this zygote can run ``warm`` (the spec's): the same sandbox, alive."""
        if not self.pid or self.pin.pidfd is None or not warm or warm["argv"] != self.argv:
            return False
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def hand_off(self, paths: dict[str, str]) -> None:
        """Name the logs as the exec's. Raises OSError (then :meth:`discard`)."""
        # A directory fd makes os.link call linkat(AT_SYMLINK_FOLLOW): link(2) would link
        # the /proc symlink itself (EXDEV).
        d = self.fds["logdir"]
        names = [os.path.basename(paths[k]) for k in ("stdout", "stderr")]
        os.link(f"/proc/self/fd/{self.fds['out']}", names[0], dst_dir_fd=d)
        try:
            os.link(f"/proc/self/fd/{self.fds['err']}", names[1], dst_dir_fd=d)
        except OSError:
            os.unlink(names[0], dir_fd=d)
            raise
        for k in ("out", "err"):
            os.close(self.fds.pop(k))

    def send(self, warm: dict[str, Any], env: dict[str, str], umask: int = 0o022) -> int:
        """Write what the pipe holds of the command's function (the stub reads it only
        once the gate opens: :meth:`finish_script` writes the rest then); the gate's
        write end, for the monitor to open once the start is recorded. Raises OSError
        (the stub is gone)."""
        fd = self.fds["script"]
        os.set_blocking(fd, False)
        data = memoryview(script(warm["cwd"], env, warm["command"], umask))
        try:
            while data:
                data = data[os.write(fd, data):]
        except BlockingIOError:
            pass
        self.script_rest = bytes(data)
        return self.fds.pop("gate")

    def finish_script(self) -> None:
        """After the gate: the rest of the function, then EOF. A monitor killed meanwhile
        leaves a partial definition, which the shell refuses: the command never runs."""
        fd = self.fds.pop("script")
        try:
            os.set_blocking(fd, True)
            data = memoryview(self.script_rest)
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass  # the stub is gone: the loop reaps it and records how it ended
        finally:
            os.close(fd)

    def discard(self) -> None:
        """End the zygote: its process group, then reap it; close what is left."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

        if self.pin.pidfd is not None:
            os.close(self.pin.pidfd)
            self.pin.pidfd = None
        if self.pid:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0
