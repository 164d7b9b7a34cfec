"""The digest's periods in one time zone, DST included.

An hour is a local clock hour (labelled with its UTC offset, so the repeated hour
of a fall-back night is two periods); a day runs from local midnight to the next
(23 or 25 hours across a DST change); a week is an ISO week (Monday first); a
month a calendar month.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tether.model.digest import Level

_HOUR_LABEL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:00[+-]\d\d:\d\d$")


class BadPeriod(ValueError):
    """A label that names no period (``--day 2026-13-01``)."""


@dataclass(frozen=True)
class Period:
    level: Level
    label: str
    start: float
    end: float

    @property
    def id(self) -> str:
        return f"{self.level}:{self.label}"


def _midnight(d: date, tz: tzinfo) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=tz).timestamp()


def day(d: date, tz: tzinfo) -> Period:
    return Period("day", d.isoformat(), _midnight(d, tz), _midnight(d + timedelta(days=1), tz))


def week(year: int, number: int, tz: tzinfo) -> Period:
    monday = date.fromisocalendar(year, number, 1)
    return Period("week", f"{year}-W{number:02d}", _midnight(monday, tz),
                  _midnight(monday + timedelta(days=7), tz))


def month(year: int, number: int, tz: tzinfo) -> Period:
    first = date(year, number, 1)
    following = date(year + number // 12, number % 12 + 1, 1)
    return Period("month", f"{year}-{number:02d}", _midnight(first, tz), _midnight(following, tz))


def of(level: Level, t: float, tz: tzinfo) -> Period:
    """The period of ``level`` that holds the instant ``t``."""
    local = datetime.fromtimestamp(t, tz)
    if level == "hour":
        start = local.replace(minute=0, second=0, microsecond=0)
        begin = start.timestamp()
        return Period("hour", start.isoformat(timespec="minutes"), begin, begin + 3600.0)
    d = local.date()
    if level == "day":
        return day(d, tz)
    if level == "week":
        iso = d.isocalendar()
        return week(iso.year, iso.week, tz)
    return month(d.year, d.month, tz)


def parse(level: Level, label: str, tz: tzinfo) -> Period:
    """A period from its label: ``2026-11-23``, ``2026-W47``, ``2026-11``."""
    try:
        if level == "day":
            return day(date.fromisoformat(label), tz)
        if level == "week":
            y, w = label.split("-W")
            return week(int(y), int(w), tz)
        if level == "month":
            y, mo = label.split("-")
            if len(y) != 4 or len(mo) != 2:
                raise ValueError(label)
            return month(int(y), int(mo), tz)
        if _HOUR_LABEL.match(label):
            return of("hour", datetime.fromisoformat(label).timestamp(), tz)
    except ValueError:
        pass
    examples = {"hour": "2026-11-23T14:00+01:00", "day": "2026-11-23", "week": "2026-W47",
                "month": "2026-11"}
    article = "an" if level == "hour" else "a"
    raise BadPeriod(f"{label!r} is not {article} {level}; write it like {examples[level]}")


def parents(p: Period, tz: tzinfo) -> list[Period]:
    """The periods one level up that roll ``p`` in: an hour's day; a day's week and month."""
    if p.level == "hour":
        return [of("day", p.start, tz)]
    if p.level == "day":
        return [of("week", p.start, tz), of("month", p.start, tz)]
    return []


def child_level(level: Level) -> Level | None:
    """What a node of ``level`` is made of (None: an hour holds execs)."""
    table: dict[Level, Level | None] = {"hour": None, "day": "hour", "week": "day", "month": "day"}
    return table[level]


def zone(name: str | None = None) -> tzinfo:
    """The digest's time zone: ``name``, else ``$TZ``, else the system's
    (``/etc/localtime``), else UTC. A named zone, so days shift with DST."""
    for candidate in (name, os.environ.get("TZ", "").lstrip(":") or None, _system_zone()):
        if candidate:
            try:
                return ZoneInfo(candidate)
            except (ZoneInfoNotFoundError, ValueError):
                if candidate is name:
                    raise BadPeriod(f"unknown time zone {name!r}; use an IANA name such as "
                                    "Europe/Paris or UTC") from None
    return ZoneInfo("UTC")


def _system_zone() -> str | None:
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:
        return None
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else None
