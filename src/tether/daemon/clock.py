"""The daemon's wall clock, which tests can move.

Schedules, retention ages and digest periods are about wall time, and a test
cannot sleep through a night. When ``TETHER_TEST_CLOCK`` names a file, its
content (a float, seconds) is added to the real time; a test moves the clock by
rewriting the file, even while the daemon is down, so the offset survives a
``kill -9`` like real time does. In production the clock is ``time.time``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

#: How often a sleeper re-reads a test clock, so a moved clock is seen promptly.
TEST_POLL = 0.05


class Clock:
    """Wall time (seconds since the epoch), optionally offset by a test file."""

    def __init__(self, offset_file: Path | None = None) -> None:
        self._file = offset_file

    @property
    def is_test(self) -> bool:
        return self._file is not None

    def offset(self) -> float:
        if self._file is None:
            return 0.0
        try:
            text = self._file.read_text().strip()
        except FileNotFoundError:
            return 0.0
        try:
            return float(text) if text else 0.0
        except ValueError:
            return 0.0  # a half-written file: the next read sees the whole one

    def now(self) -> float:
        return time.time() + self.offset()

    async def sleep_until(self, when: float, *, at_most: float = 60.0) -> None:
        """Sleep until the clock reads ``when`` (or ``at_most`` seconds passed).

        Callers loop and re-check their own condition, so waking early is safe;
        with a test clock the sleep is cut into short polls so that moving the
        clock forward wakes the sleeper within :data:`TEST_POLL`.
        """
        wait = max(0.0, min(when - self.now(), at_most))
        if self._file is None:
            await asyncio.sleep(wait)
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self.now() < when:  # noqa: ASYNC110 (polls a file)
            await asyncio.sleep(TEST_POLL)
