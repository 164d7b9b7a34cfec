"""The daemon's settings: the one place that reads its environment.

Every ``TETHER_*`` variable the daemon honours is read here, once, at start-up;
the services get plain values. (``TETHER_HOME`` is read by
:func:`tether.model.layout.default_home`, which clients share.)
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.daemon.clock import Clock
from tether.daemon.events import QUEUE_LIMIT
from tether.daemon.fleet import FleetConfig
from tether.rpc.server import HALF_LINE_TIMEOUT, MAX_CONNECTIONS

POOL_SIZE = 2  # idle monitors kept ready
SWEEP_INTERVAL = 5.0  # seconds between sweeps (unwatched execs, lifetimes, leftovers)
AGENT_TICK = 2.0  # seconds between agent ticks (heartbeats, revivals)


@dataclass(frozen=True)
class DaemonConfig:
    home: Path
    pool_size: int = POOL_SIZE
    #: The runtime asked of the ``default`` sandbox (``--default-runtime``).
    default_runtime: str = "auto"
    uvloop: bool = True  # unless TETHER_NO_UVLOOP is set
    faults: str | None = None  # TETHER_FAULT: crash points for tests
    subscriber_queue: int = QUEUE_LIMIT
    max_connections: int = MAX_CONNECTIONS  # per socket
    half_line_timeout: float = HALF_LINE_TIMEOUT
    sweep_interval: float = SWEEP_INTERVAL
    agent_tick: float = AGENT_TICK
    log_level: str = "INFO"
    docker_cli: str | None = None  # TETHER_DOCKER, else `docker` on PATH
    #: ``--recover-store``: rebuild a lost or corrupt store from the execs' files.
    recover_store: bool = False
    #: TETHER_TEST_CLOCK: a file whose number is added to wall time (tests only).
    test_clock: Path | None = None
    #: Activity digests: seconds between rollup passes, the summarizer command (None:
    #: the built-in deterministic one), the time zone of their days (None: $TZ, else
    #: the system's).
    digest_interval: float = 900.0
    digest_summarizer: str | None = None
    digest_tz: str | None = None
    #: Fleet mode (``--fleet URL --host-name N``): None on a single host.
    fleet: FleetConfig | None = None

    @classmethod
    def from_env(cls, home: Path, *, pool_size: int = POOL_SIZE,
                 default_runtime: str | None = None, recover_store: bool = False,
                 fleet_url: str | None = None, host_name: str | None = None,
                 capacity: int = 4, labels: dict[str, str] | None = None,
                 env: Mapping[str, str] = os.environ) -> DaemonConfig:
        """Flags win over the environment, which wins over the defaults."""
        return cls(
            home=home.absolute(), pool_size=pool_size,
            default_runtime=default_runtime or env.get("TETHER_DEFAULT_RUNTIME") or "auto",
            uvloop=env.get("TETHER_NO_UVLOOP") is None,
            faults=env.get("TETHER_FAULT"),
            subscriber_queue=int(env.get("TETHER_SUBSCRIBER_QUEUE", QUEUE_LIMIT)),
            max_connections=int(env.get("TETHER_MAX_CONNECTIONS", MAX_CONNECTIONS)),
            half_line_timeout=float(env.get("TETHER_HALF_LINE_TIMEOUT", HALF_LINE_TIMEOUT)),
            sweep_interval=float(env.get("TETHER_SWEEP_INTERVAL", SWEEP_INTERVAL)),
            agent_tick=float(env.get("TETHER_AGENT_TICK", AGENT_TICK)),
            log_level=env.get("TETHER_LOG_LEVEL", "INFO"),
            docker_cli=env.get("TETHER_DOCKER") or shutil.which("docker"),
            recover_store=recover_store,
            test_clock=Path(env["TETHER_TEST_CLOCK"]) if env.get("TETHER_TEST_CLOCK") else None,
            digest_interval=float(env.get("TETHER_DIGEST_INTERVAL", 900.0)),
            digest_summarizer=env.get("TETHER_DIGEST_SUMMARIZER") or None,
            digest_tz=env.get("TETHER_DIGEST_TZ") or None,
            fleet=None if not fleet_url else FleetConfig(
                url=fleet_url, host=host_name or socket.gethostname(), capacity=capacity,
                labels=labels or {}, lease=float(env.get("TETHER_FLEET_LEASE", 10.0)),
                interval=float(env.get("TETHER_FLEET_INTERVAL", 1.0))),
        )

    def clock(self) -> Clock:
        return Clock(self.test_clock)
