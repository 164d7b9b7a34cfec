"""When a job fires: cron (``cronsim``) in an IANA zone (``zoneinfo``), or a period.

Pure functions of a :class:`JobSpec` and epoch seconds, so that the loop, recovery
and the tests agree. cronsim iterates wall-clock times in the zone: a time that a
spring-forward skips fires at the first minute after the gap, and a time that a
fall-back repeats fires once, at its first occurrence.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim

from tether.model.errors import RpcCode, TetherError
from tether.model.schedule import JobSpec

#: Counting the fire times a stopped daemon missed stops here (a per-minute job
#: down for a year); the run that stands for them says "at least".
MAX_COUNT = 10_000
MIN_EVERY = 1.0  # seconds


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_TIMEZONE",
                          f"unknown time zone {name!r}: give an IANA name like "
                          "Europe/Paris, America/New_York or UTC", {"tz": name}) from None


def check(spec: JobSpec) -> None:
    """Refuse a spec that cannot fire, naming what is wrong."""
    if (spec.cron is None) == (spec.every is None):
        raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                          "give exactly one of --cron EXPR and --every DURATION")
    tz = zone(spec.tz)
    if spec.cron is not None:
        try:
            next(CronSim(spec.cron, datetime.now(tz)))
        except Exception as e:  # CronSimError, or whatever else a parser meets
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_CRON",
                              f"invalid cron expression {spec.cron!r}: {e}; five fields "
                              "are expected (minute hour day-of-month month day-of-week), "
                              "like '0 2 * * *' (a sixth, first, counts seconds)",
                              {"cron": spec.cron}) from None
    elif spec.every is not None and spec.every < MIN_EVERY:
        raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                          f"--every must be at least {MIN_EVERY:g}s, got {spec.every:g}s")


def next_fire(spec: JobSpec, after: float, anchor: float) -> float:
    """The first fire time strictly after ``after``. A period counts from ``anchor``
    (the job's creation), so restarts never shift it."""
    if spec.every is not None:
        k = max(1, int((after - anchor) // spec.every) + 1)  # the anchor is no fire time
        t = anchor + k * spec.every
        while t <= after:  # float rounding
            t += spec.every
        return t
    assert spec.cron is not None
    tz = zone(spec.tz)
    return next(CronSim(spec.cron, datetime.fromtimestamp(after, tz))).timestamp()


def passed(spec: JobSpec, first: float, until: float, anchor: float) -> tuple[int, float]:
    """How many fire times from ``first`` (itself one) up to ``until``, and the last of
    them; the count stops at :data:`MAX_COUNT`."""
    if spec.every is not None:
        n = int((until - first) // spec.every) + 1
        return min(n, MAX_COUNT), first + (n - 1) * spec.every
    n, last = 1, first
    while n < MAX_COUNT:
        nxt = next_fire(spec, last, anchor)
        if nxt > until:
            return n, last
        n, last = n + 1, nxt
    # Too many to count: the last one is found from ``until`` backwards.
    probe = until - 1.0
    while next_fire(spec, probe, anchor) > until:
        probe -= 3600.0
    while (nxt := next_fire(spec, probe, anchor)) <= until:
        probe = nxt
    return n, probe


def jitter(job_id: str, fire_at: float, width: float) -> float:
    """A stable delay in ``[0, width)`` for one fire time: the same after a restart, so
    the due time a crash interrupted is the one the next daemon waits for."""
    if width <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{job_id}:{fire_at!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * width
