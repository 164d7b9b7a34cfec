"""Who may use the dashboard: the home's token, the session keys pages get for it, and
the checks of where a request comes from.

No ambient credential: a browser sends a host's cookies to *every* port of that host,
so a cookie for ``127.0.0.1`` would reach any local server the user's browser visits
(an agent's dev server among them). Instead:

* the token (``<home>/web.token``, 0600, kept across restarts) is shown once, in the
  URL ``tether web`` prints; the page it opens is served with a fresh **session key**
  in a ``<meta>`` element, and the page's script removes the token from the address bar;
* the page sends its key as ``Authorization: Bearer <key>`` on every request (its event
  streams are read with ``fetch``, not ``EventSource``, so they carry it too), and as the
  first message of a terminal WebSocket (a browser cannot set a WebSocket's headers);
* the page keeps the key in ``localStorage``: readable by scripts of the dashboard's own
  origin only (scheme, host *and port*), never sent by the browser on its own. Keys live
  in this process's memory: a restarted ``tether web`` has none, so a key read from a
  port that another server took over after ``tether web`` stopped opens nothing.
* scripts and Prometheus send the token itself as ``Authorization: Bearer <token>``.

Requests that change something (POST) and WebSocket upgrades must also come from the
dashboard's own origin, and on a loopback address every request must name a loopback
host (a DNS-rebinding page names its own).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from collections import OrderedDict
from pathlib import Path

from tether.hostio.atomic import atomic_write

TOKEN_FILE = "web.token"
#: The most session keys kept (the oldest is forgotten first): each page load with the
#: token makes one; a page whose key was forgotten asks for the URL again.
MAX_SESSIONS = 256


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


class Auth:
    """The token and the session keys issued for it (in memory: this process only)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self._sessions: OrderedDict[bytes, float] = OrderedDict()

    def issue(self) -> str:
        """A new session key, for a page that showed the token."""
        key = secrets.token_urlsafe(32)
        self._sessions[_digest(key)] = time.time()
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return key

    def valid(self, presented: str | None) -> bool:
        """The token itself, or a session key this process issued."""
        if not presented or len(presented) > 256:
            return False
        if matches(presented, self.token):
            return True
        d = _digest(presented)
        if d in self._sessions:
            self._sessions.move_to_end(d)  # in use: forgotten last
            return True
        return False


def _digest(key: str) -> bytes:
    # Looked up by digest, so a dict probe reveals nothing about a key's characters.
    return hashlib.sha256(key.encode()).digest()


def bearer(authorization: str | None) -> str | None:
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None


def same_origin(origin: str | None, host: str | None) -> bool:
    """A browser's ``Origin`` names the page that sent the request: it must be ours."""
    if origin is None:
        return True  # not a browser (curl, scripts): the credential alone decides
    return host is not None and origin.split("://", 1)[-1] == host


def loopback_host(host: str | None) -> bool:
    """Whether a ``Host`` header names a loopback address (``127.0.0.1:8787``,
    ``localhost``, ``[::1]:8787``): a page that reached us through DNS rebinding sends
    its own name instead."""
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if name.startswith("[") and "]" in name:
        name = name[1:name.index("]")]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
