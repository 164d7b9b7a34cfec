"""``lineage.finish`` (branch hand-off on demand), added to the daemon's method table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

if TYPE_CHECKING:
    from tether.daemon.api import Daemon

METHODS: dict[str, type[Any]] = {"lineage.finish": m.LineageFinish}
#: Stopping the agent, then commit, push and the hand-off command: seconds to minutes.
LONG = frozenset({"lineage.finish"})


def handlers(d: Daemon) -> dict[str, Handler]:
    async def finish(p: m.LineageFinish, c: Connection) -> Any:
        rec, outcome = await d.tasks.owned(d.agents.finish(d.agents.resolve(p.lineage),
                                                           commit=p.commit))
        return {**d.agents.view(rec), "handoff": outcome}

    return {"lineage.finish": finish}
