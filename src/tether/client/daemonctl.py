"""Finding the daemon's socket, starting a daemon in the background when none answers
(the way Docker Desktop or banger auto-start theirs), and stopping it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tether.client.errors import DaemonUnavailable, HomeUntrusted
from tether.hostio.proc import is_running
from tether.hostio.trust import UntrustedHome, check_home, open_private
from tether.model.layout import HOME_LOCKED_EXIT, HomeLayout, default_home

if TYPE_CHECKING:
    import subprocess


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser().absolute() if home else default_home()


def trusted(home: Path) -> None:
    """Raise ``HomeUntrusted`` unless only we can write ``home`` and the directories
    above it: before starting a daemon there, connecting to its socket or signalling
    the pid its lock file names."""
    try:
        check_home(home)
    except UntrustedHome as e:
        raise HomeUntrusted(str(e), e.path) from None


def usable(home: Path) -> None:
    """Raise ``DaemonUnavailable`` when ``home``'s sockets cannot exist (their paths too
    long for ``sun_path``): no daemon can ever answer there, so say why at once instead of
    waiting out the reconnect budget for one (the connect fails with "AF_UNIX path too
    long", which is not a refusal, so no daemon would even be started)."""
    problem = HomeLayout(home).socket_path_problem()
    if problem is not None:
        raise DaemonUnavailable(problem)


def spawn_daemon(home: Path) -> subprocess.Popen[bytes]:
    """Start ``tether daemon`` detached, logging to ``daemon.log``."""
    import subprocess  # only here: every command and hook call imports this module

    layout = HomeLayout(home)
    trusted(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        logf = open_private(layout.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except OSError as e:
        raise DaemonUnavailable(f"cannot open the daemon's log: {e}") from None
    try:
        # A daemon a client starts is this machine's own: never a fleet host because the
        # client's shell names a fleet (``tether daemon`` joins one on purpose).
        env = {k: v for k, v in os.environ.items()
               if k not in ("TETHER_FLEET_URL", "TETHER_FLEET_URL_FILE")}
        return subprocess.Popen(
            [sys.executable, "-m", "tether.daemon", "--home", str(home)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
            close_fds=True, cwd="/", env=env,
        )
    finally:
        os.close(logf)


def daemon_failure(layout: HomeLayout, proc: subprocess.Popen[bytes]) -> str:
    """A message for an auto-started daemon that exited: its last log lines."""
    try:
        tail = layout.log_file.read_text(errors="replace").strip().splitlines()[-3:]
    except OSError:
        tail = []
    said = ("; it said: " + " | ".join(tail)) if tail else ""
    return (f"the tether daemon started for {layout.root} exited with status "
            f"{proc.returncode}{said} (full log: {layout.log_file})")


class Autostart:
    """One client's auto-start of its home's daemon, across start races.

    The daemon we start may find the home locked (it exits ``HOME_LOCKED_EXIT``): the
    holder is either starting, and will answer, or stopping after a graceful stop, and
    then the next refusal starts another daemon. Any other exit is a real failure.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.layout = HomeLayout(home)
        self._proc: subprocess.Popen[bytes] | None = None

    def refused(self) -> None:
        """Nobody answers on the socket: start a daemon unless ours is still on its way."""
        if self._proc is None:
            self._proc = spawn_daemon(self.home)

    def check(self) -> None:
        """Raise ``DaemonUnavailable`` when the daemon we started failed for good."""
        proc = self._proc
        if proc is None or proc.poll() in (None, 0):
            return
        if proc.returncode != HOME_LOCKED_EXIT:
            raise DaemonUnavailable(daemon_failure(self.layout, proc))
        holder = self.layout.lock_holder()
        if holder is None or not is_running(holder):
            self._proc = None  # the holder is gone since: the next refusal starts another

    def forget(self) -> None:
        """The connection was lost: a later refusal may start a daemon again."""
        self._proc = None

    def why(self) -> str:
        """What to tell the user when no daemon answered in time."""
        if self._proc is not None and self._proc.poll() == HOME_LOCKED_EXIT:
            return daemon_failure(self.layout, self._proc)
        return f"see {self.layout.log_file}"


def stop(home: Path, timeout: float = 30.0) -> int | None:
    """Stop the daemon holding ``home`` gracefully (SIGTERM: running execs keep running)
    and wait until it has let go of the home. Returns its pid, or ``None`` when no daemon
    was running; raises ``TimeoutError`` when it still holds the home after ``timeout``.
    Works without the socket: the daemon is found by the pid in its lock file."""
    trusted(home)
    layout = HomeLayout(home)
    pid = layout.lock_holder()
    if pid is None:
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if layout.lock_holder() != pid:
            return pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        time.sleep(0.05)
    raise TimeoutError(f"daemon {pid} did not stop within {timeout}s")
