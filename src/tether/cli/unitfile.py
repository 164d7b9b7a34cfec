"""``tether daemon install|uninstall``: the daemon as a systemd service.

The unit is ``Type=notify`` (the daemon sends READY=1 once serving, WATCHDOG=1 at half of
``WatchdogSec``, STOPPING=1 when it stops: ``daemon/systemd.py``) with
``KillMode=process``: a stop or restart signals the daemon alone, so the execs and their
monitors, which live in the unit's cgroup, keep running and the next daemon re-adopts them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

WATCHDOG_SEC = 30


def unit_path(scope: str, name: str) -> Path:
    if scope == "system":
        return Path("/etc/systemd/system") / f"{name}.service"
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user" / f"{name}.service"


def render(scope: str, home: Path, *, python: str = sys.executable) -> str:
    """The unit file's text. A system unit runs as the user who installs it (unless
    that is root), on that user's tether home."""
    user = ""
    if scope == "system" and os.getuid() != 0:
        pw = pwd.getpwuid(os.getuid())
        user = f"User={pw.pw_name}\nGroup={pw.pw_gid}\n"
    wanted = "multi-user.target" if scope == "system" else "default.target"
    return f"""\
[Unit]
Description=tether: a durable supervisor for AI coding agents ({home})
After=network.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={_quote(python)} -m tether.daemon --home {_quote(str(home))}
{user}# Only the daemon is signalled on stop and restart: the execs and their monitors run
# on, and the next daemon re-adopts them.
KillMode=process
Restart=on-failure
RestartSec=2
WatchdogSec={WATCHDOG_SEC}
TimeoutStopSec=30

[Install]
WantedBy={wanted}
"""


def _quote(arg: str) -> str:
    """A command-line word as systemd reads it (quoted when it has spaces or quotes)."""
    if arg and not any(c in arg for c in " \t\"'\\$%;"):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return f'"{escaped}"'


def systemctl(scope: str, *args: str) -> str | None:
    """Run ``systemctl [--user] ARGS``; None when it worked, else why not (best effort:
    the unit file is what matters, and systemctl may be absent or have no manager)."""
    exe = shutil.which("systemctl")
    if exe is None:
        return "systemctl is not installed"
    argv = [exe, *(["--user"] if scope == "user" else []), *args]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if p.returncode == 0 else (p.stderr.strip() or f"exit {p.returncode}")
