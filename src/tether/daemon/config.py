"""The daemon's settings: the one place that reads its environment.

Every ``TETHER_*`` variable the daemon honours is read here, once, at start-up;
the services get plain values. (``TETHER_HOME`` is read by
:func:`tether.model.layout.default_home`, which clients share.)
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.daemon import systemd
from tether.daemon.agents.ratelimit import BURST as AGENT_BURST
from tether.daemon.agents.ratelimit import RATE as AGENT_RATE
from tether.daemon.clock import Clock
from tether.daemon.events import QUEUE_LIMIT
from tether.daemon.fleet import FleetConfig
from tether.egress.policy import BadEntry, is_address, normalise_host
from tether.model.retention import RetentionPolicy, parse_duration, parse_size
from tether.rpc.server import HALF_LINE_TIMEOUT, MAX_CONNECTIONS
from tether.store import WAL_LIMIT

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
    #: Each lineage's calls on agent.sock: per second, and at once (TETHER_AGENT_RATE,
    #: TETHER_AGENT_BURST).
    agent_rate: float = AGENT_RATE
    agent_burst: int = AGENT_BURST
    #: Bytes of store WAL past which a checkpoint truncates it (TETHER_WAL_LIMIT).
    wal_limit: int = WAL_LIMIT
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
    #: ``--log-format``, else TETHER_LOG_FORMAT: ``text`` or ``json`` (JSON lines).
    log_format: str = "text"
    #: systemd's watchdog: seconds between WATCHDOG=1 pings (None: no watchdog asked).
    watchdog: float | None = None
    #: What the retention pass removes (TETHER_KEEP_LOGS, TETHER_LOGS_MAX,
    #: TETHER_KEEP_EVENTS, TETHER_KEEP_RUN_FILES, TETHER_RETENTION_INTERVAL).
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    #: Fleet mode (``--fleet URL --host-name N``): None on a single host.
    fleet: FleetConfig | None = None
    #: TETHER_BUDGET_DAILY_USD / TETHER_BUDGET_POLICY: the daily budget over every agent
    #: when none was set with `tether budget set` (which wins).
    budget_daily_usd: float | None = None
    budget_policy: str = "pause"
    #: TETHER_TEST_RESOLVE (tests only): host names the egress proxy resolves to these
    #: addresses instead of asking DNS, e.g. a test's fake model API (docs/SECURITY.md).
    test_resolve: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, home: Path, *, pool_size: int = POOL_SIZE,
                 default_runtime: str | None = None, recover_store: bool = False,
                 log_format: str | None = None,
                 retention: Mapping[str, str] | None = None,
                 fleet_url: str | None = None, host_name: str | None = None,
                 capacity: int = 4, labels: dict[str, str] | None = None,
                 env: Mapping[str, str] = os.environ) -> DaemonConfig:
        """Flags win over the environment, which wins over the defaults. ``retention``:
        the retention flags given, by the name of the variable each overrides."""
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
            agent_rate=_positive("TETHER_AGENT_RATE", env, AGENT_RATE),
            agent_burst=int(_positive("TETHER_AGENT_BURST", env, AGENT_BURST)),
            wal_limit=_size("TETHER_WAL_LIMIT", env, WAL_LIMIT),
            log_level=env.get("TETHER_LOG_LEVEL", "INFO"),
            docker_cli=env.get("TETHER_DOCKER") or shutil.which("docker"),
            recover_store=recover_store,
            test_clock=Path(env["TETHER_TEST_CLOCK"]) if env.get("TETHER_TEST_CLOCK") else None,
            digest_interval=float(env.get("TETHER_DIGEST_INTERVAL", 900.0)),
            digest_summarizer=env.get("TETHER_DIGEST_SUMMARIZER") or None,
            digest_tz=env.get("TETHER_DIGEST_TZ") or None,
            log_format=log_format or env.get("TETHER_LOG_FORMAT") or "text",
            watchdog=systemd.watchdog_interval(env, os.getpid()),
            retention=retention_from_env({**env, **(retention or {})}),
            fleet=None if not fleet_url else FleetConfig(
                url=fleet_url, host=host_name or socket.gethostname(), capacity=capacity,
                labels=labels or {}, lease=float(env.get("TETHER_FLEET_LEASE", 10.0)),
                interval=float(env.get("TETHER_FLEET_INTERVAL", 1.0)),
                listen=env.get("TETHER_FLEET_LISTEN") or "127.0.0.1:0",
                advertise=env.get("TETHER_FLEET_ADVERTISE") or None,
                tls_cert=env.get("TETHER_FLEET_TLS_CERT") or None,
                tls_key=env.get("TETHER_FLEET_TLS_KEY") or None,
                relay_batch=int(env.get("TETHER_FLEET_RELAY_BATCH", 200))),
            budget_daily_usd=_dollars(env.get("TETHER_BUDGET_DAILY_USD")),
            budget_policy=_policy(env.get("TETHER_BUDGET_POLICY")),
            test_resolve=parse_test_resolve(env.get("TETHER_TEST_RESOLVE")),
        )

    def clock(self) -> Clock:
        return Clock(self.test_clock)


def parse_test_resolve(text: str | None) -> dict[str, list[str]]:
    """``TETHER_TEST_RESOLVE``: ``NAME=ADDR[,ADDR...]`` entries separated by ``;`` or
    spaces (``fake.test=127.0.0.1; api.test=10.200.0.2,fd00::2``). Raises ValueError."""
    out: dict[str, list[str]] = {}
    for item in (text or "").replace(";", " ").split():
        name, sep, addrs = item.partition("=")
        try:
            host = normalise_host(name)
            if not sep or is_address(host):
                raise BadEntry("")
            out[host] = [str(ipaddress.ip_address(a)) for a in addrs.split(",")]
        except ValueError:
            raise ValueError(f"$TETHER_TEST_RESOLVE: {item!r} is not NAME=ADDRESS[,ADDRESS...] "
                             "(a host name, then IP addresses)") from None
    return out


def retention_from_env(env: Mapping[str, str]) -> RetentionPolicy:
    """The retention policy: the defaults, each replaced by its variable when set
    (durations like ``14d``, sizes like ``2G``; ``0`` turns a limit off)."""
    base = RetentionPolicy()

    def dur(name: str, default: float) -> float:
        try:
            return parse_duration(env[name]) if env.get(name) else default
        except ValueError as e:
            raise ValueError(f"${name}: {e}") from None

    try:
        logs_max = (parse_size(env["TETHER_LOGS_MAX"]) if env.get("TETHER_LOGS_MAX")
                    else base.logs_max_bytes)
    except ValueError as e:
        raise ValueError(f"$TETHER_LOGS_MAX: {e}") from None
    return RetentionPolicy(
        keep_logs=dur("TETHER_KEEP_LOGS", base.keep_logs),
        logs_max_bytes=logs_max,
        keep_events=dur("TETHER_KEEP_EVENTS", base.keep_events),
        keep_run_files=dur("TETHER_KEEP_RUN_FILES", base.keep_run_files),
        interval=max(0.05, dur("TETHER_RETENTION_INTERVAL", base.interval)),
        first_pass=dur("TETHER_RETENTION_FIRST_PASS", base.first_pass),
    )
def _positive(name: str, env: Mapping[str, str], default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 < v < float("inf"):
        raise ValueError(f"{name} must be a positive number, not {text!r}")
    return v


def _size(name: str, env: Mapping[str, str], default: int) -> int:
    try:
        v = parse_size(env[name]) if env.get(name) else default
    except ValueError as e:
        raise ValueError(f"${name}: {e}") from None
    if v < 64 * 1024:
        raise ValueError(f"${name} must be at least 64K, not {env[name]!r}")
    return v


def _dollars(text: str | None) -> float | None:
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 < v < float("inf"):
        raise ValueError(f"TETHER_BUDGET_DAILY_USD must be a positive amount of dollars "
                         f"(e.g. 20 or 12.50), not {text!r}")
    return v


def _policy(text: str | None) -> str:
    if text and text not in ("pause", "stop"):
        raise ValueError(f"TETHER_BUDGET_POLICY must be pause or stop, not {text!r}")
    return text or "pause"
