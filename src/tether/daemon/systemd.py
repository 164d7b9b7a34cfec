"""systemd's notify protocol (``Type=notify``): READY=1 once serving, WATCHDOG=1 at half
the unit's ``WatchdogSec`` while the event loop runs, STOPPING=1 when a stop begins.

Spoken by hand (one datagram to ``$NOTIFY_SOCKET``), so there is no dependency on
libsystemd. Without ``$NOTIFY_SOCKET`` every call is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Mapping


def notify(state: str) -> None:
    """Tell systemd our state, if it asked (``$NOTIFY_SOCKET``; ``@`` = abstract)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(state.encode(), addr)


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of ``$WATCHDOG_USEC``), or None when the
    unit has no watchdog or it is meant for another process (``$WATCHDOG_PID``)."""
    usec = env.get("WATCHDOG_USEC", "")
    owner = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (owner and owner != str(pid)):
        return None
    return int(usec) / 2 / 1_000_000


async def watchdog(interval: float) -> None:
    """Forever: ping the watchdog. It runs on the daemon's loop, so a loop that hangs
    stops the pings and systemd restarts the daemon (``Restart=on-failure``)."""
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval)
