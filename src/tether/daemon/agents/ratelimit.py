"""How fast a sandboxed agent may call the daemon: a token bucket per lineage.

The agent is the attacker. Every ``agent.turn`` is a commit (and a drain-snapshot
write), every ``agent.hook`` may read a transcript: one agent looping over
``agent.turn`` on ``agent.sock`` made 680 commits a second and grew the store's WAL
by 24 MB/s. So each lineage's calls on ``agent.sock`` draw from a bucket of ``burst``
tokens refilled at ``rate`` a second; a call that finds it empty is refused with
``RATE_LIMITED`` (and ``retry_after``) before it does anything. The first refusal of
an *episode* is journaled (``agent.rate_limited``), the rest are only counted: an
episode ends when the bucket has filled up again, i.e. once the agent kept below the
rate for ``burst / rate`` seconds. The key is the lineage the call authenticated as,
never the ``session`` it claims: an agent cannot spend another lineage's tokens.

In memory only (category C): a restarted daemon starts every bucket full.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.daemon.journal import Journal
from tether.model.errors import RpcCode, TetherError
from tether.model.records import LineageRecord

log = logging.getLogger("tether.agents")

RATE = 20.0  # calls a second, sustained, per lineage ($TETHER_AGENT_RATE)
BURST = 200  # calls at once, per lineage ($TETHER_AGENT_BURST)
MAX_BUCKETS = 4096  # past this many, full buckets (as good as new) are dropped


@dataclass
class _Bucket:
    tokens: float
    at: float  # monotonic time of the last refill
    episode: bool = False  # refusing since the bucket last ran dry (journaled once)
    refused: int = 0  # calls refused in this episode


class AgentRateLimit:
    def __init__(self, journal: Journal, rate: float = RATE, burst: int = BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the agent rate must be > 0 and the burst >= 1")
        self.journal = journal
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.refused = 0  # calls refused since the daemon started (daemon.metrics)
        self.episodes = 0

    def take(self, rec: LineageRecord, method: str) -> None:
        """Spend one token of ``rec``'s bucket, or raise ``RATE_LIMITED``."""
        now = self.clock()
        b = self._buckets.get(rec.id)
        if b is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune(now)
            b = self._buckets[rec.id] = _Bucket(self.burst, now)
        else:
            b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rate)
            b.at = now
            if b.episode and b.tokens >= self.burst:
                b.episode, b.refused = False, 0  # it kept below the rate: episode over
        if b.tokens >= 1.0 - 1e-9:  # (a refill's float sum may fall a hair short of 1)
            b.tokens = max(0.0, b.tokens - 1.0)
            return
        b.refused += 1
        self.refused += 1
        retry = max(0.001, round((1.0 - b.tokens) / self.rate, 3))
        if not b.episode:
            self._journal(rec, method, b)
        raise TetherError(
            RpcCode.CONFLICT, "RATE_LIMITED",
            f"agent {rec.name or rec.id} called the daemon more than {self.rate:g} times a "
            f"second (bursts of {self.burst:g}): {method} refused; retry in {retry:g} s and "
            "call less often (a turn at its end, a heartbeat at most once a second)",
            {"session": rec.id, "limit": self.rate, "burst": self.burst,
             "retry_after": retry})

    def _journal(self, rec: LineageRecord, method: str, b: _Bucket) -> None:
        """One ``agent.rate_limited`` event per episode. If it cannot be committed (a
        full disk) the next refusal tries again."""
        try:
            self.journal.record(
                rec.config.sandbox, "agent.rate_limited", exec_id=rec.exec_id,
                state=rec.lifecycle,
                reason=(f"more than {self.rate:g} calls a second on agent.sock (bursts of "
                        f"{self.burst:g}): refusing them until it slows down"),
                data={"lineage": rec.id, "method": method, "rate": self.rate,
                      "burst": self.burst})
        except Exception as e:
            log.warning("lineage %s is rate-limited; journaling it failed: %s", rec.id, e)
            return
        b.episode = True
        self.episodes += 1
        log.warning("lineage %s: agent.sock calls over %g/s; refusing them until it slows "
                    "down", rec.id, self.rate)

    def _prune(self, now: float) -> None:
        """Forget the buckets that would be full by now (a new one starts full)."""
        for key, b in list(self._buckets.items()):
            if b.tokens + (now - b.at) * self.rate >= self.burst:
                del self._buckets[key]
