"""Server-sent event streams: the journal (``id`` = gseq) and an exec's logs followed
(``id`` = the byte offset reached in each log), each on a daemon connection of its own so
that its long polls never queue behind the page's other calls. The page reads them with
``fetch`` (so they carry its key in a header) and resumes from the last ``id`` it saw.

A browser holds at most six HTTP/1.1 connections to one host, streams included, across
all its tabs: an exec's stdout and stderr come on **one** stream (events named after the
log), and the page closes its streams while its tab is hidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from tether.client.aio import AsyncClient
from tether.client.errors import DaemonUnavailable, TetherError

KEEPALIVE = 15.0  # seconds between SSE comments, so proxies keep the stream open
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
LOGS = ("stdout", "stderr", "pty")


def _failure(e: Exception) -> bytes:
    body = json.dumps({"code": getattr(e, "code", "DAEMON_UNAVAILABLE"), "message": str(e)})
    return f"event: failure\ndata: {body}\n\n".encode()


async def events(home: Path, since: int) -> AsyncIterator[bytes]:
    """The journal after ``since`` (the SDK resumes it across daemon restarts)."""
    yield b"retry: 1000\n\n"
    own = AsyncClient(home, autostart=False)
    try:
        sub = own.subscribe(since=since).__aiter__()
        while True:
            try:
                ev = await asyncio.wait_for(sub.__anext__(), KEEPALIVE)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            except (TetherError, DaemonUnavailable) as e:
                yield _failure(e)
                return
            yield f"id: {ev.gseq}\ndata: ".encode() + msgspec.json.encode(ev) + b"\n\n"
    finally:
        await own.close()


def parse_offsets(names: list[str], last: str | None) -> list[int | None]:
    """``Last-Event-ID`` of a logs stream: one offset per log, comma-separated."""
    parts = (last or "").split(",")
    if len(parts) != len(names) or not all(p.isdigit() for p in parts):
        return [None] * len(names)
    return [int(p) for p in parts]


async def logs(home: Path, exec_id: str, names: list[str], offsets: list[int | None],
               tail: int) -> AsyncIterator[bytes]:
    """Each named log of an exec followed from its offset, or from its last ``tail``
    bytes when it has none (a long log is not sent whole to a page that shows its end).
    A chunk is an event named after its log, ``data`` its text as a JSON string, ``id`` the
    offsets reached in every log; ``end`` once every log ended and was sent."""
    yield b"retry: 1000\n\n"
    own = AsyncClient(home, autostart=False)
    queue: asyncio.Queue[tuple[int, bytes | None, int, Exception | None]] = asyncio.Queue(8)
    reached = [o or 0 for o in offsets]

    async def follow(i: int, offset: int | None) -> None:
        try:
            if offset is None:
                size = (await own.exec_logs(exec_id, stream=names[i], offset=0,
                                            limit=1)).size
                offset = max(0, size - tail)
                if offset:
                    await queue.put((i, None, offset, None))  # "skipped"
            while True:
                chunk = await own.exec_logs(exec_id, stream=names[i], offset=offset,
                                            limit=1 << 16, wait=KEEPALIVE)
                if chunk.data:
                    offset = chunk.offset
                    await queue.put((i, chunk.data, offset, None))
                elif chunk.eof:
                    await queue.put((i, b"", offset, None))  # this log ended
                    return
        except (TetherError, DaemonUnavailable) as e:
            await queue.put((i, None, -1, e))

    tasks = [asyncio.create_task(follow(i, off)) for i, off in enumerate(offsets)]
    ended = 0
    try:
        while ended < len(names):
            try:
                i, data, offset, err = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if err is not None:
                yield _failure(err)
                return
            if data is None:
                reached[i] = offset
                ids = ",".join(map(str, reached))
                yield (f"event: skipped\nid: {ids}\n"
                       f"data: {json.dumps([names[i], offset])}\n\n").encode()
                continue
            reached[i] = offset
            if data == b"":
                ended += 1
                continue
            ids = ",".join(map(str, reached))
            text = json.dumps(data.decode(errors="replace"))
            yield f"event: {names[i]}\nid: {ids}\ndata: {text}\n\n".encode()
        yield b"event: end\ndata: {}\n\n"
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await own.close()
