"""Finding the daemon's socket, and starting a daemon in the background when none answers
(the way Docker Desktop or banger auto-start theirs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tether.model.layout import HomeLayout, default_home


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser().absolute() if home else default_home()


def spawn_daemon(home: Path) -> subprocess.Popen[bytes]:
    """Start ``tether daemon`` detached, logging to ``daemon.log``."""
    layout = HomeLayout(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    logf = os.open(layout.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.daemon", "--home", str(home)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
            close_fds=True, cwd="/",
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
