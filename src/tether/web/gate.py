"""The checks every request passes before a route sees it (``auth`` says why):

* the page (``/``, ``/execs``, ``/exec/<id>``, …) and its assets are served to anyone: they
  hold no data. A page URL carrying ``?token=`` is answered with a session key in the page
  (``scope["state"]["session"]``), or 401 for a wrong token; it is never redirected;
* every ``/api/…`` request and ``/metrics`` needs ``Authorization: Bearer <token or key>``;
  a terminal WebSocket without that header must send its key as its first message (the
  route checks it: ``scope["state"]["authenticated"]`` is False);
* POSTs and WebSocket upgrades come from the dashboard's own origin;
* on a loopback address, the ``Host`` must be a loopback name;
* every response carries a strict Content-Security-Policy (scripts from the dashboard's
  own files only: text an agent wrote can never run as script here), no referrer, and
  no framing.
"""

from __future__ import annotations

import re

from starlette.datastructures import QueryParams
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.web.auth import Auth, bearer, loopback_host, same_origin

#: The page's own views: one HTML file, the script shows the view the path names.
PAGES = re.compile(r"^/(?:|execs|agents|sandboxes|jobs|hooks|events|"
                   r"exec/[A-Za-z0-9_.-]{1,128}|lineage/[A-Za-z0-9_.-]{1,128})$")
PUBLIC = re.compile(r"^/(?:static/[A-Za-z0-9_./-]+|favicon\.ico)$")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"cross-origin-opener-policy", b"same-origin"),
                    (b"cross-origin-resource-policy", b"same-origin")]
HOW = ("tether web: open the URL `tether web` printed (it carries the token), or send "
       "Authorization: Bearer <token> (the token is in <home>/web.token)\n")


class Gate:
    def __init__(self, app: ASGIApp, auth: Auth, *, loopback_only: bool) -> None:
        self.app = app
        self.auth = auth
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        host = headers.get("host")
        path: str = scope["path"]
        state = scope.setdefault("state", {})

        async def refuse(status: int, text: str) -> None:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 4000 + status})
                return
            await PlainTextResponse(text, status_code=status,
                                    headers={"Cache-Control": "no-store"})(
                scope, receive, secured)

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if self.loopback_only and not loopback_host(host):
            await refuse(403, f"tether web: Host {host!r} is not a loopback name; open the "
                         "URL `tether web` printed\n")
            return
        if kind == "http" and scope["method"] in ("GET", "HEAD") and PUBLIC.match(path):
            await self.app(scope, receive, secured)
            return
        if kind == "http" and scope["method"] in ("GET", "HEAD") and PAGES.match(path):
            token = QueryParams(scope["query_string"]).get("token")
            if token is not None:
                if not self.auth.valid(token):
                    await refuse(401, HOW)
                    return
                state["session"] = self.auth.issue()
            await self.app(scope, receive, secured)
            return
        presented = bearer(headers.get("authorization"))
        authenticated = self.auth.valid(presented)
        if presented is not None and not authenticated:
            await refuse(401, HOW)
            return
        # A browser always names the page that opened a socket or sent a form.
        changes = kind == "websocket" or scope["method"] not in ("GET", "HEAD")
        if changes and not same_origin(headers.get("origin"), host):
            await refuse(403, "tether web: refused a request from another origin\n")
            return
        if kind == "websocket" and path.startswith("/api/term/"):
            state["authenticated"] = authenticated  # else: its first message
            await self.app(scope, receive, send)
            return
        if not authenticated:
            await refuse(401, HOW)
            return
        await self.app(scope, receive, secured)
