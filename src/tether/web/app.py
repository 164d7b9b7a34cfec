"""The dashboard's HTTP side: a starlette application over the SDK's ``AsyncClient``.

Routes: ``/`` (the page), ``/static/…``, ``/api/state`` (sandboxes, execs, lineages,
their cost and budgets, scheduled jobs, webhooks),
``/api/events`` (server-sent events from ``events.subscribe``; the browser's
``Last-Event-ID`` resumes it), ``/api/logs/{exec}`` (a log followed as server-sent
events, ``id`` = the byte offset), ``POST`` actions (kill, resolve, reap, start), and
``/api/term/{exec}`` (the terminal WebSocket). Every action is the SDK call the CLI
makes; a tether error comes back as ``{"error": {"code", "message"}}`` with a 4xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from tether.client.aio import AsyncClient
from tether.client.errors import DaemonUnavailable, TetherError
from tether.web import auth
from tether.web.bridge import bridge

STATIC = Path(__file__).parent / "static"
EXEC_LIMIT = 200  # the newest execs the page lists
KEEPALIVE = 15.0  # seconds between SSE comments, so proxies keep the stream open


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(msgspec.to_builtins(obj)), status_code=status,
                    media_type="application/json")


def _error(e: TetherError | DaemonUnavailable, status: int = 400) -> Response:
    code = e.code if isinstance(e, TetherError) else "DAEMON_UNAVAILABLE"
    message = e.message if isinstance(e, TetherError) else str(e)
    return JSONResponse({"error": {"code": code, "message": message}},
                        status_code=503 if isinstance(e, DaemonUnavailable) else status)


async def _events(own: AsyncClient, since: int) -> AsyncIterator[bytes]:
    """The journal after ``since`` as server-sent events (``id`` = gseq, so the
    browser's reconnect resumes exactly there); the SDK resumes across restarts."""
    sub = own.subscribe(since=since).__aiter__()
    while True:
        try:
            ev = await asyncio.wait_for(sub.__anext__(), KEEPALIVE)
        except TimeoutError:
            yield b": keepalive\n\n"
            continue
        except (TetherError, DaemonUnavailable) as e:
            body = json.dumps({"code": getattr(e, "code", "DAEMON_UNAVAILABLE"),
                               "message": str(e)})
            yield f"event: failure\ndata: {body}\n\n".encode()
            return
        yield (f"id: {ev.gseq}\ndata: ".encode() + msgspec.json.encode(ev) + b"\n\n")


async def _logs(own: AsyncClient, exec_id: str, stream_name: str, offset: int
            ) -> AsyncIterator[bytes]:
    """A log followed from ``offset`` as server-sent events (``id`` = the next offset)."""
    yield b"retry: 1000\n\n"
    while True:
        try:
            chunk = await own.exec_logs(exec_id, stream=stream_name, offset=offset,
                                    limit=1 << 16, wait=KEEPALIVE)
        except (TetherError, DaemonUnavailable) as e:
            body = json.dumps({"message": str(e)})
            yield f"event: failure\ndata: {body}\n\n".encode()
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


class TokenGate:
    """Every request shows the token (cookie, bearer or ``?token=``); changes and
    WebSockets come from our own origin."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        req = HTTPConnection(scope)
        presented = req.cookies.get(auth.COOKIE)
        bearer = headers.get("authorization", "")
        if bearer.startswith("Bearer "):
            presented = bearer[7:]
        query = req.query_params.get("token")
        if scope["type"] == "http" and query is not None and auth.matches(query, self.token):
            resp = RedirectResponse(scope["path"], status_code=303)
            resp.set_cookie(auth.COOKIE, self.token, httponly=True, samesite="strict")
            await resp(scope, receive, send)
            return
        ok = auth.matches(presented, self.token)
        if ok and (scope["type"] == "websocket" or scope.get("method") == "POST"):
            ok = auth.same_origin(headers.get("origin"), headers.get("host"))
        if not ok:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4401})
                return
            await PlainTextResponse(
                "tether web: open the URL `tether web` printed (it carries the token), "
                "or send Authorization: Bearer <token> (the token is in <home>/web.token)\n",
                status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(home: Path, token: str, *, read_only: bool = False) -> ASGIApp:
    """The dashboard for the daemon of ``home``; ``read_only`` refuses every action."""
    # Short calls give up on a dead daemon after 2 s, so the page says so at once; the
    # event streams keep the SDK's default patience (they resume after a restart).
    client = AsyncClient(home, autostart=False, reconnect=2.0)

    async def call(fn: Callable[[], Awaitable[Any]]) -> Response:
        try:
            return _json(await fn())
        except (TetherError, DaemonUnavailable) as e:
            return _error(e)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def state(request: Request) -> Response:
        async def gather() -> dict[str, Any]:
            status = await client.status()
            sandboxes = await client.sandbox_list()
            execs = (await client.exec_list(all=True))[-EXEC_LIMIT:]
            lineages = await client.lineage_list(all=True)
            return {"status": status, "sandboxes": sandboxes, "execs": execs,
                    "lineages": lineages, "read_only": read_only,
                    "cost": await client.cost_report("lineage"),
                    "budgets": await client.budget_show(),
                    "scheduler": await client.scheduler_status(),
                    "hooks": await client.hook_list()}
        return await call(gather)

    async def metrics(request: Request) -> Response:
        """Prometheus scrapes this (with ``Authorization: Bearer <token>``)."""
        try:
            m = await client.metrics()
        except (TetherError, DaemonUnavailable) as e:
            return _error(e)
        return Response(m.text, media_type=m.content_type)

    async def events(request: Request) -> Response:
        last = request.headers.get("last-event-id") or request.query_params.get("since") or "0"
        since = int(last) if last.isdigit() else 0

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            # A connection of its own: a subscription and its long polls must not
            # queue behind (or hold up) the page's other calls.
            own = AsyncClient(home, autostart=False)
            try:
                async for chunk in _events(own, since):
                    yield chunk
            finally:
                await own.close()
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    async def logs(request: Request) -> Response:
        exec_id = request.path_params["exec"]
        stream_name = request.query_params.get("stream", "stdout")
        last = request.headers.get("last-event-id") or request.query_params.get("offset", "0")
        offset = int(last) if last.isdigit() else 0

        async def stream() -> AsyncIterator[bytes]:
            own = AsyncClient(home, autostart=False)
            try:
                async for part in _logs(own, exec_id, stream_name, offset):
                    yield part
            finally:
                await own.close()
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def action(request: Request) -> Response:
        if read_only:
            return JSONResponse({"error": {"code": "READ_ONLY", "message":
                                           "this dashboard was started with --read-only"}},
                                status_code=403)
        what = request.path_params["action"]
        body: dict[str, Any] = {}
        if await request.body():
            body = await request.json()
        ref = str(body.get("ref", ""))
        if what == "kill":
            return await call(lambda: client.exec_cancel(ref))
        if what == "revive":
            return await call(lambda: client.lineage_resolve(ref, "revive"))
        if what == "reap-lineage":
            return await call(lambda: client.lineage_resolve(ref, "reap"))
        if what == "reap":
            return await call(client.agent_reap)
        if what == "start":
            argv = [str(a) for a in body.get("argv", [])]
            return await call(lambda: client.exec_start(
                argv, sandbox=str(body.get("sandbox") or "default"),
                name=body.get("name") or None, tty=bool(body.get("tty"))))
        return JSONResponse({"error": {"code": "UNKNOWN_ACTION", "message": what}}, 404)

    async def term(ws: WebSocket) -> None:
        await ws.accept()
        ro = read_only or ws.query_params.get("ro") == "1"
        rows = int(ws.query_params.get("rows", "24") or 24)
        cols = int(ws.query_params.get("cols", "80") or 80)
        try:
            x = await client.exec_get(ws.path_params["exec"])
        except (TetherError, DaemonUnavailable) as e:
            await ws.send_text(json.dumps({"error": str(e)}))
            await ws.close()
            return
        if x.socket is None:
            await ws.send_text(json.dumps({"error": f"exec {x.id} is {x.state}: no terminal"}))
            await ws.close()
            return
        await bridge(ws, Path(x.socket), read_only=ro, rows=rows, cols=cols)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.close()

    app = Starlette(routes=[
        Route("/", index),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/state", state),
        Route("/metrics", metrics),
        Route("/api/events", events),
        Route("/api/logs/{exec}", logs),
        Route("/api/{action}", action, methods=["POST"]),
        WebSocketRoute("/api/term/{exec}", term),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], lifespan=lifespan)
    return TokenGate(app, token)
