"""The asyncio client: the same methods as :class:`tether.Client`, awaitable.

One connection carries concurrent calls: a reader task owned by the client hands each
reply to the future waiting on its id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import msgspec

from tether.client import core
from tether.client.api import _Api
from tether.client.core import Awaiting, Cursor, Message, Request, Resubscribe, Retry
from tether.client.daemonctl import Autostart, resolve_home, trusted, usable
from tether.model.layout import HomeLayout
from tether.model.records import Event

T = TypeVar("T")


class AsyncClient(Awaiting, _Api):
    """An asyncio tether client. Calls may run concurrently on one client."""

    def __init__(self, home: str | os.PathLike[str] | None = None, *, autostart: bool = True,
                 reconnect: float = 30.0) -> None:
        self.home = resolve_home(home)
        self.layout = HomeLayout(self.home)
        self.autostart = autostart
        self.reconnect = reconnect
        self._ids = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._read_task: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._auto = Autostart(self.home) if autostart else None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task
            self._read_task = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._fail_pending()

    def _fail_pending(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection lost"))
        self._pending.clear()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            trusted(self.home)
            usable(self.home)
            retry = Retry(self.layout.socket, self._auto, self.reconnect)
            while True:
                try:
                    self._reader, self._writer = await asyncio.open_unix_connection(
                        str(self.layout.socket), limit=core.MAX_REPLY)
                    # The reader task is owned by this client and cancelled in close().
                    self._read_task = asyncio.create_task(self._read_loop(self._reader))
                    return self._writer
                except OSError as e:
                    await asyncio.sleep(retry.refused(e))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                msg = core.decode(line)
                if core.connection_error(msg) is not None:  # answers every pending call
                    for waiting in self._pending.values():
                        if not waiting.done():
                            waiting.set_result(msg)
                    self._pending.clear()
                    continue
                fut = self._pending.pop(msg.id, None) if isinstance(msg.id, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (ConnectionError, ValueError):  # msgspec.DecodeError is a ValueError
            pass
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self._fail_pending()

    async def _result(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        retry = Retry(self.layout.socket, self._auto, self.reconnect)
        while True:
            writer = await self._connect()
            rid = next(self._ids)
            fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                writer.write(core.encode(rid, method, params))
                await writer.drain()
                msg = await fut
            except (ConnectionError, OSError):
                self._pending.pop(rid, None)
                await asyncio.sleep(retry.lost(method))
                continue
            err = core.error(msg)
            if err is None:
                return msg.result
            await asyncio.sleep(retry.refusal(err))

    async def _fetch(self, req: Request[T]) -> T:
        return req.decode(await self._result(req.method, req.params))

    def _invoke(self, req: Request[T]) -> Awaitable[T]:
        return self._fetch(req)

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        """Any method, its result as plain JSON values (for methods the table lacks)."""
        return msgspec.json.decode(await self._result(method, params))

    async def read_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                        follow: bool = False) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.exec_logs(exec, stream=stream, offset=offset,
                                         limit=1024 * 1024, wait=5.0 if follow else 0.0)
            if chunk.data:
                offset = chunk.offset
                yield chunk.data
                continue
            if chunk.eof or not follow:
                return

    async def read_output(self, exec: str, *, offset: int = 0, follow: bool = False
                          ) -> AsyncIterator[tuple[str, bytes]]:
        """``Client.read_output``: (stream, bytes), stdout and stderr interleaved."""
        while True:
            chunk = await self.exec_logs(exec, stream="all", offset=offset,
                                         limit=1024 * 1024, wait=5.0 if follow else 0.0)
            if chunk.data:
                offset = chunk.offset
                for part in chunk.parts():
                    yield part
                continue
            if chunk.eof or not follow:
                return

    async def subscribe(self, *, since: int = 0, sandbox: str | None = None,
                        epoch: str | None = None) -> AsyncIterator[Event]:
        """Yield events after ``since`` forever, resuming across restarts and overflow;
        ``TetherError`` ``EPOCH_CHANGED`` if the journal was reset (see ``Cursor``)."""
        cursor = Cursor(since, sandbox, epoch)
        while True:
            trusted(self.home)
            try:
                reader, writer = await asyncio.open_unix_connection(
                    str(self.layout.socket), limit=core.MAX_REPLY)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                writer.write(cursor.request())
                await writer.drain()
                while line := await reader.readline():
                    ev = cursor.feed(line)
                    if ev is not None:
                        yield ev
            except (ConnectionError, msgspec.DecodeError, Resubscribe):
                pass
            finally:
                writer.close()
            await asyncio.sleep(0.05)
