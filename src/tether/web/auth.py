"""The dashboard's token: made once, kept 0600 in the home, checked on every request.

A browser presents it once in the URL (``/?token=…``); the server answers with an
HttpOnly, SameSite=Strict cookie and a redirect that drops it from the address bar.
Scripts send ``Authorization: Bearer …``. Requests that change something (POST) and
WebSocket upgrades must also come from the dashboard's own origin.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from tether.hostio.atomic import atomic_write

COOKIE = "tether_token"
TOKEN_FILE = "web.token"


def load_or_make(home: Path) -> str:
    """The home's dashboard token; made (0600) on first use, kept across restarts."""
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        token = secrets.token_urlsafe(24)
        atomic_write(str(path), token.encode())  # 0600
        return token
    with os.fdopen(fd) as f:
        token = f.read().strip()
    if len(token) < 16:
        token = secrets.token_urlsafe(24)
        atomic_write(str(path), token.encode())  # 0600
    return token


def matches(presented: str | None, token: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


def same_origin(origin: str | None, host: str | None) -> bool:
    """A browser's ``Origin`` names the page that sent the request: it must be ours."""
    if origin is None:
        return True  # not a browser (curl, scripts): the token alone decides
    return host is not None and origin.split("://", 1)[-1] == host
