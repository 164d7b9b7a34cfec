"""The composition root: builds every subsystem, owns every task, runs the lifecycle.

STOPPED → STARTING (lock, store, recovery, bind) → RUNNING (pid file, SERVING)
→ STOPPING (NOT_SERVING, stop accepting, drain in-flight requests, flush)
→ STOPPED. Execs are never killed by a daemon stop: they belong to their
monitors, and the next daemon re-adopts them.

Lock order (docs/ARCHITECTURE.md): the home lock (process-wide, first) → a
runtime's per-sandbox ``asyncio.Lock`` (docker's, held across engine calls) →
SQLite's write lock (inside one ``Store`` transaction, never held across an
await) → per-exec claim files (taken by monitors or by recovery, never while
holding the SQLite write lock across an await). Everything else runs on the
single event-loop thread and needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from tether import __version__
from tether.daemon import home as homes
from tether.daemon import logfmt, lost_store, systemd
from tether.daemon.agents import AgentService
from tether.daemon.agents.ratelimit import AgentRateLimit
from tether.daemon.api import AGENT_METHODS, build_router
from tether.daemon.config import DaemonConfig
from tether.daemon.cost.service import CostService
from tether.daemon.digest.service import DigestService
from tether.daemon.egress import EgressService
from tether.daemon.events.bus import EventBus
from tether.daemon.execs.service import ExecService
from tether.daemon.faults import Faults
from tether.daemon.fleet.service import FleetService
from tether.daemon.journal import Journal
from tether.daemon.outbox import HookService
from tether.daemon.retention.service import RetentionService
from tether.daemon.sandboxes.service import SandboxService
from tether.daemon.scheduler import Scheduler
from tether.daemon.storewatch import StoreWatch
from tether.daemon.tasks import Tasks
from tether.digest import periods
from tether.hostio.trust import UntrustedHome
from tether.model.errors import TetherError, as_disk_full, as_store_corrupt
from tether.model.layout import (
    HOME_LOCKED_EXIT,
    HOME_UNTRUSTED_EXIT,
    STORE_REFUSED_EXIT,
    HomeLayout,
)
from tether.model.states import LINEAGE_LIVE, DaemonState, check_transition
from tether.rpc.server import RpcServer
from tether.runtime.monitors import MonitorPool
from tether.runtime.registry import RuntimeContext, Runtimes
from tether.store import SchemaTooNew, StoreLost
from tether.store.digest import DigestTables

log = logging.getLogger("tether.daemon")
#: Said once when a daemon starts as root (the README advises against it).
ROOT_WARNING = ("this daemon runs as root: its sandboxes run as uid 0 (without "
                "capabilities), so root's files that tether does not mask are readable inside "
                "them, and repository scripts, hand-offs and exec hooks run as root; run "
                "tether as a regular user (README, Sandboxes)")

DRAIN_TIMEOUT = 10.0


class StartupError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def health_view(state: DaemonState) -> dict[str, str]:
    """``daemon.health``'s answer in ``state``, made once per state change: it is the
    call clients and probes poll. SERVING exactly while RUNNING (the RPC server accepts
    work from before RUNNING until after STOPPING begins)."""
    return {"status": "SERVING" if state is DaemonState.RUNNING else "NOT_SERVING",
            "state": str(state)}


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.layout = HomeLayout(config.home)
        self.state = DaemonState.STOPPED
        self.health_view = health_view(self.state)
        self.instance = secrets.token_hex(4)
        self.started_at = time.time()
        self.recovery_summary: dict[str, int] = {}
        #: What ``daemon.status`` (and ``tether status``) warns about, said once in the log.
        self.warnings: list[str] = [ROOT_WARNING] if os.geteuid() == 0 else []
        self._lost: lost_store.Lost | None = None  # the store --recover-store replaced
        self._stop = asyncio.Event()
        self.tasks = Tasks()  # the TaskGroup of _main, lent to the services
        self._lock = homes.HomeLock(self.layout)
        self._server: asyncio.AbstractServer | None = None
        self._rpc: RpcServer | None = None
        self._agent_server: asyncio.AbstractServer | None = None
        self._agent_rpc: RpcServer | None = None
        self._home_id: tuple[int, int] | None = None  # the home's (dev, inode) at start
        self._home_lost = False  # deleted or replaced under us: its paths are not ours
        #: the tasks that act only through commits, stopped when the store is lost
        self._committers: list[asyncio.Task[Any]] = []

    # ------------------------------------------------------------------ lifecycle
    def _to(self, state: DaemonState) -> None:
        check_transition("daemon", "daemon", self.state, state)
        log.info("daemon %s -> %s", self.state, state)
        self.state = state
        self.health_view = health_view(state)

    def connection_count(self) -> int:
        return len(self._rpc.connections) if self._rpc else 0

    def rpc_requests(self) -> Counter[tuple[str, str]]:
        """Requests answered on both sockets, by method and error code (for metrics)."""
        total: Counter[tuple[str, str]] = Counter()
        for rpc in (self._rpc, self._agent_rpc):
            if rpc is not None:
                total.update(rpc.requests())
        return total

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Run in the foreground until SIGTERM/SIGINT. Returns the exit code."""
        if self.config.uvloop:
            try:
                import uvloop

                return uvloop.run(self._main())
            except ImportError:
                pass
        return asyncio.run(self._main())

    def disk_full(self, e: BaseException) -> TetherError | None:
        """DISK_FULL for an exception that means the home's disk is full, else None."""
        return as_disk_full(e, str(self.layout.db))

    def translate(self, e: Exception) -> TetherError | None:
        """The precise error for what any handler may meet: a full disk, a damaged store."""
        return self.disk_full(e) or as_store_corrupt(e, str(self.layout.db))

    def _startup_error(self, e: Exception) -> StartupError | None:
        full = self.disk_full(e)
        return None if full is None else StartupError(f"cannot start: {full.message}")

    async def _main(self) -> int:
        self._to(DaemonState.STARTING)
        try:
            try:
                self._start_infrastructure()
            except StartupError:
                raise
            except Exception as e:
                self._lock.release()
                if (err := self._startup_error(e)) is None:
                    raise
                raise err from None
        except StartupError as e:
            print(f"tether: {e}", file=sys.stderr)
            self._to(DaemonState.STOPPED)
            return e.exit_code
        failed: StartupError | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                self.tasks.bind(tg)
                try:
                    await self._recover()
                    await self._bind()
                    self._to(DaemonState.RUNNING)
                    homes.write_pid_file(self.layout)
                    for warning in self.warnings:  # once per daemon, at its start
                        log.warning("%s", warning)
                    self.journal.record(
                        None, "daemon.started", state=str(self.state),
                        reason=f"daemon pid {os.getpid()} serving",
                        data={"pid": os.getpid(), "version": __version__,
                              "instance": self.instance, "recovery": self.recovery_summary})
                except Exception as e:  # a full disk: one clear line, not a traceback
                    if (err := self._startup_error(e)) is None:
                        raise
                    raise err from None
                systemd.notify("READY=1")
                if self.config.watchdog is not None:
                    tg.create_task(systemd.watchdog(self.config.watchdog), name="watchdog")
                tg.create_task(self._pool_loop(), name="monitor-pool")
                tg.create_task(self._sweep_loop(), name="sweep")
                tg.create_task(self.store_watch.loop(), name="store-watch")
                for name, rpc in (("rpc", self._rpc), ("agent-rpc", self._agent_rpc)):
                    assert rpc is not None
                    tg.create_task(rpc.sweep_half_lines(), name=f"{name}-half-lines")
                self._committers = [
                    tg.create_task(self.agents.tick_loop(), name="agent-tick"),
                    tg.create_task(self.digest.run(), name="digest"),
                    tg.create_task(self.hooks.run(), name="outbox"),
                    tg.create_task(self.scheduler.loop(), name="scheduler"),
                    tg.create_task(self.retention.loop(), name="retention")]
                tg.create_task(self.egress.run(), name="egress")
                for rt in self.runtimes:
                    tg.create_task(rt.run(), name=f"runtime-{rt.name}")
                if self.fleet is not None:
                    tg.create_task(self.fleet.run(), name="fleet")
                await self._stop.wait()
                await self._shutdown()
                raise _Stopped
        except* _Stopped:
            pass
        except* StartupError as eg:
            failed = eg.exceptions[0]  # type: ignore[assignment]
            if self.state == DaemonState.RUNNING:
                self._to(DaemonState.STOPPING)
        finally:
            self._close_infrastructure()
        self._to(DaemonState.STOPPED)
        if self._home_lost:
            return 1
        if failed is not None:
            print(f"tether: {failed}", file=sys.stderr)
            return failed.exit_code
        return 0

    def _start_infrastructure(self) -> None:
        # The daemon's own files are private; the commands it runs get the umask of the
        # user who started it (files an agent writes into a repository: 0644, not 0600).
        self.user_umask = os.umask(0o077)
        try:
            homes.prepare(self.layout)
        except UntrustedHome as e:
            raise StartupError(str(e), HOME_UNTRUSTED_EXIT) from None
        self._home_id = homes.identity(self.layout)
        # The longest socket path we will bind is a monitor's (run/<12 hex>.sock).
        if (problem := self.layout.socket_path_problem()) is not None:
            raise StartupError(problem)
        try:
            self._lock.acquire()
        except homes.HomeLocked as e:
            raise StartupError(str(e), HOME_LOCKED_EXIT) from None
        except OSError as e:
            raise (self._startup_error(e)
                   or StartupError(f"cannot lock the home: {e}")) from None
        try:
            homes.check_store(self.layout)
            self.store, self._lost = lost_store.open_store(self.layout,
                                                           self.config.recover_store)
        except lost_store.StoreRefused as e:
            self._lock.release()
            raise StartupError(str(e), STORE_REFUSED_EXIT) from None
        except UntrustedHome as e:
            self._lock.release()
            raise StartupError(str(e), HOME_UNTRUSTED_EXIT) from None
        except SchemaTooNew as e:
            self._lock.release()
            raise StartupError(str(e)) from None
        except Exception as e:
            self._lock.release()
            raise self._startup_error(e) or StartupError(
                f"cannot open the store {self.layout.db}: {e}") from None
        self.store.limit_wal(self.config.wal_limit)
        try:
            faults = Faults(self.config.faults)
        except ValueError as e:
            self._lock.release()
            raise StartupError(str(e)) from None
        _raise_fd_limit()
        self.monitors = MonitorPool(pool_size=self.config.pool_size,
                                    run=str(self.layout.run), logs=str(self.layout.logs),
                                    umask=self.user_umask)
        self.bus = EventBus(self.store, queue_limit=self.config.subscriber_queue)
        self.runtimes = Runtimes(RuntimeContext(home=str(self.layout.root),
                                                docker_cli=self.config.docker_cli,
                                                docker_exec=self.config.docker_exec))
        self.journal = Journal(self.store, self.bus)
        self.execs = ExecService(self.store, self.layout, self.monitors, self.runtimes,
                                 self.journal, self.tasks, faults)
        self.sandboxes = SandboxService(self.store, self.journal, self.execs, self.runtimes)
        try:
            warning = self.sandboxes.configure_default(self.config.default_runtime)
        except (ValueError, TetherError) as e:
            self._lock.release()
            raise StartupError(str(e)) from None
        if warning:
            log.warning("the default sandbox: %s", warning)
        self.retention = RetentionService(self.store, self.layout, self.journal,
                                          self.config.clock(), self.config.retention, faults)
        self.bus.floor = self.retention.rs.floor_of
        self.egress = EgressService(self.store, self.layout, self.journal,
                                    resolve=self.config.test_resolve)
        self.agents = AgentService(self.store, self.layout, self.journal, self.execs,
                                   self.sandboxes, self.tasks, self.instance, faults,
                                   tick_interval=self.config.agent_tick,
                                   clock=self.config.clock(), egress=self.egress)
        try:
            tz = periods.zone(self.config.digest_tz)
        except periods.BadPeriod as e:
            self._lock.release()
            raise StartupError(f"TETHER_DIGEST_TZ: {e}") from None
        self.digest = DigestService(DigestTables(self.store), self.layout, self.journal,
                                    self.config.clock(), faults, tz=tz,
                                    summarizer=self.config.digest_summarizer,
                                    interval=self.config.digest_interval)
        self.hooks = HookService(self.journal, self.layout.root, self.config.clock())
        self.cost = CostService(self.store, self.layout.root, self.journal, self.execs,
                                self.tasks, self.config.clock(), faults, tz=tz,
                                daily_usd=self.config.budget_daily_usd,
                                daily_policy=self.config.budget_policy)
        self.agents.protocol.budget = self.cost
        self.agent_limit = AgentRateLimit(self.journal, self.config.agent_rate,
                                          self.config.agent_burst)
        self.scheduler = Scheduler(self.store, self.journal, self.execs, self.sandboxes,
                                   self.tasks, self.config.clock(), faults)
        self.store_watch = StoreWatch(self.store, self.config.sweep_interval,
                                      self._store_lost)
        self.fleet: FleetService | None = None
        if self.config.fleet is not None:
            self.fleet = FleetService(self.config.fleet, self.layout.root, self.store,
                                      self.journal, self.agents, self._dispatch, faults)
            self.agents.gate_revivals(self.fleet.may_revive)
            self.agents.fence_attempts(self.fleet.fence_for)
            if (why := self.fleet.check_schema()) is not None:
                self._lock.release()
                raise StartupError(f"cannot join the fleet: {why}")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def _recover(self) -> None:
        t0 = time.monotonic()
        rebuilt: dict[str, int] = {}
        if self._lost is not None:
            rebuilt = lost_store.rebuild(self.store, self.layout, self.journal, self._lost,
                                         self.monitors)
            log.warning("store rebuilt by --recover-store: %s; %s", self._lost.why, rebuilt)
        elif self.config.recover_store:
            log.info("--recover-store: the store is sound; nothing to recover")
        # Execs first: finishing a sandbox deletion waits for its execs, which
        # needs them watched again.
        summary = await self.execs.recover()
        await self.sandboxes.recover()
        # The egress proxy before agents: a resumed attempt asks it to serve its key.
        summary.update(await self.egress.recover(
            {r.id for r in self.store.list_lineages(tuple(LINEAGE_LIVE))}))
        # Agents last: a lineage is orphaned only once its exec's fate is known.
        summary.update({f"lineages_{k}": v for k, v in (await self.agents.recover()).items()})
        summary["handoffs_resumed"] = self.agents.resume_ends()
        summary["deliveries_requeued"] = self.hooks.recover()
        # Budgets after agents: a crossing a crash left unjournaled is journaled now.
        summary["budgets_reached"] = self.cost.recover(
            self.store.list_lineages(tuple(LINEAGE_LIVE)))
        # Schedules after execs: a run settles from its exec's recovered end.
        summary.update({f"schedule_{k}": v
                        for k, v in (await self.scheduler.recover()).items()})
        summary.update({f"rebuilt_{k}": v for k, v in rebuilt.items()})
        summary["prunes_finished"] = self.retention.recover()
        summary["ms"] = int((time.monotonic() - t0) * 1000)
        self.recovery_summary = summary
        self.journal.record(
            None, "daemon.recovered", state=str(self.state), data=summary,
            reason=(f"recovery: {summary['adopted']} adopted, {summary['finished']} finished "
                    f"while down, {summary['failed']} failed"))
        log.info("recovery: %s", summary)

    async def _bind(self) -> None:
        cfg = self.config
        self._rpc = RpcServer(build_router(self), translate=self.translate,
                              max_connections=cfg.max_connections,
                              half_line_timeout=cfg.half_line_timeout)
        self._server = await self._listen(self._rpc, self.layout.socket)
        # Sandboxed agents get this one: their own session's methods and nothing else.
        self._agent_rpc = RpcServer(build_router(self, only=AGENT_METHODS),
                                    translate=self.translate,
                                    max_connections=cfg.max_connections,
                                    half_line_timeout=cfg.half_line_timeout)
        self._agent_server = await self._listen(self._agent_rpc, self.layout.agent_socket)

    async def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Call one of our own methods as a client would (fleet work placed here)."""
        assert self._rpc is not None
        m = self._rpc.router.methods[method]
        reply = await m.handler(msgspec.convert(params, m.params), None)  # type: ignore[arg-type]
        assert isinstance(reply, dict)
        return reply

    async def _listen(self, rpc: RpcServer, path: Path) -> asyncio.AbstractServer:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # stale: we hold the home lock
        server = await asyncio.start_unix_server(
            # The limit only sets when the StreamReader stops reading the socket (at
            # twice it); LineReader enforces the 1 MiB line limit by itself.
            rpc.handle_connection, path=str(path), limit=64 * 1024,
            backlog=socket.SOMAXCONN)  # a burst of agents reconnecting after a restart
        os.chmod(path, 0o600)
        return server

    async def _shutdown(self) -> None:
        self._to(DaemonState.STOPPING)
        systemd.notify("STOPPING=1")
        assert self._server is not None and self._rpc is not None
        self._server.close()  # stop accepting connections
        if self._agent_server is not None and self._agent_rpc is not None:
            self._agent_server.close()
            await self._agent_rpc.drain(1.0)
            for conn in list(self._agent_rpc.connections):
                conn.writer.close()
        await self._rpc.drain(DRAIN_TIMEOUT)
        with contextlib.suppress(Exception):
            self.journal.record(None, "daemon.stopping", state=str(self.state),
                                reason="SIGTERM/SIGINT: draining")
        for conn in list(self._rpc.connections):
            conn.writer.close()
        self.execs.detach_all()

    def _close_infrastructure(self) -> None:
        if getattr(self, "fleet", None) is not None:
            assert self.fleet is not None
            self.fleet.close()
        if getattr(self, "agents", None) is not None:
            self.agents.close()
        with contextlib.suppress(Exception):
            self.monitors.close()
        with contextlib.suppress(Exception):
            self.store.close()
        if not self._home_lost:  # else these paths may be another daemon's by now
            with contextlib.suppress(FileNotFoundError):
                if self._server is not None:
                    self.layout.socket.unlink()
            with contextlib.suppress(FileNotFoundError):
                if self._agent_server is not None:
                    self.layout.agent_socket.unlink()
            homes.remove_pid_file(self.layout)
        self._lock.release()

    # ------------------------------------------------------------------ background
    async def _pool_loop(self) -> None:
        while True:
            self.monitors.wanted.clear()
            try:
                await self.monitors.refill_pool()
            except OSError:  # e.g. EAGAIN from fork: starts spawn on demand meanwhile
                log.exception("could not pre-start a monitor; retrying in 1 s")
                await asyncio.sleep(1.0)
                continue
            # After a burst the pool and zygotes go back to their idle sizes (refill_pool).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.monitors.trim_in()):
                    await self.monitors.wanted.wait()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval)
            try:
                if homes.identity(self.layout) != self._home_id:
                    log.error("the home %s was deleted or replaced; this daemon stops "
                              "(start one on the new home with `tether daemon`)",
                              self.layout.root)
                    self._home_lost = True
                    self.request_stop()
                    return
                self.execs.sweep()
                await self.sandboxes.enforce_lifetimes(time.time())
                for rt in self.runtimes:
                    await rt.sweep()
            except StoreLost:
                pass  # said once, by _store_lost; the execs' ends wait in their files
            except Exception:
                log.exception("sweep failed")

    def _store_lost(self, e: StoreLost) -> None:
        """The store file was deleted or replaced under us: accept no more intent (the
        store refuses every write), say why (health, the log), stop the services that
        act only through commits; the execs keep running, the RPC keeps answering reads."""
        log.error("%s", e.message)
        systemd.notify(f"STATUS=store lost: {e.why}")
        for task in self._committers:
            task.cancel()


class _Stopped(Exception):
    """Raised inside the TaskGroup to cancel every background task on shutdown."""


def _raise_fd_limit() -> None:
    """Each watched exec holds a pidfd: lift the soft descriptor limit to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(home: Path, **kw: Any) -> int:
    try:
        config = DaemonConfig.from_env(home, **kw)
    except ValueError as e:  # a malformed TETHER_* variable: one line, exit 2 (usage)
        print(f"tether: cannot start: {e}", file=sys.stderr)
        return 2
    if config.log_format not in logfmt.FORMATS:
        print(f"tether: unknown log format {config.log_format!r} (--log-format or "
              f"TETHER_LOG_FORMAT); use one of: {', '.join(logfmt.FORMATS)}", file=sys.stderr)
        return 2
    logfmt.configure(config.log_level, config.log_format)
    return Daemon(config).run()
