"""The RPC baseline: the least a Python line-delimited JSON-RPC server over a Unix
socket can do per request — asyncio streams on the same event loop as the daemon
(uvloop when installed), decode the request with msgspec, encode a fixed
``daemon.health`` result with the request's id. No routing, validation or tasks.

Run as ``python -m bench.echo_server SOCKET``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

import msgspec

_enc = msgspec.json.Encoder()
_RESULT = {"status": "SERVING", "state": "RUNNING"}


async def _serve_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            msg = msgspec.json.decode(line)
            writer.write(_enc.encode({"jsonrpc": "2.0", "id": msg.get("id"),
                                      "result": _RESULT}) + b"\n")
            await writer.drain()
    except (ConnectionError, msgspec.DecodeError):
        pass
    finally:
        writer.close()


async def _main(path: str) -> None:
    server = await asyncio.start_unix_server(_serve_conn, path=path, limit=2**20)
    async with server:
        await server.serve_forever()


def _run(coro: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


if __name__ == "__main__":
    _run(_main(sys.argv[1]))
