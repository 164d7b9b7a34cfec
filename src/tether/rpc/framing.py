"""Line framing with a hard size limit that never buffers an oversized line.

A line longer than ``limit`` is reported as :class:`LineTooLong` once, and its
remaining bytes are discarded as they arrive, chunk by chunk, up to its newline.
``partial_since`` tells how long an unfinished line has been waiting for its end,
so that the server can time out half-written lines. The bytes of unfinished lines the
readers of one server hold together are counted in a shared :class:`Budget`; past its
limit the server drops the oldest (:meth:`LineReader.release`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

MAX_LINE = 1024 * 1024  # 1 MiB per JSON-RPC message (docs/PROTOCOL.md)
CHUNK = 64 * 1024


class LineTooLong:
    """Marker yielded in place of a line that exceeded the limit."""

    def __init__(self, seen: int) -> None:
        self.seen = seen


class Budget:
    """Bytes of unfinished lines the readers of one server hold together (``used``), the
    most they may (``limit``), and what to call when a reader's chunk passes it."""

    def __init__(self, limit: int, over: Callable[[], None] = lambda: None) -> None:
        self.limit = limit
        self.over = over
        self.used = 0
        self.released = 0  # bytes given up since the owner last looked (for trimming)


class LineReader:
    def __init__(self, reader: asyncio.StreamReader, limit: int = MAX_LINE,
                 budget: Budget | None = None) -> None:
        self._reader = reader
        self._limit = limit
        self._buf = bytearray()
        self._discarding = False
        self._eof = False
        self._budget = budget
        self.held = 0  # bytes of the unfinished line, as counted in the budget
        self._dropped = False  # released: what still arrives is discarded
        #: monotonic time the first byte of the unfinished line arrived, else None
        self.partial_since: float | None = None

    @property
    def fresh(self) -> bool:
        """Nothing buffered, no end seen: the next line starts with the next read."""
        return not self._buf and not self._eof and not self._discarding and not self._dropped

    def whole(self, chunk: bytes) -> bytes | None:
        """``chunk``, read ``fresh``, as the line it is — the common case, one whole
        request per read, handed over without a pass through the buffer — else ``None``
        once it is taken in, for ``rest`` to continue. The server calls this inline
        (one coroutine frame less per request); ``next`` does the same."""
        end = len(chunk) - 1
        if end >= 0 and chunk.find(b"\n") == end and end <= self._limit:
            return chunk[:end]
        if not chunk:
            self._eof = True
        else:
            if self.partial_since is None:
                self.partial_since = time.monotonic()
            self._take(chunk)
        return None

    def _take(self, chunk: bytes) -> None:
        """Buffer a chunk of an unfinished line, counted in the budget."""
        if self._dropped:
            return
        self._buf += chunk
        self._count()
        if self._budget is not None and self._budget.used > self._budget.limit:
            self._budget.over()

    def _count(self) -> None:
        if self._budget is not None:
            n = len(self._buf)
            self._budget.used += n - self.held
            if n < self.held:
                self._budget.released += self.held - n
            self.held = n

    def release(self) -> None:
        """Give up the unfinished line (the connection is being closed): its bytes leave
        the budget now, and whatever else arrives is discarded."""
        self._dropped = True
        self._buf = bytearray()
        self._count()

    async def next(self) -> bytes | LineTooLong | None:
        """The next line (without newline), a LineTooLong marker, or None at EOF."""
        if self.fresh:
            line = self.whole(await self._reader.read(CHUNK))
            if line is not None:
                return line
        return await self.rest()

    async def rest(self) -> bytes | LineTooLong | None:
        """``next`` past its first read."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                if self._discarding:
                    del self._buf[: nl + 1]
                    self._count()
                    self._discarding = False
                    self._restart()
                    continue
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._count()
                self._restart()
                if len(line) > self._limit:
                    return LineTooLong(len(line))
                return line
            if self._discarding:
                self._buf.clear()
                self._count()
            elif len(self._buf) > self._limit:
                seen = len(self._buf)
                self._buf.clear()
                self._count()
                self._discarding = True
                return LineTooLong(seen)
            if self._eof:
                if self._buf and not self._discarding:
                    line = bytes(self._buf)
                    self._buf.clear()
                    self._count()
                    return line
                return None
            chunk = await self._reader.read(CHUNK)
            if not chunk:
                self._eof = True
            else:
                if self.partial_since is None:
                    self.partial_since = time.monotonic()
                self._take(chunk)

    def _restart(self) -> None:
        """A line ended: what is left in the buffer starts the next one."""
        self.partial_since = time.monotonic() if self._buf else None
