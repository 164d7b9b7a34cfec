"""A placement's local request key, ``fleet-<work id>-<generation>``: one exec start per
generation. The service makes it; the relay reads the placement back from an exec's key."""

from __future__ import annotations

from typing import Any

REQUEST_PREFIX = "fleet-"


def request_key(w: dict[str, Any]) -> str:
    """The local request key of a placement's generation: one start per generation."""
    return f"{REQUEST_PREFIX}{w['id']}-{w['generation']}"


def placement(key: str | None) -> tuple[int, int] | None:
    """(work id, generation) of a local request key ``fleet-<id>-<generation>``."""
    if not key or not key.startswith(REQUEST_PREFIX):
        return None
    ident, _, gen = key[len(REQUEST_PREFIX):].partition("-")
    return (int(ident), int(gen)) if ident.isdigit() and gen.isdigit() else None
