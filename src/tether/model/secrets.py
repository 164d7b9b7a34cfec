"""Secrets in URLs, shown without them (pure string work).

A webhook's URL may carry ``user:password@``, a fleet's PostgreSQL URL a password (in its
authority, a ``password`` query parameter, or ``password=`` in libpq's key=value form).
Whatever tether prints, logs or replies shows them as :data:`HIDDEN` (docs/SECURITY.md,
"Secrets")."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

HIDDEN = "***"
_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)", re.IGNORECASE)


def _split(url: str) -> tuple[str, str, str, str, str] | None:
    if "://" not in url:
        return None
    try:
        return urlsplit(url)
    except ValueError:
        return None


def has_password(url: str) -> bool:
    """Whether ``url`` (a URL, or libpq's ``key=value`` pairs) carries a password."""
    parts = _split(url)
    if parts is None:
        return bool(_KV_PASSWORD.search(url))
    scheme, netloc, query = parts[0], parts[1], parts[3]
    userinfo = netloc.rpartition("@")[0] if "@" in netloc else ""
    if userinfo and scheme.lower().startswith("http"):
        return True  # a user name alone may be a token
    return ":" in userinfo or any(k.lower() == "password"
                                  for k, _ in parse_qsl(query, keep_blank_values=True))


def redact_url(url: str) -> str:
    """``url`` with its password hidden; an HTTP URL's whole user info (a token is often
    its user name: ``https://TOKEN@host``), a database URL's password only."""
    parts = _split(url)
    if parts is None:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + HIDDEN, url)
    scheme, netloc, path, query, fragment = parts
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        if scheme.lower().startswith("http"):
            netloc = f"{HIDDEN}@{host}"
        else:
            netloc = f"{user}{':' + HIDDEN if colon else ''}@{host}"
    if query:
        query = "&".join(
            f"{k}={HIDDEN}" if k.lower() == "password" else (f"{k}={v}" if v or "=" in raw
                                                            else k)
            for raw in query.split("&") for k, _, v in [raw.partition("=")])
    return urlunsplit((scheme, netloc, path, query, fragment))
