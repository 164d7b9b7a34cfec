"""Process identity from ``/proc``: ``(pid, start_time)``, where ``start_time`` is field 22
of ``/proc/PID/stat`` (clock ticks since boot). A reused pid has another start time, so
nothing is ever adopted or signalled on a bare pid. Standard library (``os``) only: the
monitor imports it.
"""

from __future__ import annotations


def boot_id() -> str:
    """This boot's id: a handles file from before a reboot names processes long gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> list[bytes] | None:
    """Fields 3.. of ``/proc/PID/stat`` (state first), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses.
    return stat[stat.rfind(b")") + 2:].split()


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks, or None if there is no such process."""
    rest = _proc_stat(pid)
    try:
        return int(rest[19]) if rest else None  # field 22 overall
    except (IndexError, ValueError):
        return None


def is_running(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (an exited child nobody reaped yet)."""
    rest = _proc_stat(pid)
    return rest is not None and bool(rest) and rest[0] not in (b"Z", b"X")


def is_same_process(pid: int, start_time: int) -> bool:
    """True when ``pid`` exists, is not a zombie, and started at ``start_time``."""
    rest = _proc_stat(pid)
    if not rest or len(rest) < 20 or rest[0] in (b"Z", b"X"):
        return False
    try:
        return int(rest[19]) == start_time
    except ValueError:
        return False
