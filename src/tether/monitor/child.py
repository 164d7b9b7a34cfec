"""The monitor's child: spawning it, signalling it, its timeout and kill grace, reaping it.

Standard library only, and low-level modules on purpose (see :mod:`tether.monitor.main`).
The child's stdio is the terminal's business (:mod:`tether.monitor.terminal`): ``spawn``
takes the file actions it prepared.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import errno
import os
import sys
import time

from tether.monitor.dispositions import RESET_SIGNALS

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any


#: Every command starts behind this gate, reading fd 3 (``pin.GATE_FD``): the monitor
#: opens it (one line) only once the handles file and its start report are out, so a
#: command never runs untracked. A monitor killed before that closes the pipe; the gate
#: reads EOF and exits without running the command (the process dies with its monitor,
#: which ``posix_spawn`` cannot arrange with ``PR_SET_PDEATHSIG``). ``exec`` keeps the
#: pid, so the handles name the command itself. A ``gated`` launch (bwrap) carries its
#: own gate, inside the sandbox: then the argv is spawned as it is.
START_GATE = ["/bin/sh", "-c", 'read -r _ <&3 || exit 125; exec "$@" 3<&-', "sh"]


def resolve_command(name: str, env: dict[str, str]) -> str:
    """``name`` looked up in the *exec's* PATH (posix_spawnp would use ours); a path is
    checked here too, for the gate's ``exec`` would fail only after the start."""
    if "/" in name:
        if not os.path.exists(name):
            raise FileNotFoundError(errno.ENOENT, "command not found", name)
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise PermissionError(errno.EACCES, "permission denied", name)
        return name
    for d in env.get("PATH", os.defpath).split(":"):
        path = os.path.join(d or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, "command not found", name)


#: How long a docker exec's client may take to report its command's end after a SIGKILL
#: was sent into the container, before it is killed too (a hung engine cannot keep the
#: exec alive longer).
CLIENT_GRACE = 2.0


class Child:
    """The one process the monitor runs (its process group), and its signal helpers."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.pid = 0
        self.started_at = 0.0
        self.cancel: dict[str, Any] | None = None  # {"outcome", "signal", "reason", "kill_at"}
        self.deadline: float | None = None
        self.may_have_ended = True  # set by SIGCHLD; saves a waitid per wake-up
        self.helpers: set[int] = set()  # signal helpers still to be reaped
        self.group: int | None = None  # the command's own group, below the child (bwrap)
        self.pin: Any = None  # its monitor.pin.Pin, when gated: the group as it is now
        # A docker exec's client, after a SIGKILL sent into the container: killed too if
        # it has not ended by then (it reports the command's own status when it can).
        self.kill_client_at: float | None = None

    # -------------------------------------------------------------- start
    def spawn(self, actions: list[tuple[Any, ...]], setsid: bool) -> None:
        """Start the command, behind its gate (``START_GATE``), in its own process group
        (a new session on a terminal); ``actions`` put the gate's pipe on fd 3.

        Raises OSError if it cannot be started (see :meth:`start_failed`): the command
        is looked up here, so that a missing one fails the start, not the gate."""
        engine = self.spec.get("engine")
        if engine is not None:  # a docker exec: our own Engine API client, forked
            from tether.monitor import dockerexec  # only docker execs' monitors load it

            self.pid = dockerexec.spawn_client(engine, actions, setsid,
                                               tty=bool(self.spec.get("tty")),
                                               stdin=bool(self.spec.get("stdin")),
                                               size=(int(self.spec.get("rows") or 24),
                                                     int(self.spec.get("cols") or 80)))
            return
        argv: list[str] = self.spec["argv"]
        env: dict[str, str] = self.spec["env"]
        if self.spec.get("cwd"):
            os.chdir(self.spec["cwd"])
        spawn_kw: dict[str, Any] = {"setsid": True} if setsid else {"setpgroup": 0}
        path = resolve_command(argv[0], env)
        if not self.spec.get("gated"):
            path, argv = START_GATE[0], [*START_GATE, *argv]
        # The command's umask is its user's (the spec's), the monitor's stays private:
        # posix_spawn has no umask attribute, so ours is the child's for this one call.
        mask = os.umask(int(self.spec.get("umask", 0o022)))
        try:
            self.pid = os.posix_spawn(path, argv, env, file_actions=actions, setsigmask=(),
                                      setsigdef=RESET_SIGNALS, **spawn_kw)
        finally:
            os.umask(mask)

    def start_failed(self, e: OSError) -> tuple[str, dict[str, Any]]:
        """The message and the exit record for a command that could not be started."""
        if self.spec.get("engine") is not None and not isinstance(e.errno, int):
            # dockerd refused the exec (no such container, not running) or is unreachable
            status = getattr(e, "status", 0)
            msg = f"dockerd refused the exec: {e}" if status else str(e)
            return msg, {"exit_code": 127, "signal": None, "ended_at": time.time(),
                         "started_at": None, "outcome": "start_failed", "reason": msg}
        what = {errno.ENOENT: "command not found", errno.EACCES: "permission denied",
                errno.ENOTDIR: "not a directory"}.get(e.errno or 0, e.strerror or str(e))
        where = self.spec["argv"][0]
        if self.spec.get("cwd") and not os.path.isdir(self.spec["cwd"]):
            what, where = "working directory does not exist", self.spec["cwd"]
        msg = f"{what}: {where}"
        return msg, {"exit_code": 127, "signal": None, "ended_at": time.time(),
                     "started_at": None, "outcome": "start_failed", "reason": msg}

    def never_let_start(self, why: BaseException) -> dict[str, Any]:
        """End a child whose gate the monitor will not open (it could not record the
        start); the exit record saying so. Its gate is closed already, so the command
        never ran; SIGKILL in case the gate has not even been reached.

        Raises OSError if it cannot be reaped."""
        self.killpg(signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return {"exit_code": None, "signal": None, "ended_at": time.time(),
                "started_at": None, "outcome": "start_failed",
                "reason": f"the monitor could not record the command's start ({why!r}); "
                          "the command was never started"}

    def start_timeout(self) -> None:
        timeout = self.spec.get("timeout")
        if timeout:
            self.deadline = time.monotonic() + float(timeout)

    # -------------------------------------------------------------- timers
    def wait_time(self) -> float:
        """How long the loop may sleep before a timer of ours is due."""
        now = time.monotonic()
        timers = [t for t in (self.deadline, self.kill_client_at,
                              self.cancel["kill_at"] if self.cancel else None) if t]
        # Capped: epoll cannot wait longer than ~24.8 days, and the loop recomputes.
        return min(3600.0, max(0.0, min(timers) - now)) if timers else 3600.0

    def run_timers(self) -> None:
        """The timeout (SIGTERM, then SIGKILL after the kill grace) and a cancel's grace."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline and self.cancel is None:
            self.begin_cancel("timeout", signal.SIGTERM,
                              float(self.spec.get("kill_grace", 5.0)))
        if self.cancel and self.cancel["kill_at"] and now >= self.cancel["kill_at"]:
            self.signal(signal.SIGKILL)
            self.cancel["kill_at"] = None
        if self.kill_client_at is not None and now >= self.kill_client_at:
            self.kill_client_at = None
            self.killpg(signal.SIGKILL)

    # -------------------------------------------------------------- end
    def poll(self) -> tuple[int | None, int | None] | None:
        """(exit code, signal) once the child has ended and been reaped, else None."""
        if not self.may_have_ended:
            return None
        self.may_have_ended = False
        if self.helpers:
            self.reap_helpers()
        # Observe the exit without reaping, so the pgid cannot be reused while we
        # SIGKILL the rest of a cancelled group; then reap.
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return (None, None)
        if info is None:
            return None
        # A docker exec's client killed by someone else leaves its command running in
        # the container, where nobody could record its end: it goes too.
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        if self.cancel is not None or (killed and self.spec.get("engine") is not None):
            self.killpg(signal.SIGKILL)
            if self.signal_inside(signal.SIGKILL):  # what the client left running there
                self.wait_helpers(2.0)  # done before the exit file says it ended
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return (None, os.WTERMSIG(status))
        return (os.WEXITSTATUS(status), None)

    def exit_record(self, status: tuple[int | None, int | None]) -> dict[str, Any]:
        code, sig = status
        outcome = self.cancel["outcome"] if self.cancel else "exited"
        record = {"exit_code": code, "signal": sig, "ended_at": time.time(),
                  "started_at": self.started_at, "outcome": outcome,
                  "reason": (self.cancel or {}).get("reason") or None}
        if outcome == "timeout":
            record["reason"] = f"timeout after {self.spec.get('timeout')}s"
        return record

    # -------------------------------------------------------------- signals
    def killpg(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to what the exec runs. When the child only drives the command
        elsewhere (a docker exec's client), a helper delivers it there
        (:meth:`signal_inside`); SIGKILL also ends the client (a ``docker exec`` at once,
        our own client after ``CLIENT_GRACE`` unless it has reported the command's end),
        so a hung engine cannot keep the exec alive. When the
        command runs in a group of its own below the child (``group``: bwrap's
        ``--new-session``), the signal goes to that group, as the process runtime's does;
        SIGKILL to the child's too. That group is looked up again (``Pin.group_now``):
        a terminal's shell leaves bwrap's group for one of its own."""
        group = (self.pin.group_now() if self.pin is not None else None) or self.group
        if group is not None and group != self.pid:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
            if sig != signal.SIGKILL:
                return
        if self.signal_inside(sig):
            if sig != signal.SIGKILL:
                return
            if self.spec.get("engine") is not None:  # our client: it reports the status
                if self.kill_client_at is None:
                    self.kill_client_at = time.monotonic() + CLIENT_GRACE
                return
        self.killpg(sig)

    def signal_inside(self, sig: int) -> bool:
        """When the child only drives the command elsewhere (a docker exec), deliver
        ``sig`` there through a helper; whether it did."""
        engine = self.spec.get("engine")
        if engine is not None:
            from tether.monitor import dockerexec

            try:
                self.helpers.add(dockerexec.spawn_helper(
                    engine["host"], engine["container"], [*engine["signal"], str(int(sig))]))
            except OSError as e:
                sys.stderr.write(f"monitor: signal helper failed: {e}\n")
            return True
        helper = self.spec.get("signal_argv")
        if helper:
            self.spawn_helper([*helper, str(int(sig))])
            return True
        return False

    def begin_cancel(self, outcome: str, sig: int, grace: float, reason: str = "") -> None:
        kill_at = time.monotonic() + (0.0 if sig == signal.SIGKILL else max(0.0, grace))
        if self.cancel is None:
            self.cancel = {"outcome": outcome, "signal": int(sig), "reason": reason,
                           "kill_at": kill_at}
        elif self.cancel["kill_at"] is not None:
            self.cancel["kill_at"] = min(self.cancel["kill_at"], kill_at)  # sooner wins
        self.signal(sig)

    def spawn_helper(self, argv: list[str]) -> None:
        env: dict[str, str] = self.spec["env"]
        try:
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                pid = os.posix_spawn(resolve_command(argv[0], env), argv, env,
                                     file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                                   (os.POSIX_SPAWN_DUP2, 2, 1)],
                                     setpgroup=0, setsigdef=RESET_SIGNALS)
            finally:
                os.close(null)
        except OSError as e:
            sys.stderr.write(f"monitor: signal helper {argv[0]} failed: {e}\n")
            return
        self.helpers.add(pid)

    def wait_helpers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.helpers and time.monotonic() < deadline:
            self.reap_helpers()
            if self.helpers:
                time.sleep(0.02)

    def reap_helpers(self) -> None:
        for pid in list(self.helpers):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.helpers.discard(pid)
