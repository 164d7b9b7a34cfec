"""Why an attempt ended: the exit reasons, and the provider rules that read them from
the attempt's last output.

Pure (no daemon, no I/O): the daemon hands in what it knows about the exec's end and
the tail of its output; a provider hands in its :class:`ExitRules`. A usage limit is
not a crash: the lineage waits for the reset time instead of spending its revival
budget. The reset time is parsed from the message when the CLI prints one; the
formats below are the ones the CLIs document or print (each provider cites its
source next to its patterns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class ExitReason(StrEnum):
    FINISHED = "finished"  # exited 0 on its own
    CRASHED = "crashed"  # died (non-zero exit, signal) for no reason we recognise
    HUNG = "hung"  # silent past crashed_after: tether killed it
    KILLED = "killed"  # stopped by a user (`tether kill`)
    OUT_OF_CONTEXT = "out_of_context"  # context exhausted (DEAD, or the CLI said so)
    USAGE_LIMITED = "usage_limited"  # the provider's usage limit: wait for the reset
    WAITING_FOR_USER = "waiting_for_user"  # stuck on a question only its user can answer
    BUDGET = "budget"  # stopped by tether: a cost budget with policy stop was reached
    START_FAILED = "start_failed"  # its program could not be started (not found: 127)
    FENCED = "fenced"  # killed by its monitor: its host lost its fleet lease


#: When a usage-limit message gives no reset time: wait this long, then try again (a
#: try that hits the limit again waits again, never spending the revival budget).
DEFAULT_LIMIT_WAIT = 30 * 60.0
#: A parsed reset time further away than this is not believed (a misread date).
MAX_LIMIT_WAIT = 8 * 24 * 3600.0
#: How much of the end of an attempt's output the rules read.
TAIL_BYTES = 16 * 1024

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


@dataclass(frozen=True)
class ExitRules:
    """A provider's regexes (Python syntax, matched case-insensitively) over the last
    output of an attempt."""

    usage_limit: tuple[str, ...] = ()
    out_of_context: tuple[str, ...] = ()
    waiting_for_user: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExitFacts:
    """What the daemon knows about an attempt's end."""

    state: str  # the exec's state: FINISHED, FAILED or CANCELLED
    exit_code: int | None
    hung: bool  # tether cancelled it for silence
    dead: bool  # its context lifecycle reached DEAD
    # tether stopped it because its CLI reported a usage limit (its message), e.g.
    # Claude Code's StopFailure hook with error rate_limit
    limited: str | None = None
    reason: str = ""  # the exec's own reason ("killed by SIGKILL", "exited with code 1")


@dataclass(frozen=True)
class Exit:
    reason: ExitReason
    detail: str  # the line that decided it, or a description
    reset_at: float | None = None  # USAGE_LIMITED: when to try again (epoch seconds)


def clean(text: str) -> str:
    """Terminal output as text: escape sequences dropped, carriage returns as newlines."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def _search(patterns: tuple[str, ...], text: str) -> re.Match[str] | None:
    """The last match of any pattern (the newest message wins)."""
    best: re.Match[str] | None = None
    for p in patterns:
        for m in re.finditer(p, text, re.IGNORECASE | re.MULTILINE):
            if best is None or m.start() > best.start():
                best = m
    return best


def _line_of(text: str, m: re.Match[str]) -> str:
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start:end if end >= 0 else len(text)].strip()[:300]


def classify(facts: ExitFacts, tail: str, rules: ExitRules, now: float) -> Exit:
    """The reason an attempt ended. Order: context exhausted (DEAD: tether reaps the
    session by cancelling it, which is not a user's kill); a usage limit its CLI reported
    (tether stopped it to wait for the reset); a user's kill; a usage limit
    (even when tether killed it as hung: an interactive CLI sits at its prompt showing the
    limit); context exhaustion the CLI reported; a question for the user (when tether
    killed it for silence); a hang; a clean exit; else a crash."""
    text = clean(tail)
    if facts.dead:
        return Exit(ExitReason.OUT_OF_CONTEXT, "context exhausted (DEAD)")
    if facts.limited is not None:  # the CLI said so (its words); its output may say more
        m = _search(rules.usage_limit, text)
        shown = _line_of(text, m) if m is not None else ""
        said = clean(facts.limited).strip()[:300]
        return Exit(ExitReason.USAGE_LIMITED, said or shown,
                    reset_time(said, now) or (reset_time(shown, now) if shown else None))
    if facts.state == "CANCELLED" and not facts.hung:
        return Exit(ExitReason.KILLED, "stopped by a user")
    m = _search(rules.usage_limit, text)
    if m is not None:
        line = _line_of(text, m)
        return Exit(ExitReason.USAGE_LIMITED, line, reset_time(line, now))
    m = _search(rules.out_of_context, text)
    if m is not None and not (facts.state == "FINISHED" and facts.exit_code == 0):
        return Exit(ExitReason.OUT_OF_CONTEXT, _line_of(text, m))
    if facts.hung:
        m = _search(rules.waiting_for_user, text)
        if m is not None:
            return Exit(ExitReason.WAITING_FOR_USER, _line_of(text, m))
        return Exit(ExitReason.HUNG, "no heartbeat or output")
    if facts.state == "FINISHED" and facts.exit_code == 0:
        return Exit(ExitReason.FINISHED, "exited 0")
    code = f" (exit {facts.exit_code})" if facts.exit_code is not None else ""
    return Exit(ExitReason.CRASHED, facts.reason or f"{facts.state.lower()}{code}")


# ---------------------------------------------------------------------- reset times
_EPOCH = re.compile(r"\|\s*(\d{10})\b")  # "Claude AI usage limit reached|1735689600"
_IN = re.compile(
    r"(?:in|after)\s+((?:\d+(?:\.\d+)?\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|"
    r"seconds?|secs?|s)\b[\s,]*(?:and\s+)?)+)", re.IGNORECASE)
_UNIT = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.IGNORECASE)
_CLOCK = re.compile(
    r"(?:resets?|reset at|try again at|available again at|until)\s+(?:at\s+)?"
    r"(?:(?P<month>[A-Z][a-z]{2,8})\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+"
    r"(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<tz>[A-Za-z_]+(?:/[A-Za-z_+\-]+)*)\))?", re.IGNORECASE)
_MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}


def reset_time(message: str, now: float) -> float | None:
    """When a usage-limit ``message`` says the limit resets, as epoch seconds, or None.

    Understood: ``…|<epoch seconds>``; ``in 2h 5m`` / ``in 3 days 4 hours`` /
    ``after 30s``; ``resets 3pm``, ``resets 3:30pm (Europe/Paris)``, ``try again at 4:12
    PM``, ``resets Dec 29th, 2025 10:15 PM`` (a clock time without a date is the next
    one; without a zone, the daemon's local zone). A time in the past or more than
    :data:`MAX_LIMIT_WAIT` ahead is not believed."""
    when: float | None = None
    m = _EPOCH.search(message)
    if m is not None:
        when = float(m.group(1))
    elif (m := _IN.search(message)) is not None:
        secs = 0.0
        for n, unit in _UNIT.findall(m.group(1)):
            secs += float(n) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit.lower()]
        when = now + secs if secs else None
    elif (m := _CLOCK.search(message)) is not None:
        when = _clock_time(m, now)
    if when is None or when <= now - 60 or when - now > MAX_LIMIT_WAIT:
        return None
    return max(when, now)


def _clock_time(m: re.Match[str], now: float) -> float | None:
    hour, minute = int(m["hour"]), int(m["minute"] or 0)
    ampm = (m["ampm"] or "").replace(".", "").lower()
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    elif m["minute"] is None:
        return None  # a bare number ("resets 5") is not a time
    if hour > 23 or minute > 59:
        return None
    tz = None
    if m["tz"]:
        try:
            tz = ZoneInfo(m["tz"])
        except (ZoneInfoNotFoundError, ValueError):
            tz = None
    base = datetime.fromtimestamp(now, tz) if tz else datetime.fromtimestamp(now).astimezone()
    if m["month"]:
        month = _MONTHS.get(m["month"][:3].lower())
        if month is None:
            return None
        try:
            at = base.replace(year=int(m["year"] or base.year), month=month, day=int(m["day"]),
                              hour=hour, minute=minute, second=0, microsecond=0)
        except ValueError:
            return None
        return at.timestamp()
    at = base.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at.timestamp() <= now:
        at += timedelta(days=1)
    return at.timestamp()
