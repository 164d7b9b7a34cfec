"""The digest's JSON-RPC methods (``digest.*``), added to the daemon's method table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from tether.digest.periods import BadPeriod
from tether.model.errors import RpcCode, TetherError
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

if TYPE_CHECKING:
    from tether.daemon.api import Daemon

METHODS: dict[str, type[Any]] = {
    "digest.build": m.DigestBuild,
    "digest.show": m.DigestShow,
    "digest.recent": m.DigestRecent,
    "digest.lineage": m.LineageRef,
}
#: A pass may run a summarizer for minutes: served as a task, like the other long polls.
LONG = frozenset({"digest.build"})


def handlers(d: Daemon) -> dict[str, Handler]:
    async def build(p: m.DigestBuild, c: Connection) -> Any:
        r = await d.digest.build(p.summarizer)
        return {"built": r.built, "failed": r.failed, "drafts": r.drafts,
                "unchanged": r.unchanged, "nodes": r.nodes}

    async def show(p: m.DigestShow, c: Connection) -> Any:
        try:
            return d.digest.show(p.level, p.label, versions=p.versions)
        except BadPeriod as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PERIOD", str(e),
                              {"level": p.level, "label": p.label}) from None

    async def recent(p: m.DigestRecent, c: Connection) -> Any:
        return {"nodes": await d.digest.recent(p.level, p.count)}

    async def lineage(p: m.LineageRef, c: Connection) -> Any:
        rec = d.agents.resolve(p.lineage)
        attempts = d.store.list_execs_of_lineage(rec.id)
        # Every event of every attempt (a long agent's turns): read in a worker thread.
        events = await d.store.reads(lambda db: d.digest.tables.events_of_execs(
            [e.id for e in attempts], db))
        return {"lineage": d.agents.view(rec),
                "attempts": [msgspec.to_builtins(e) for e in attempts],
                "events": [msgspec.to_builtins(ev) for ev in events]}

    return {"digest.build": build, "digest.show": show, "digest.recent": recent,
            "digest.lineage": lineage}
