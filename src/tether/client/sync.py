"""Transitional: the blocking client with the replies of old, plain JSON values.

The CLI indexes replies as dicts (``c.exec_get(ref)["id"]``) and prints them with
``json.dumps``; it imports this ``Client`` until it is switched to the typed
:class:`tether.client.blocking.Client` (``tether.Client``). Then this module goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import msgspec

from tether.client import blocking
from tether.client.core import RawBlocking, Request

T = TypeVar("T")


class Client(RawBlocking, blocking.Client):
    def _invoke(self, req: Request[T]) -> T:
        """The result as the daemon sent it (``exec.list``: ``{"execs": [...]}``)."""
        result: T = self._call(req.method, req.params)
        return result

    def subscribe(self, *, since: int = 0,  # type: ignore[override]
                  sandbox: str | None = None) -> Iterator[dict[str, Any]]:
        events = super().subscribe(since=since, sandbox=sandbox)
        try:
            for ev in events:
                yield msgspec.to_builtins(ev)
        finally:
            events.close()
