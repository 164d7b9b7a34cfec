"""Fleet mode's host-to-host API: another host's CLI reads this host's logs and events.

A starlette application served by uvicorn inside the daemon's loop (fleet mode only, so
a single host never imports either). It listens on TCP (``TETHER_FLEET_LISTEN``, by
default 127.0.0.1 on a free port) and is advertised in this host's ``hosts.api`` row;
every request must carry ``Authorization: Bearer <the fleet's token>``, the token
``tether fleet init`` stored in PostgreSQL, so whoever can *read* that database can call
it. So it serves reads — logs, events, and ``/v1/attach`` read-only — each through the
daemon's own method table, so the checks and errors are a local client's. Typing into a
session (``/v1/attach?ro=0``) also needs the caller to prove it may *write* to the fleet
database, which already lets it place any command on any host: it journals an
``attach.grant`` row naming this host, the session and the SHA-256 of a nonce, and shows
the nonce (``X-Tether-Attach-Grant``); the host accepts a grant once, within a minute.
TLS: ``TETHER_FLEET_TLS_CERT`` and ``TETHER_FLEET_TLS_KEY`` (docs/PROTOCOL.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from tether.model.errors import TetherError

Dispatch = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
#: Whether a grant (the nonce a caller shows) lets it type into ``target``.
Grants = Callable[[str, dict[str, str]], Awaitable[bool]]
GRANT_HEADER = "x-tether-attach-grant"
#: How long one long-poll for more log bytes waits on this host (a follow loops on it).
LOG_WAIT = 5.0
#: ``/v1/logs?stream=all``: a part of the output is a frame: this letter, its length
#: (4 bytes, big-endian), its bytes (``tether.cli.commands.fleet.unframe`` reads them).
FRAMES = {"stdout": b"o", "stderr": b"e", "pty": b"p"}
EVENT_POLL = 0.5


class HostApi:
    """The routes and their auth; ``token`` is None until this host first reached the
    fleet database (every call is refused until then, saying so). After a rotation
    (``tether fleet rotate-token``) the ``previous`` token is accepted until
    ``previous_until`` (monotonic), so a caller that read it just before is not refused;
    a stream or attach already open is never cut (auth is checked once, at its start)."""

    def __init__(self, dispatch: Dispatch, grants: Grants | None = None) -> None:
        self.dispatch = dispatch
        self.grants = grants
        self.token: str | None = None
        self.previous: str | None = None
        self.previous_until = 0.0
        self.app = Starlette(routes=[Route("/v1/logs", self.logs),
                                     Route("/v1/events", self.events),
                                     Route("/v1/lineage", self.lineage),
                                     WebSocketRoute("/v1/attach", self.attach)])

    def set_tokens(self, token: str, previous: str | None, left: float) -> None:
        """The fleet's tokens as just read (``fleet.admin.api_tokens``): the current one,
        and the previous one with the seconds it is still accepted."""
        self.token, self.previous = token, previous
        self.previous_until = time.monotonic() + left if previous else 0.0

    def _why_not(self, conn: Request | WebSocket) -> tuple[int, str, str] | None:
        if self.token is None:
            return (503, "NOT_JOINED", "this host has not reached the fleet database yet: "
                    "try again once it holds a lease (`tether --fleet URL hosts`)")
        got = conn.headers.get("authorization", "").encode()
        ok = hmac.compare_digest(got, f"Bearer {self.token}".encode())
        if self.previous is not None and time.monotonic() < self.previous_until:
            ok |= hmac.compare_digest(got, f"Bearer {self.previous}".encode())
        if not ok:
            return (401, "UNAUTHORIZED", "this request lacks the fleet's token: use "
                    "`tether --fleet URL …`, which reads it from the fleet database")
        return None

    def _refused(self, req: Request) -> Response | None:
        why = self._why_not(req)
        return None if why is None else _error(*why)

    async def attach(self, ws: WebSocket) -> None:
        """A terminal bridged to the exec's monitor, as ``tether web``'s (the messages
        of ``tether.web.bridge``): binary frames are terminal bytes, text frames JSON
        control (``resize``, ``detach``; ``exit`` or ``error`` back). Read-only unless
        ``ro=0`` and a valid grant (the module's docstring); ``ro=0`` without one is
        refused, never quietly made read-only."""
        from tether.web.bridge import bridge

        await ws.accept()
        why = self._why_not(ws)
        try:
            if why is not None:
                raise TetherError(-32600, why[1], why[2])
            exec_id, _ = await self._target(ws)
            x = await self.dispatch("exec.get", {"exec": exec_id})
            if x["state"] != "RUNNING":
                raise TetherError(-32600, "NOT_RUNNING", f"exec {exec_id} is {x['state']}: "
                                  "there is nothing to attach to")
            q = ws.query_params
            rows, cols = int(q.get("rows", 24)), int(q.get("cols", 80))
            ro = q.get("ro") != "0"
            if not ro:
                target = {k: q[k] for k in ("exec", "lineage") if q.get(k)}
                nonce = ws.headers.get(GRANT_HEADER, "")
                if not nonce or self.grants is None or not await self.grants(nonce, target):
                    raise TetherError(-32600, "WRITE_NOT_GRANTED", (
                        "typing into a session on another host needs a grant written into "
                        "the fleet database (`tether --fleet URL attach WORK` writes one; "
                        "it is used once, within a minute); add ro=1 to watch"))
        except (TetherError, ValueError, KeyError) as e:
            await ws.send_text(json.dumps({"error": getattr(e, "message", str(e))}))
            await ws.close()
            return
        await bridge(ws, Path(x["socket"]), read_only=ro, rows=rows, cols=cols)

    async def _target(self, req: Request | WebSocket) -> tuple[str, str | None]:
        """(exec id, lineage id or None) named by ``?exec=`` or ``?lineage=``."""
        q = req.query_params
        if q.get("lineage"):
            rec = await self.dispatch("lineage.get", {"lineage": q["lineage"]})
            return str(rec["exec"]), str(rec["id"])
        if q.get("exec"):
            x = await self.dispatch("exec.get", {"exec": q["exec"]})
            return str(x["id"]), None
        raise TetherError(-32602, "INVALID_PARAMS", "name an exec (?exec=ID) or a lineage "
                          "(?lineage=ID)")

    async def logs(self, req: Request) -> Response:
        """Raw log bytes from ``offset``; with ``follow=1`` until the exec ends. Stream
        ``all``: stdout and stderr interleaved, each part a frame (``FRAMES``)."""
        if (refused := self._refused(req)) is not None:
            return refused
        q = req.query_params
        try:
            exec_id, _ = await self._target(req)
            x = await self.dispatch("exec.get", {"exec": exec_id})
            stream = q.get("stream") or ("pty" if x["spec"].get("tty") else "stdout")
            offset, follow = int(q.get("offset", "0")), q.get("follow") == "1"
            first = await self._chunk(exec_id, stream, offset, 0.0)
        except (TetherError, ValueError, KeyError) as e:
            return _failed(e)

        async def body() -> AsyncIterator[bytes]:
            chunk = first
            while True:
                if chunk["data"] and stream == "all":
                    at = 0
                    for name, n in chunk.get("runs", []):
                        part = chunk["data"][at:at + n]
                        at += n
                        yield FRAMES[name] + len(part).to_bytes(4, "big") + part
                elif chunk["data"]:
                    yield chunk["data"]
                elif chunk.get("eof") or not follow:
                    return
                chunk = await self._chunk(exec_id, stream, chunk["offset"],
                                          LOG_WAIT if follow else 0.0)
        return StreamingResponse(body(), media_type="application/octet-stream")

    async def _chunk(self, exec_id: str, stream: str, offset: int, wait: float
                     ) -> dict[str, Any]:
        reply = await self.dispatch("exec.logs", {"exec": exec_id, "stream": stream,
                                                  "offset": offset, "limit": 1024 * 1024,
                                                  "wait": wait})
        data = reply.get("data", b"")
        if isinstance(data, str):
            data = base64.b64decode(data)
        return {**reply, "data": data}

    async def lineage(self, req: Request) -> Response:
        """One lineage's record (``lineage.get``): ``tether --fleet URL lineage inspect``."""
        if (refused := self._refused(req)) is not None:
            return refused
        try:
            rec = await self.dispatch("lineage.get", {"lineage": req.query_params["lineage"]})
        except (TetherError, ValueError, KeyError) as e:
            return _failed(e)
        return JSONResponse(rec)

    async def events(self, req: Request) -> Response:
        """This host's journal after ``since`` as JSON lines, optionally only one exec's
        or lineage's; with ``follow=1``, forever."""
        if (refused := self._refused(req)) is not None:
            return refused
        q = req.query_params
        try:
            since, follow = int(q.get("since", "0")), q.get("follow") == "1"
            target = await self._target(req) if (q.get("exec") or q.get("lineage")) else None
        except (TetherError, ValueError, KeyError) as e:
            return _failed(e)

        def wanted(ev: dict[str, Any]) -> bool:
            if target is None:
                return True
            exec_id, lineage = target
            return ev.get("exec") == exec_id or (
                lineage is not None and (ev.get("data") or {}).get("lineage") == lineage)

        async def body() -> AsyncIterator[bytes]:
            cursor = since
            while True:
                page = await self.dispatch("events.list", {"since": cursor, "limit": 1000})
                for ev in page["events"]:
                    if wanted(ev):
                        yield json.dumps(ev).encode() + b"\n"
                cursor = page["next"]
                if len(page["events"]) < 1000:
                    if not follow:
                        return
                    await asyncio.sleep(EVENT_POLL)
        return StreamingResponse(body(), media_type="application/x-ndjson")


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _failed(e: Exception) -> Response:
    if isinstance(e, TetherError):
        return _error(404 if e.code.endswith("NOT_FOUND") else 400, e.code, e.message)
    return _error(400, "INVALID_PARAMS", f"bad query: {e}")


class _Server(uvicorn.Server):
    """uvicorn inside the daemon's loop: the daemon owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(listen: str) -> socket.socket:
    """A listening TCP socket for ``ADDR:PORT`` (port 0: any free one)."""
    addr, _, port = listen.rpartition(":")
    try:
        return socket.create_server((addr.strip("[]") or "127.0.0.1", int(port)),
                                    reuse_port=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot listen on {listen!r} for the fleet API ({e}): set "
                         "TETHER_FLEET_LISTEN to a free ADDR:PORT") from None


async def serve(api: HostApi, sock: socket.socket, *, certfile: str | None = None,
                keyfile: str | None = None) -> None:
    """Serve until cancelled (the fleet service's task group owns this)."""
    cfg = uvicorn.Config(api.app, log_config=None, access_log=False, lifespan="off",
                         ssl_certfile=certfile, ssl_keyfile=keyfile)
    server = _Server(cfg)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
