"""The ``retention.*`` methods (``exec.remove`` is an exec method; the service is here)."""

from __future__ import annotations

from typing import Any

from tether.daemon.root import Daemon
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

METHODS: dict[str, type[Any]] = {
    "retention.prune": m.RetentionPrune,
    "retention.df": m.Empty,
}
LONG = frozenset({"retention.prune"})


def handlers(d: Daemon) -> dict[str, Handler]:
    async def prune(p: m.RetentionPrune, c: Connection) -> Any:
        return await d.tasks.owned(d.retention.prune_reply(p.older_than, p.dry_run))

    async def df(p: m.Empty, c: Connection) -> Any:
        return await d.retention.df()

    return {"retention.prune": prune, "retention.df": df}
