"""The per-lineage token bucket on agent.sock: refusals, retry_after, one journal event
per episode, and buckets that never spend another lineage's tokens."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tether.daemon.agents.ratelimit import AgentRateLimit
from tether.model.errors import TetherError
from tether.model.records import AgentConfig, LineageRecord


class _Journal:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.fail = False

    def record(self, sandbox: str | None, type_: str, **kw: Any) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.events.append((type_, kw["data"]))


class _Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def _lineage(ident: str) -> LineageRecord:
    return LineageRecord(id=ident, name=None, status="ACTIVE",
                         config=AgentConfig(argv=["a"]), created_at=0.0, updated_at=0.0)


def _limit(rate: float = 10.0, burst: int = 5) -> tuple[AgentRateLimit, _Journal, _Clock]:
    journal, clock = _Journal(), _Clock()
    return AgentRateLimit(journal, rate, burst, clock), journal, clock  # type: ignore[arg-type]


def test_a_burst_then_the_rate_then_refusals_with_retry_after() -> None:
    limit, _journal, clock = _limit()
    a = _lineage("a")
    for _ in range(5):
        limit.take(a, "agent.turn")
    with pytest.raises(TetherError) as e:
        limit.take(a, "agent.turn")
    assert (e.value.code, e.value.rpc_code) == ("RATE_LIMITED", 1003)
    assert e.value.data == {"session": "a", "limit": 10.0, "burst": 5.0, "retry_after": 0.1}
    clock.t += 0.1  # one token back
    limit.take(a, "agent.turn")
    with pytest.raises(TetherError):
        limit.take(a, "agent.turn")


def test_one_event_per_episode() -> None:
    limit, journal, clock = _limit()
    a = _lineage("a")
    for _ in range(1000):  # a sustained flood: many refusals, one event
        clock.t += 0.01
        with contextlib.suppress(TetherError):
            limit.take(a, "agent.hook")
    assert [t for t, _ in journal.events] == ["agent.rate_limited"]
    assert journal.events[0][1] == {"lineage": "a", "method": "agent.hook", "rate": 10.0,
                                    "burst": 5.0}
    assert limit.refused > 500 and limit.episodes == 1
    clock.t += 0.5  # quiet until the bucket is full again: the episode is over
    for _ in range(6):
        with contextlib.suppress(TetherError):
            limit.take(a, "agent.turn")
    assert len(journal.events) == 2 and limit.episodes == 2


def test_lineages_have_buckets_of_their_own() -> None:
    limit, _journal, _clock = _limit(burst=2)
    a, b = _lineage("a"), _lineage("b")
    limit.take(a, "agent.turn")
    limit.take(a, "agent.turn")
    with pytest.raises(TetherError):
        limit.take(a, "agent.turn")
    limit.take(b, "agent.turn")  # a's flood does not spend b's tokens


def test_an_event_that_cannot_be_journaled_is_tried_at_the_next_refusal() -> None:
    limit, journal, _clock = _limit(burst=1)
    a = _lineage("a")
    limit.take(a, "agent.turn")
    journal.fail = True
    with pytest.raises(TetherError):
        limit.take(a, "agent.turn")
    assert journal.events == []
    journal.fail = False
    with pytest.raises(TetherError):
        limit.take(a, "agent.turn")
    assert len(journal.events) == 1
