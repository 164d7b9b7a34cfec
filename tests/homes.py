"""Throw-away tether homes and what runs in them, for tests, benchmarks and the demo.

Homes live under /tmp with short names because a Unix socket path must fit in 108
bytes. Whatever a home's monitors and commands were, :func:`kill_strays` ends them —
identities checked by start time, so no reused pid is ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.hostio.proc import is_same_process


def new_home(prefix: str = "tt") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def remove_home(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)


def read_handles(home: Path) -> list[dict[str, Any]]:
    """Every readable handles file of a home (what its monitors wrote)."""
    out: list[dict[str, Any]] = []
    run = home / "run"
    if not run.exists():
        return out
    for h in run.glob("*.handles.json"):
        try:
            data = json.loads(h.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def _proxy(home: Path) -> tuple[int, int] | None:
    """The (pid, start time) ``egress/proxy.json`` names, if that process still runs."""
    try:
        info = json.loads((home / "egress" / "proxy.json").read_text())
        pid, st = int(info["pid"]), int(info["start_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, st) if is_same_process(pid, st) else None


def kill_strays(home: Path, *, wait: float = 0.0,
                reap: Callable[[], object] | None = None) -> int:
    """SIGKILL every command (its whole process group) and monitor a home's handles
    files name, and its egress proxy, if still the same processes; with ``wait``, wait
    that long for them to be gone, calling ``reap`` (a subreaper's) meanwhile. Returns
    how many were signalled."""
    victims: list[tuple[int, int]] = []
    for data in read_handles(home):
        for who in ("child", "monitor"):
            ent = data.get(who) or {}
            pid, st = ent.get("pid"), ent.get("start_time")
            if not (isinstance(pid, int) and isinstance(st, int) and is_same_process(pid, st)):
                continue
            try:
                if who == "child":
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            victims.append((pid, st))
    proxy = _proxy(home)  # the home's egress proxy (tether.egress.proxy), if any
    if proxy is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proxy[0], signal.SIGKILL)
            victims.append(proxy)
    deadline = time.monotonic() + wait
    alive = victims
    while alive and time.monotonic() < deadline:
        if reap is not None:
            reap()
        alive = [(p, s) for p, s in alive if is_same_process(p, s)]
        if alive:
            time.sleep(0.02)
    if reap is not None:
        reap()
    return len(victims)
