"""Server-sent event streams: the journal (``id`` = gseq) and a log followed (``id`` =
the byte offset after the chunk), each on a daemon connection of its own so that its long
polls never queue behind the page's other calls. The page reads them with ``fetch`` (so
they carry its key in a header) and resumes from the last ``id`` it saw."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from tether.client.aio import AsyncClient
from tether.client.errors import DaemonUnavailable, TetherError

KEEPALIVE = 15.0  # seconds between SSE comments, so proxies keep the stream open
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


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


async def logs(home: Path, exec_id: str, stream: str, offset: int | None,
               tail: int) -> AsyncIterator[bytes]:
    """A log followed from ``offset``, or from its last ``tail`` bytes when no offset is
    given (a long log is not sent whole to a page that shows its end)."""
    yield b"retry: 1000\n\n"
    own = AsyncClient(home, autostart=False)
    try:
        if offset is None:
            try:
                size = (await own.exec_logs(exec_id, stream=stream, offset=0, limit=1)).size
            except (TetherError, DaemonUnavailable) as e:
                yield _failure(e)
                return
            offset = max(0, size - tail)
            if offset:
                yield f"event: skipped\ndata: {offset}\n\n".encode()
        while True:
            try:
                chunk = await own.exec_logs(exec_id, stream=stream, offset=offset,
                                            limit=1 << 16, wait=KEEPALIVE)
            except (TetherError, DaemonUnavailable) as e:
                yield _failure(e)
                return
            if chunk.data:
                offset = chunk.offset
                text = json.dumps(chunk.data.decode(errors="replace"))
                yield f"id: {offset}\ndata: {text}\n\n".encode()
            elif chunk.eof:
                yield b"event: end\ndata: {}\n\n"
                return
            else:
                yield b": keepalive\n\n"
    finally:
        await own.close()
