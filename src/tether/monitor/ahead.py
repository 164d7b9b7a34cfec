"""An exec's files made before it arrives, by an idle monitor (pooled or a zygote): each
is then named with one ``link`` or ``rename`` instead of being made on the start path.

The daemon gives an idle monitor ``{"ahead": {"run", "logs"}}`` (a zygote: its ``run``
and ``dir``). The monitor makes, unnamed (``O_TMPFILE``, so that a killed monitor leaves
nothing): the claim (``flock``-ed, its owner written), its own log and the handles file
in ``run``; the exit file's reservation in ``logs``; and its socket, bound, 0600 and
listening as ``run/z/<pid>.sock`` (a killed monitor's is removed by the daemon when it
reaps it). It also reads its own kernel start time and the boot id. When the exec
arrives: the claim is linked as the exec's (it fails if the exec is claimed already, as a
cold claim's link does), the socket renamed, the handles file written then linked, the log
named just after the gate opens, the exit reservation named as the exit file once the
status is written (:func:`tether.monitor.files.write_exit`).

Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import os

from tether.hostio.proc import boot_id, proc_start_time
from tether.monitor.clients import listening
from tether.monitor.files import EXIT_RESERVE, claim_unnamed, name, unnamed, unnamed_claim

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any


#: The directory under ``run`` where idle monitors listen before their exec arrives.
SOCKETS_AHEAD = "z"


def socket_tmp(run_dir: str, pid: int) -> str:
    """Where idle monitor ``pid`` listens before its exec arrives (no longer than an
    exec's socket path: it never fails for the path's length where an exec's would not)."""
    return f"{run_dir}/{SOCKETS_AHEAD}/{pid}.sock"


class Ahead:
    """The files, made ahead; each ``take``/``claim`` hands one over exactly once."""

    def __init__(self, run: str, logs: str) -> None:
        self.run, self.logs = run, logs
        self.fds: dict[str, int] = {}
        self.listener: Any = None  # (socket, its temporary name)
        self.known: dict[str, Any] = {}  # the monitor's start time, the boot id

    def prepare(self) -> None:
        """Make them. Raises OSError (ENOSPC: none is kept; the exec's start makes them)."""
        d = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
        fds = self.fds
        fds["rundir"] = os.open(self.run, d)
        fds["logdir"] = os.open(self.logs, d)
        fds["exit"] = unnamed(fds["logdir"], EXIT_RESERVE)
        fds["claim"] = unnamed_claim(fds["rundir"], f"monitor {os.getpid()}\n")
        fds["mlog"] = unnamed(fds["rundir"])
        fds["handles"] = unnamed(fds["rundir"])
        tmp = socket_tmp(self.run, os.getpid())
        try:
            os.mkdir(os.path.dirname(tmp), 0o700)
        except FileExistsError:
            pass
        try:
            os.unlink(tmp)  # a killed monitor's, whose pid this is now
        except FileNotFoundError:
            pass
        self.listener = (listening(tmp), tmp)
        self.known = {"monitor": proc_start_time(os.getpid()), "boot_id": boot_id()}

    def fits(self, paths: dict[str, str]) -> bool:
        """Whether the exec's files can be named from these: the same directory for its
        claim, log, handles and socket; the same filesystem for its exit file."""
        if "handles" not in self.fds or any(
                os.path.dirname(paths[k]) != self.run
                for k in ("claim", "monitor_log", "handles", "socket")):
            return False
        try:
            return os.stat(os.path.dirname(paths["exit"])).st_dev == os.fstat(
                self.fds["exit"]).st_dev
        except OSError:
            return False

    def claim(self, path: str) -> int | None:
        """Name the claim ``path`` (still locked): its fd, or None if the exec is claimed
        already. Raises OSError."""
        fd = self.fds.pop("claim")
        return fd if claim_unnamed(fd, path, self.fds["rundir"]) else None

    def monitor_log(self) -> int:
        return self.fds["mlog"]

    def name_monitor_log(self, path: str) -> None:
        """Give the log its name (once the command runs: nothing reads it before)."""
        fd = self.fds.pop("mlog", None)
        if fd is not None:
            try:
                name(fd, os.path.basename(path), self.fds["rundir"])
            finally:
                os.close(fd)

    def handles_file(self) -> tuple[int, int]:
        """The handles file, unnamed, and its directory."""
        return self.fds["handles"], self.fds["rundir"]

    def take_listener(self) -> Any:
        """The exec's socket, listening under its temporary name."""
        ready, self.listener = self.listener, None
        return ready

    def take_exit_reservation(self) -> int:
        return self.fds.pop("exit")

    def discard(self) -> None:
        """Close what is left (unnamed files vanish) and remove the socket's name."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        if self.listener is not None:
            self.listener[0].close()
            try:
                os.unlink(self.listener[1])
            except OSError:
                pass
            self.listener = None
