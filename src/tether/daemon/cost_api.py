"""Cost's JSON-RPC methods (``cost.report``, ``budget.*``), added to the method table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from tether.model.errors import RpcCode, TetherError
from tether.model.states import LINEAGE_LIVE
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

if TYPE_CHECKING:
    from tether.daemon.api import Daemon

METHODS: dict[str, type[Any]] = {
    "cost.report": m.CostReport,
    "budget.show": m.Empty,
    "budget.set": m.BudgetSet,
}


def handlers(d: Daemon) -> dict[str, Handler]:
    async def report(p: m.CostReport, c: Connection) -> Any:
        return await d.cost.report(p.by, p.since)

    async def show(p: m.Empty, c: Connection) -> Any:
        return d.cost.show(d.store.list_lineages())

    async def set_(p: m.BudgetSet, c: Connection) -> Any:
        if (p.usd is None) != p.clear:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              "budget.set takes either usd (dollars) or clear: true")
        lineage = d.agents.resolve(p.lineage).id if p.lineage else None
        ev = d.cost.set_budget(usd=p.usd, policy=p.policy, lineage=lineage)
        # A raised budget lifts a pause at the agent's next tool call; a lowered one is
        # checked against every live agent now.
        for rec in d.store.list_lineages(tuple(LINEAGE_LIVE)):
            if lineage is None or rec.id == lineage:
                d.cost.enforce(rec)
        return {"event": msgspec.to_builtins(ev), **d.cost.show(d.store.list_lineages())}

    return {"cost.report": report, "budget.show": show, "budget.set": set_}
