"""Where everything lives under the tether home (category C: derived from ids).

Pure functions only; nothing here touches the disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_SOCKET_PATH = 107
# A daemon that finds its home locked exits with this status (sysexits' EX_TEMPFAIL): the
# holder is starting, and will answer, or stopping, and a new start will then succeed.
HOME_LOCKED_EXIT = 75
# A daemon that refuses its home (another user could write it: ``hostio/trust.py``)
# exits with this status (sysexits' EX_NOPERM).
HOME_UNTRUSTED_EXIT = 77
# A daemon that refuses its store (corrupt, or missing while the home holds execs' files:
# ``daemon/lost_store.py``) exits with this status (sysexits' EX_DATAERR).
STORE_REFUSED_EXIT = 65


def default_home() -> Path:
    """``$TETHER_HOME``, else ``$XDG_STATE_HOME/tether``, else ``~/.local/state/tether``."""
    env = os.environ.get("TETHER_HOME")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "tether").absolute()


@dataclass(frozen=True)
class HomeLayout:
    root: Path

    @property
    def db(self) -> Path:
        return self.root / "tether.db"

    @property
    def socket(self) -> Path:
        return self.root / "tether.sock"

    @property
    def agent_dir(self) -> Path:
        """Bound into sandboxed agents. A directory, not the socket itself: a restarted
        daemon makes a new socket, which a bound file would never show."""
        return self.root / "agent"

    @property
    def agent_socket(self) -> Path:
        """Serves only the agent protocol (``daemon/api.py`` AGENT_METHODS)."""
        return self.agent_dir / "agent.sock"

    @property
    def pid_file(self) -> Path:
        return self.root / "daemon.pid"

    @property
    def lock_file(self) -> Path:
        return self.root / "daemon.lock"

    def lock_holder(self) -> int | None:
        """The pid the lock file names: the daemon holding the home, or one that died
        holding it (the kernel dropped its ``flock``; only a release empties the file)."""
        try:
            text = self.lock_file.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    @property
    def log_file(self) -> Path:
        return self.root / "daemon.log"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    def socket_path_problem(self) -> str | None:
        """Why this home cannot work, if its sockets' paths are too long for Unix sockets
        (the longest is a monitor's, ``run/<12 hex>.sock``), and what to do; else None."""
        longest = self.exec_paths("default", "0" * 12).socket
        size = len(os.fsencode(longest))
        if size <= MAX_SOCKET_PATH:
            return None
        room = MAX_SOCKET_PATH - (size - len(os.fsencode(self.root)))
        return (f"the tether home {self.root} is too long a path for its sockets: a Unix "
                f"socket's path has at most {MAX_SOCKET_PATH} bytes, and its exec sockets' "
                f"would have {size} ({longest}); use a home of at most {room} bytes with "
                "--home DIR or $TETHER_HOME (the default is ~/.local/state/tether)")

    def exec_paths(self, sandbox: str, exec_id: str) -> ExecPaths:
        logdir = self.logs / sandbox
        return ExecPaths(
            stdout=logdir / f"{exec_id}.stdout.log",
            stderr=logdir / f"{exec_id}.stderr.log",
            exit=logdir / f"{exec_id}.exit",
            pty=logdir / f"{exec_id}.pty.log",
            order=logdir / f"{exec_id}.order",
            handles=self.run / f"{exec_id}.handles.json",
            socket=self.run / f"{exec_id}.sock",
            claim=self.run / f"{exec_id}.claim",
            monitor_log=self.run / f"{exec_id}.monitor.log",
            events=self.run / f"{exec_id}.events.jsonl",
        )


@dataclass(frozen=True)
class ExecPaths:
    stdout: Path
    stderr: Path
    exit: Path
    pty: Path
    handles: Path
    socket: Path
    claim: Path
    monitor_log: Path
    #: the monitor's terminal events (attach, detach, resize), for a daemon that was not
    #: watching: one JSON line each, numbered as on its watch connection
    events: Path
    order: Path  # which of stdout and stderr was written when (monitor/order.py)

    def log(self, stream: str) -> Path:
        return {"stderr": self.stderr, "pty": self.pty}.get(stream, self.stdout)
