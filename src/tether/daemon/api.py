"""The daemon's JSON-RPC method table, assembled from each capability's ``api`` module.

Each capability package (``execs``, ``sandboxes``, ``agents``, …) registers its methods
the way containerd registers plugins: its ``api`` module has ``METHODS`` (each method's
params type), ``LONG`` (those that may wait on outside events; the RPC server runs them
as tasks) and ``handlers(d)``, thin functions that validate, resolve references and call
the capability's service. This module only puts them together.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tether.daemon import status
from tether.daemon.agents import api as agents
from tether.daemon.agents.api import AGENT_METHODS
from tether.daemon.cost import api as cost
from tether.daemon.digest import api as digest
from tether.daemon.events import api as events
from tether.daemon.execs import api as execs
from tether.daemon.metrics import api as metrics
from tether.daemon.outbox import api as outbox
from tether.daemon.retention import api as retention
from tether.daemon.root import Daemon
from tether.daemon.sandboxes import api as sandboxes
from tether.daemon.scheduler import api as scheduler
from tether.rpc.server import Handler, Router

#: The capabilities whose methods the daemon serves, in docs/PROTOCOL.md's order.
CAPABILITIES: tuple[ModuleType, ...] = (status, sandboxes, execs, retention, events, agents,
                                        digest, cost, outbox, metrics, scheduler)

#: Every method and the type of its params (docs/PROTOCOL.md lists them). A table of its
#: own, apart from the handlers, so that tests can enumerate the protocol's surface.
METHODS: dict[str, type[Any]] = {name: params for cap in CAPABILITIES
                                 for name, params in cap.METHODS.items()}

#: Methods that may wait on outside events; the RPC server runs them as tasks.
LONG_POLL_METHODS: frozenset[str] = frozenset().union(*(cap.LONG for cap in CAPABILITIES))

__all__ = ["AGENT_METHODS", "LONG_POLL_METHODS", "METHODS", "build_router"]


def build_router(d: Daemon, only: frozenset[str] | None = None) -> Router:
    """Every method, or only those in ``only`` (the restricted agent socket)."""
    handlers: dict[str, Handler] = {}
    for cap in CAPABILITIES:
        if cap is agents:  # on agent.sock each lineage's calls draw from its rate limit
            handlers.update(agents.handlers(d, rate_limited=only is not None))
        else:
            handlers.update(cap.handlers(d))
    r = Router()
    for name, params in METHODS.items():
        if only is None or name in only:
            r.add(name, params, handlers[name], long=name in LONG_POLL_METHODS)
    return r
