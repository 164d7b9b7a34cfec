"""Retention policy: how long ended execs' files and old journal events are kept.

Shared by the daemon (its defaults, ``TETHER_KEEP_*``) and the CLI (``tether prune
--older-than 7d``), so a duration or a size is read the same way on both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DAY = 86400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
_SIZES = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` → seconds (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if m is None:
        raise ValueError(f"{text!r} is not a duration: write a number with s, m, h, d or w "
                         "(e.g. 7d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_size(text: str) -> int:
    """``500M``, ``2GiB``, ``1048576`` → bytes (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", text.lower())
    if m is None or m.group(2) not in _SIZES:
        raise ValueError(f"{text!r} is not a size: write a number with K, M, G or T "
                         "(e.g. 2G)")
    return int(float(m.group(1)) * _SIZES[m.group(2)])


@dataclass(frozen=True)
class RetentionPolicy:
    """What the daemon's retention pass removes. 0 turns a limit off."""

    #: Ended execs' logs older than this (seconds since ``ended_at``) are removed.
    keep_logs: float = 14 * DAY
    #: Then the oldest ended execs' logs go until ``logs/`` is at most this many bytes.
    logs_max_bytes: int = 2 << 30
    #: Journal events older than this are compacted (never past a live exec's first).
    keep_events: float = 30 * DAY
    #: A settled exec's run files (claim, handles, monitor log) go this long after its end.
    keep_run_files: float = 3600.0
    #: Seconds between two passes.
    interval: float = 3600.0
    #: Seconds (real time, not the test clock) from start to the first pass, so that
    #: recovery and the first requests go first.
    first_pass: float = 5.0
