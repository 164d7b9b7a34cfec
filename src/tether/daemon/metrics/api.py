"""``daemon.metrics``: the Prometheus exposition as a JSON-RPC result, shared by
``tether metrics`` and the web listener's ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.daemon.metrics.exposition import exposition
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

if TYPE_CHECKING:
    from tether.daemon.root import Daemon

METHODS: dict[str, type[Any]] = {"daemon.metrics": m.Empty}
LONG: frozenset[str] = frozenset()
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def handlers(d: Daemon) -> dict[str, Handler]:
    async def daemon_metrics(p: m.Empty, c: Connection) -> Any:
        return {"content_type": CONTENT_TYPE, "text": await exposition(d)}

    return {"daemon.metrics": daemon_metrics}
