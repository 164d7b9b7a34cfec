"""The dashboard's HTTP side: a starlette application over the SDK's ``AsyncClient``.

Routes: the page (``/`` and each view's path: ``/execs``, ``/exec/<id>``, ``/agents``,
``/lineage/<id>``, ``/sandboxes``, ``/jobs``, ``/hooks``, ``/events``: one HTML file, the
script shows the view), ``/static/…``, one JSON route per view (``/api/overview``,
``/api/execs``, ``/api/lineages``, ``/api/exec/<id>``, ``/api/lineage/<id>``,
``/api/sandboxes``, ``/api/jobs``, ``/api/hooks``, ``/api/events/recent``), the event
stream (``/api/events``) and logs (``/api/logs/<exec>``) as server-sent events, ``POST``
actions (kill, revive, reap-lineage, reap, start), the terminal WebSocket
(``/api/term/<exec>``) and ``/metrics``. ``gate.Gate`` checks every request first. Every
action is the SDK call the CLI makes; a tether error comes back as
``{"error": {"code", "message"}}`` with a 4xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from tether.client.aio import AsyncClient
from tether.client.errors import DaemonUnavailable, TetherError
from tether.web import streams, views
from tether.web.auth import Auth
from tether.web.bridge import bridge
from tether.web.gate import Gate
from tether.web.watch import Watch

STATIC = Path(__file__).parent / "static"
SESSION_META = '<meta name="tether-session" content="">'
AUTH_WAIT = 5.0  # seconds a terminal WebSocket has to send its key


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(msgspec.to_builtins(obj)), status_code=status,
                    media_type="application/json", headers={"Cache-Control": "no-store"})


def _error(e: TetherError | DaemonUnavailable, status: int = 400) -> Response:
    code = e.code if isinstance(e, TetherError) else "DAEMON_UNAVAILABLE"
    message = e.message if isinstance(e, TetherError) else str(e)
    if isinstance(e, TetherError) and code.endswith("NOT_FOUND"):
        status = 404
    return JSONResponse({"error": {"code": code, "message": message}},
                        status_code=503 if isinstance(e, DaemonUnavailable) else status)


def _refused(code: str, message: str, status: int = 400) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(home: Path, token: str, *, read_only: bool = False,
               loopback_only: bool = True, cwd: str | None = None) -> ASGIApp:
    """The dashboard for the daemon of ``home``; ``read_only`` refuses every action.
    ``loopback_only``: it listens on a loopback address, so every ``Host`` must name one.
    ``cwd``: the directory the page suggests for a command it starts."""
    # Short calls give up on a dead daemon after 2 s, so the page says so at once; the
    # event streams keep the SDK's default patience (they resume after a restart).
    client = AsyncClient(home, autostart=False, reconnect=2.0)
    auth = Auth(token)
    watch = Watch(home)
    costs = views.Costs(client, watch)
    page = (STATIC / "index.html").read_text()
    assert SESSION_META in page
    suggested = cwd or os.getcwd()

    async def call(fn: Callable[[], Awaitable[Any]]) -> Response:
        try:
            return _json(await fn())
        except (TetherError, DaemonUnavailable) as e:
            return _error(e)

    async def index(request: Request) -> Response:
        session = request.scope.get("state", {}).get("session") or ""
        body = page.replace(SESSION_META, f'<meta name="tether-session" '
                                          f'content="{html.escape(session)}">')
        return Response(body, media_type="text/html",
                        headers={"Cache-Control": "no-store"})

    def query(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    async def overview(request: Request) -> Response:
        async def get() -> dict[str, Any]:
            out = await views.overview(client, costs, watch)
            return {**out, "read_only": read_only, "cwd": suggested}
        return await call(get)

    async def execs(request: Request) -> Response:
        async def get() -> dict[str, Any]:
            out = await views.execs(client, query(request))
            return {**out, "read_only": read_only, "cwd": suggested}
        return await call(get)

    async def needs(request: Request) -> Response:
        async def get() -> dict[str, Any]:
            health = await client.health()
            return {"health": health, "read_only": read_only,
                    "needs": await views.live_needs(client, costs, watch)}
        return await call(get)

    async def lineages(request: Request) -> Response:
        return await call(lambda: views.lineages(client, costs, watch, query(request)))

    async def one_exec(request: Request) -> Response:
        return await call(lambda: views.exec_view(client, request.path_params["exec"]))

    async def one_lineage(request: Request) -> Response:
        return await call(lambda: views.lineage_view(client, costs, watch, home,
                                                     request.path_params["lineage"]))

    async def sandboxes(request: Request) -> Response:
        return await call(lambda: views.sandboxes(client))

    async def jobs(request: Request) -> Response:
        return await call(client.scheduler_status)

    async def hooks(request: Request) -> Response:
        return await call(client.hook_list)

    async def recent_events(request: Request) -> Response:
        limit = views.ints(request.query_params.get("limit"), 200, 1000) or 200
        return await call(lambda: client.events_list(last=True, limit=limit))

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
        return StreamingResponse(streams.events(home, since), media_type="text/event-stream",
                                 headers=streams.HEADERS)

    async def logs(request: Request) -> Response:
        q = request.query_params
        names = (q.get("streams") or q.get("stream") or "stdout").split(",")
        if not all(n in streams.LOGS for n in names) or len(set(names)) != len(names):
            return _refused("INVALID_PARAMS", "streams is a list of stdout, stderr and pty")
        last = request.headers.get("last-event-id") or q.get("offset")
        offsets = streams.parse_offsets(names, last)
        tail = views.ints(q.get("tail"), 256 * 1024, 1 << 30)
        return StreamingResponse(
            streams.logs(home, request.path_params["exec"], names, offsets, tail),
            media_type="text/event-stream", headers=streams.HEADERS)

    async def action(request: Request) -> Response:
        if read_only:
            return _refused("READ_ONLY", "this dashboard was started with --read-only", 403)
        what = request.path_params["action"]
        try:
            body = await request.json() if await request.body() else {}
        except ValueError:
            return _refused("INVALID_PARAMS", "the body must be a JSON object")
        if not isinstance(body, dict):
            return _refused("INVALID_PARAMS", "the body must be a JSON object")
        ref = str(body.get("ref", ""))
        if what == "kill":
            return await call(lambda: client.exec_cancel(ref, reason="killed from tether web"))
        if what == "revive":
            return await call(lambda: client.lineage_resolve(ref, "revive"))
        if what == "reap-lineage":
            return await call(lambda: client.lineage_resolve(ref, "reap"))
        if what == "reap":
            return await call(client.agent_reap)
        if what == "start":
            return await start(body)
        return _refused("UNKNOWN_ACTION", f"no action {what!r}", 404)

    async def start(body: dict[str, Any]) -> Response:
        """Start a command in a sandbox (default: ``default``) with ``cwd``, a project
        directory, as its writable place. Never unsandboxed: where the default sandbox
        cannot confine it, the daemon refuses (the dashboard never asks for the
        fallback ``tether run`` has)."""
        argv = body.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            return _refused("INVALID_PARAMS", "argv must be a non-empty list of strings")
        cwd = body.get("cwd")
        sandbox = str(body.get("sandbox") or "default")
        if sandbox == "default" and not (isinstance(cwd, str) and cwd):
            return _refused("CWD_REQUIRED", "give the command a working directory: a "
                            "project directory, which the default sandbox makes its only "
                            "writable place")
        return await call(lambda: client.exec_start(
            argv, sandbox=sandbox, cwd=cwd if isinstance(cwd, str) and cwd else None,
            name=body.get("name") or None, tty=bool(body.get("tty"))))

    async def term(ws: WebSocket) -> None:
        await ws.accept()
        if not ws.scope.get("state", {}).get("authenticated"):
            try:  # a browser cannot set a WebSocket's headers: its key comes first
                first = await asyncio.wait_for(ws.receive_text(), AUTH_WAIT)
                key = json.loads(first).get("auth")
            except Exception:
                key = None
            if not (isinstance(key, str) and auth.valid(key)):
                await ws.send_text(json.dumps({"error": "not authenticated: reload the page "
                                               "from the URL `tether web` printed"}))
                await ws.close(4401)
                return
        await ws.send_text(json.dumps({"ok": True}))
        ro = read_only or ws.query_params.get("ro") == "1"
        rows = views.ints(ws.query_params.get("rows"), 24, 1000) or 24
        cols = views.ints(ws.query_params.get("cols"), 80, 1000) or 80
        try:
            x = await client.exec_get(ws.path_params["exec"])
        except (TetherError, DaemonUnavailable) as e:
            await ws.send_text(json.dumps({"error": str(e)}))
            await ws.close()
            return
        if x.socket is None or x.state != "RUNNING":
            await ws.send_text(json.dumps({"error": f"exec {x.name or x.id} is {x.state}: "
                                                    "no terminal"}))
            await ws.close()
            return
        await bridge(ws, Path(x.socket), read_only=ro, rows=rows, cols=cols)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        watcher = asyncio.create_task(watch.run(), name="tether-web-watch")
        try:
            yield
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await client.close()

    app = Starlette(routes=[
        Route("/", index),
        *(Route(p, index) for p in ("/execs", "/agents", "/sandboxes", "/jobs", "/hooks",
                                     "/events", "/exec/{exec}", "/lineage/{lineage}")),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/overview", overview),
        Route("/api/needs", needs),
        Route("/api/execs", execs),
        Route("/api/lineages", lineages),
        Route("/api/exec/{exec}", one_exec),
        Route("/api/lineage/{lineage}", one_lineage),
        Route("/api/sandboxes", sandboxes),
        Route("/api/jobs", jobs),
        Route("/api/hooks", hooks),
        Route("/api/events/recent", recent_events),
        Route("/metrics", metrics),
        Route("/api/events", events),
        Route("/api/logs/{exec}", logs),
        Route("/api/{action}", action, methods=["POST"]),
        WebSocketRoute("/api/term/{exec}", term),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], lifespan=lifespan)
    return Gate(app, auth, loopback_only=loopback_only)
