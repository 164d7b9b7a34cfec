"""The exec start latency histogram: kept by the exec service as execs start (category C,
since this daemon started), read by the metrics exposition at scrape time."""

from __future__ import annotations

import bisect

#: Start latency buckets (seconds): a warm process start is a few milliseconds, a
#: docker one up to seconds.
START_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """A cumulative histogram with fixed bounds, cheap enough for the exec start path."""

    def __init__(self, bounds: tuple[float, ...] = START_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, float(total)))
        return out
