"""``daemon.health`` and ``daemon.status``: the daemon's own state, for probes and people."""

from __future__ import annotations

import os
import time
from typing import Any

from tether import __version__
from tether.daemon.root import Daemon
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

METHODS: dict[str, type[Any]] = {
    "daemon.health": m.Empty,
    "daemon.status": m.Empty,
}
LONG: frozenset[str] = frozenset()


def handlers(d: Daemon) -> dict[str, Handler]:
    store, execs, bus = d.store, d.execs, d.bus

    def health(p: m.Empty, c: Connection) -> Any:  # never waits: called, not awaited
        if store.lost is not None:  # it answers reads, but accepts no more intent
            return {"status": "NOT_SERVING", "state": str(d.state),
                    "reason": f"STORE_LOST: the store {store.path} was {store.lost}"}
        return d.health_view  # made at each state change (daemon.health_view)

    async def status(p: m.Empty, c: Connection) -> Any:
        return {
            "pid": os.getpid(), "version": __version__, "state": str(d.state),
            "home": str(d.layout.root), "instance": d.instance, "epoch": store.epoch,
            "started_at": d.started_at, "uptime": time.time() - d.started_at,
            "runtime": "process",
            "runtimes": {rt.name: (await rt.status()).view() for rt in d.runtimes},
            "recovery": d.recovery_summary, "warnings": list(d.warnings),
            "counts": {"sandboxes": len(store.list_sandboxes()), "execs": store.count_execs(),
                       "watched": execs.live_count(), "connections": d.connection_count(),
                       "subscriptions": len(bus.subs)},
            "monitors": execs.monitors.status(),
        }

    return {"daemon.health": health, "daemon.status": status}
