"""The digest's periods and deterministic summaries: DST, ISO weeks, additive figures."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tether.digest import periods, summary
from tether.digest.summary import Leaf

PARIS = ZoneInfo("Europe/Paris")


def test_a_day_across_the_spring_change_has_23_hours_and_the_autumn_one_25() -> None:
    spring = periods.parse("day", "2026-03-29", PARIS)
    autumn = periods.parse("day", "2026-10-25", PARIS)
    assert spring.end - spring.start == 23 * 3600
    assert autumn.end - autumn.start == 25 * 3600


def test_the_repeated_autumn_hour_is_two_periods() -> None:
    first = datetime(2026, 10, 25, 2, 30, tzinfo=PARIS).timestamp()  # fold=0: CEST
    second = first + 3600  # the same wall-clock time again, now CET
    a, b = periods.of("hour", first, PARIS), periods.of("hour", second, PARIS)
    assert a.id != b.id
    assert a.label == "2026-10-25T02:00+02:00" and b.label == "2026-10-25T02:00+01:00"
    assert b.start == a.end
    assert periods.parse("hour", a.label, PARIS) == a


def test_hours_tile_a_day_and_days_tile_a_week_and_a_month() -> None:
    d = periods.parse("day", "2026-10-25", PARIS)
    t, hours = d.start, []
    while t < d.end:
        hours.append(periods.of("hour", t, PARIS))
        t = hours[-1].end
    assert len(hours) == 25 and hours[-1].end == d.end
    w = periods.parse("week", "2026-W48", PARIS)
    assert periods.of("day", w.start, PARIS).label == "2026-11-23"  # a Monday
    assert periods.of("week", w.end - 1, PARIS) == w
    m = periods.parse("month", "2026-12", PARIS)
    assert periods.of("day", m.end, PARIS).label == "2027-01-01"
    assert [p.level for p in periods.parents(d, PARIS)] == ["week", "month"]


@pytest.mark.parametrize(("level", "label"), [("day", "2026-13-01"), ("week", "2026-W54"),
                                              ("month", "2026-1"), ("hour", "2026-11-23 14"),
                                              ("week", "nonsense")])
def test_a_bad_label_says_how_to_write_one(level: periods.Level, label: str) -> None:
    with pytest.raises(periods.BadPeriod, match="write it like"):
        periods.parse(level, label, PARIS)


def test_an_unknown_zone_is_named() -> None:
    with pytest.raises(periods.BadPeriod, match="Mars/Olympus"):
        periods.zone("Mars/Olympus")


def _leaf(i: int, *, ok: bool = True, **kw: object) -> Leaf:
    base: dict[str, object] = dict(
        id=f"e{i}", sandbox="default", argv=["/venv/bin/pytest", "-x"],
        state="FINISHED", exit_code=0 if ok else 1, signal=None, reason=None,
        started_at=100.0 * i, ended_at=100.0 * i + 10 + i)
    base.update(kw)
    return Leaf(**base)  # type: ignore[arg-type]


def test_summaries_add_up_so_a_day_says_what_its_execs_say() -> None:
    leaves = [_leaf(1), _leaf(2, ok=False, last_line="E   assert 1 == 2"),
              _leaf(3, argv=["sh", "-c", "make test"], lineage="L", revival=True, turns=2,
                    tokens={"input": 1000, "output": 500}, context_peak_pct=40.0),
              _leaf(4, state="CANCELLED", exit_code=None, signal=15)]
    whole = summary.of_leaves(leaves)
    halves = summary.merge([summary.of_leaves(leaves[:2]), summary.of_leaves(leaves[2:])])
    for s in (whole, halves):
        assert (s.runs, s.succeeded, s.failed, s.cancelled) == (4, 2, 1, 1)
        assert (s.agent_runs, s.revivals, s.turns) == (1, 1, 2)
        assert s.tokens == {"input": 1000, "output": 500}
        assert s.context_peak_pct == 40.0
        assert s.commands == {"pytest": 3, "make": 1}
        assert [f.exec for f in s.failures] == ["e2"]
        assert s.failures[0].line == "E   assert 1 == 2"
        assert s.longest_exec == "e4" and s.busy_seconds == pytest.approx(10 * 4 + 10)
    assert whole == halves
    assert "4 runs: 2 ok, 1 failed, 1 cancelled" in whole.text
    assert "last failure: pytest (exit 1): E   assert 1 == 2" in whole.text
    assert summary.describe(summary.merge([])) == "nothing ran"
