"""The asyncio client: the same methods as :class:`tether.Client`, awaitable."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import msgspec

from tether.client.api import _Api
from tether.client.daemonctl import Autostart, resolve_home
from tether.client.errors import DaemonUnavailable, TetherError
from tether.model.errors import RpcCode
from tether.model.layout import HomeLayout

_enc = msgspec.json.Encoder()


class AsyncClient(_Api[Awaitable[Any]]):
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
        self._pending: dict[int, asyncio.Future[Any]] = {}
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
            deadline = time.monotonic() + self.reconnect
            delay = 0.02
            while True:
                try:
                    self._reader, self._writer = await asyncio.open_unix_connection(
                        str(self.layout.socket), limit=64 * 1024 * 1024)
                    # The reader task is owned by this client and cancelled in close().
                    self._read_task = asyncio.create_task(self._read_loop(self._reader))
                    return self._writer
                except (FileNotFoundError, ConnectionRefusedError):
                    if self._auto is not None:
                        self._auto.refused()
                except OSError:
                    pass
                if self._auto is not None:
                    self._auto.check()
                if time.monotonic() >= deadline:
                    hint = ("start one with `tether daemon`" if self._auto is None else
                            self._auto.why())
                    raise DaemonUnavailable(
                        f"no tether daemon answers on {self.layout.socket}; {hint}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg = msgspec.json.decode(line)
                if isinstance(msg, dict) and "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        except (ConnectionError, msgspec.DecodeError, ValueError):
            pass
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self._fail_pending()

    async def _acall(self, method: str, params: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.reconnect
        while True:
            writer = await self._connect()
            rid = next(self._ids)
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                writer.write(_enc.encode({"jsonrpc": "2.0", "id": rid, "method": method,
                                          "params": params}) + b"\n")
                await writer.drain()
                msg = await fut
            except (ConnectionError, OSError):
                self._pending.pop(rid, None)
                if self._auto is not None:
                    self._auto.forget()
                if time.monotonic() >= deadline:
                    raise DaemonUnavailable(f"lost the daemon while calling {method}") from None
                await asyncio.sleep(0.05)
                continue
            if "error" in msg:
                err = TetherError.from_wire(msg["error"])
                if err.rpc_code == RpcCode.DAEMON_STOPPING and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    continue
                raise err
            return msg.get("result")

    def _call(self, method: str, params: dict[str, Any]) -> Awaitable[Any]:
        return self._acall(method, params)

    async def read_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                        follow: bool = False) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.exec_logs(exec, stream=stream, offset=offset,
                                         limit=1024 * 1024, wait=5.0 if follow else 0.0)
            data = base64.b64decode(chunk["data"])
            if data:
                offset = chunk["offset"]
                yield data
                continue
            if chunk["eof"] or not follow:
                return

    async def subscribe(self, *, since: int = 0, sandbox: str | None = None,
                        ) -> AsyncIterator[dict[str, Any]]:
        """Yield events after ``since`` forever, resuming across restarts and overflow."""
        cursor = since
        key = "seq" if sandbox else "gseq"
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(
                    str(self.layout.socket), limit=64 * 1024 * 1024)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                params: dict[str, Any] = {"since": cursor}
                if sandbox:
                    params["sandbox"] = sandbox
                writer.write(_enc.encode({"jsonrpc": "2.0", "id": 0,
                                          "method": "events.subscribe",
                                          "params": params}) + b"\n")
                await writer.drain()
                while True:
                    line = await reader.readline()
                    if not line:
                        break
                    msg = msgspec.json.decode(line)
                    if msg.get("id") == 0 and "error" in msg:
                        raise TetherError.from_wire(msg["error"])
                    if msg.get("method") == "events.event":
                        ev = msg["params"]["event"]
                        if ev[key] > cursor:
                            cursor = ev[key]
                            yield ev
                    elif msg.get("method") == "events.overflow":
                        break
            except (ConnectionError, msgspec.DecodeError):
                pass
            finally:
                writer.close()
            await asyncio.sleep(0.05)
