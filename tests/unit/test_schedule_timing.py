"""Fire-time arithmetic (daemon/scheduler/timing.py): cron in a zone across DST, periods,
missed fire times, jitter; and the run state machine."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tether.daemon.scheduler import timing
from tether.model.errors import TetherError
from tether.model.records import ExecSpec
from tether.model.schedule import (
    IllegalRunTransition,
    JobSpec,
    RunState,
    check_run_transition,
)

PARIS = ZoneInfo("Europe/Paris")
NY = ZoneInfo("America/New_York")


def cron(expr: str, tz: str = "UTC") -> JobSpec:
    return JobSpec(cron=expr, tz=tz, exec=ExecSpec(argv=["true"]))


def local(ts: float, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ts, tz)


def fires(spec: JobSpec, start: datetime, n: int) -> list[datetime]:
    out, t = [], start.timestamp()
    for _ in range(n):
        t = timing.next_fire(spec, t, 0.0)
        out.append(local(t, ZoneInfo(spec.tz)))
    return out


def test_daily_cron_keeps_its_wall_time_across_both_dst_changes() -> None:
    spec = cron("0 9 * * *", "Europe/Paris")
    days = fires(spec, datetime(2026, 3, 27, 12, tzinfo=PARIS), 4)  # spring forward 29 March
    assert [(d.day, d.hour, d.minute) for d in days] == [(28, 9, 0), (29, 9, 0), (30, 9, 0),
                                                         (31, 9, 0)]
    gaps = [b.timestamp() - a.timestamp() for a, b in itertools.pairwise(days)]
    assert gaps == [82800, 86400, 86400]  # the short day (28 -> 29 March) is 23 hours
    autumn = fires(spec, datetime(2026, 10, 23, 12, tzinfo=PARIS), 3)  # fall back 25 Oct
    assert all((d.hour, d.minute) == (9, 0) for d in autumn)
    assert [b.timestamp() - a.timestamp() for a, b in itertools.pairwise(autumn)
            ] == [90000, 86400]  # the long day is 25 hours


def test_a_time_the_spring_gap_skips_fires_after_it_and_a_repeated_one_once() -> None:
    spec = cron("30 2 * * *", "Europe/Paris")
    [gap] = fires(spec, datetime(2026, 3, 28, 12, tzinfo=PARIS), 1)
    assert (gap.day, gap.hour, gap.minute) == (29, 3, 0)
    repeated = fires(spec, datetime(2026, 10, 24, 12, tzinfo=PARIS), 2)
    assert [(d.day, d.hour) for d in repeated] == [(25, 2), (26, 2)]  # not twice on the 25th
    ny = fires(cron("30 1 * * *", "America/New_York"), datetime(2026, 10, 31, 12, tzinfo=NY), 2)
    assert [(d.day, d.hour, d.minute) for d in ny] == [(1, 1, 30), (2, 1, 30)]


def test_every_counts_from_its_anchor_and_never_returns_the_present() -> None:
    spec = JobSpec(every=900.0, exec=ExecSpec(argv=["true"]))
    assert timing.next_fire(spec, 1000.0, 1000.0) == 1900.0
    assert timing.next_fire(spec, 1900.0, 1000.0) == 2800.0
    assert timing.next_fire(spec, 1899.9, 1000.0) == 1900.0
    assert timing.next_fire(spec, 0.0, 1000.0) == 1000.0 + 900.0  # before the anchor


def test_passed_counts_missed_fire_times_and_finds_the_last() -> None:
    every = JobSpec(every=3600.0, exec=ExecSpec(argv=["true"]))
    assert timing.passed(every, 3600.0, 3 * 3600.0 + 5, 0.0) == (3, 3 * 3600.0)
    daily = cron("0 2 * * *")
    first = datetime(2026, 1, 1, 2, tzinfo=ZoneInfo("UTC")).timestamp()
    n, last = timing.passed(daily, first, first + 9.5 * 86400, 0.0)
    assert (n, last) == (10, first + 9 * 86400)
    minutely = cron("* * * * *")
    n, last = timing.passed(minutely, 60.0, 60.0 + 30 * 86400, 0.0)  # a month down
    assert n == timing.MAX_COUNT and last == 60.0 + 30 * 86400


def test_jitter_is_stable_and_bounded() -> None:
    a = timing.jitter("job1", 1000.0, 30.0)
    assert a == timing.jitter("job1", 1000.0, 30.0) and 0 <= a < 30
    assert timing.jitter("job1", 1000.0, 0.0) == 0.0
    spread = {round(timing.jitter("job1", t, 30.0)) for t in range(0, 100000, 900)}
    assert len(spread) > 10


@pytest.mark.parametrize("spec, code", [
    (cron("61 * * * *"), "INVALID_CRON"),
    (cron("* * *"), "INVALID_CRON"),
    (cron("0 0 30 2 *"), "INVALID_CRON"),  # never fires
    (cron("0 2 * * *", "Mars/Olympus"), "INVALID_TIMEZONE"),
    (cron("0 2 * * *", "../../etc/passwd"), "INVALID_TIMEZONE"),
    (JobSpec(exec=ExecSpec(argv=["true"])), "INVALID_PARAMS"),
    (JobSpec(every=0.5, exec=ExecSpec(argv=["true"])), "INVALID_PARAMS"),
])
def test_bad_specs_are_named(spec: JobSpec, code: str) -> None:
    with pytest.raises(TetherError) as e:
        timing.check(spec)
    assert e.value.code == code


def test_run_transitions_are_guarded() -> None:
    check_run_transition("1", RunState.PENDING, RunState.RUNNING)
    check_run_transition("1", RunState.RUNNING, RunState.SUCCESS)
    for current, wanted in ((RunState.SUCCESS, RunState.RUNNING),
                            (RunState.RUNNING, RunState.SKIPPED),
                            (RunState.SKIPPED, RunState.PENDING)):
        with pytest.raises(IllegalRunTransition):
            check_run_transition("1", current, wanted)
