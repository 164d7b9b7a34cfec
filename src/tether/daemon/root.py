"""The composition root as its RPC handlers see it: the :class:`Daemon` protocol.

Each capability's ``api`` module takes a ``Daemon`` and reaches the services through it.
``daemon.py`` implements it; nothing here imports ``daemon.py`` or any ``api`` module, so
the handlers sit above the services and below the root, and no import runs back up.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tether.daemon.agents.ratelimit import AgentRateLimit
    from tether.daemon.agents.service import AgentService
    from tether.daemon.cost.service import CostService
    from tether.daemon.digest.service import DigestService
    from tether.daemon.events.bus import EventBus
    from tether.daemon.execs.service import ExecService
    from tether.daemon.outbox.service import HookService
    from tether.daemon.retention.service import RetentionService
    from tether.daemon.sandboxes.service import SandboxService
    from tether.daemon.scheduler.service import Scheduler
    from tether.daemon.tasks import Tasks
    from tether.model.layout import HomeLayout
    from tether.model.states import DaemonState
    from tether.runtime.registry import Runtimes
    from tether.store import Store


class Daemon(Protocol):
    """What the handlers use of the daemon (the composition root implements it)."""

    layout: HomeLayout
    store: Store
    bus: EventBus
    execs: ExecService
    sandboxes: SandboxService
    agents: AgentService
    agent_limit: AgentRateLimit
    digest: DigestService
    cost: CostService
    hooks: HookService
    scheduler: Scheduler
    retention: RetentionService
    runtimes: Runtimes
    tasks: Tasks
    state: DaemonState
    health_view: dict[str, str]  # daemon.health's answer, made at each state change
    instance: str
    started_at: float
    recovery_summary: dict[str, Any]
    warnings: list[str]

    def connection_count(self) -> int: ...

    def rpc_requests(self) -> Counter[tuple[str, str]]: ...
