"""A browser terminal: a WebSocket bridged to the exec's monitor attach socket.

Binary WebSocket messages carry terminal bytes both ways; text messages carry
control as JSON (``{"resize": [rows, cols]}``, ``{"detach": true}`` from the page;
``{"exit": {...}}`` or ``{"error": "..."}`` to it). The monitor does the work a
terminal multiplexer does (replay, read-only clients, sizes); the daemon is not in
the path, so a daemon restart does not disturb an open browser terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from tether.monitor import attachproto as proto


async def bridge(ws: WebSocket, socket_path: Path, *, read_only: bool, rows: int,
                 cols: int) -> None:
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
    except OSError:
        await ws.send_text(json.dumps({"error": "the exec is not running"}))
        await ws.close()
        return
    hello = {"op": "attach", "read_only": read_only, "rows": rows, "cols": cols,
             "replay": proto.DEFAULT_REPLAY}
    writer.write(json.dumps(hello).encode() + b"\n")
    reply: dict[str, Any] = json.loads(await reader.readline() or b"{}")
    if not reply.get("ok"):
        await ws.send_text(json.dumps({"error": str(reply.get("error", "attach refused"))}))
        await ws.close()
        writer.close()
        return

    async def to_browser() -> None:
        buf = bytearray()
        while chunk := await reader.read(1 << 16):
            buf += chunk
            while (got := proto.split(buf)) is not None:
                kind, payload = got
                if kind == proto.DATA:
                    await ws.send_bytes(payload)
                elif kind == proto.EXIT:
                    await ws.send_text(json.dumps({"exit": json.loads(payload)}))
                    return

    async def to_monitor() -> None:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            if msg.get("bytes") is not None:
                if not read_only:
                    writer.write(proto.frame(proto.DATA, msg["bytes"][:proto.MAX_FRAME]))
            elif msg.get("text") is not None:
                ctl = json.loads(msg["text"])
                if "resize" in ctl:
                    r, c = (int(x) for x in ctl["resize"])
                    writer.write(proto.frame(proto.RESIZE, proto.SIZE.pack(r, c)))
                if ctl.get("detach"):
                    writer.write(proto.frame(proto.DETACH))
                    return
            await writer.drain()

    tasks = [asyncio.create_task(to_browser()), asyncio.create_task(to_monitor())]
    try:  # whichever side ends first ends the bridge; the other is cancelled
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except WebSocketDisconnect:
        pass
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(OSError):  # a closed tab detaches; it never kills
            writer.write(proto.frame(proto.DETACH))
        writer.close()
        with contextlib.suppress(Exception):
            await ws.close()
