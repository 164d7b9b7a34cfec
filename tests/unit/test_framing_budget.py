"""The bytes of unfinished lines are counted in the server's budget, and given back when
a line ends, is discarded, or is released with its connection."""

from __future__ import annotations

import asyncio

from tether.rpc.framing import Budget, LineReader, LineTooLong


def _feed(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    for c in chunks:
        r.feed_data(c)
    if eof:
        r.feed_eof()
    return r


def test_unfinished_lines_are_counted_until_they_end() -> None:
    async def go() -> None:
        over: list[int] = []
        budget = Budget(100, lambda: over.append(budget.used))
        reader = asyncio.StreamReader()
        lines = LineReader(reader, 1000, budget)
        reader.feed_data(b"x" * 60)
        task = asyncio.ensure_future(lines.next())
        await asyncio.sleep(0)
        assert budget.used == 60 and not task.done()
        reader.feed_data(b"y" * 60)
        await asyncio.sleep(0)
        assert budget.used == 120 and over == [120]  # past the limit: the owner is told
        reader.feed_data(b"\nz")
        assert await task == b"x" * 60 + b"y" * 60
        assert budget.used == 1 and budget.released == 121  # the line and its newline
        lines.release()  # the connection closes
        assert budget.used == 0 and lines.held == 0
    asyncio.run(go())


def test_a_line_too_long_gives_its_bytes_back() -> None:
    async def go() -> None:
        budget = Budget(10_000)
        lines = LineReader(_feed(b"a" * 3000, b"b" * 3000, b"\nok\n"), 4000, budget)
        assert isinstance(await lines.next(), LineTooLong)
        assert await lines.next() == b"ok"
        assert budget.used == 0
    asyncio.run(go())


def test_after_release_nothing_more_is_buffered_nor_read() -> None:
    async def go() -> None:
        budget = Budget(10_000)
        reader = _feed(b"partial", eof=False)
        lines = LineReader(reader, 4000, budget)
        task = asyncio.ensure_future(lines.next())
        await asyncio.sleep(0)
        lines.release()
        reader.feed_data(b" more\n{\"whole\": 1}\n")
        reader.feed_eof()
        assert await task is None
        assert budget.used == 0
    asyncio.run(go())
