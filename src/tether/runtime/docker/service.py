"""The docker runtime's sandboxes: engine calls off the event loop, the reconcile
table applied, and the docker event stream watched.

Every engine call blocks, so it runs in a worker thread (``asyncio.to_thread``);
the event stream, which blocks for as long as dockerd runs, has a thread of its
own whose lifetime is owned by :meth:`ContainerService.watch_loop`. One
``asyncio.Lock`` per sandbox serialises what tether does to a sandbox's
containers with what it concludes from docker's events, so a ``die`` caused by
``tether sandbox stop`` is never mistaken for a crash.

The SDK is imported only once a docker sandbox exists or is asked about: a
daemon that never uses docker pays nothing for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tether.model.errors import RpcCode, TetherError
from tether.model.records import SandboxRecord
from tether.model.states import IllegalTransition, SandboxState
from tether.runtime.base import SandboxHost
from tether.runtime.docker import reconcile
from tether.runtime.docker.engine import DockerEngine
from tether.runtime.docker.names import parse_event
from tether.runtime.docker.views import DockerError, Probe, short

log = logging.getLogger("tether.docker")
T = TypeVar("T")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 5.0
RESTART_SETTLE = 5.0  # seconds to let dockerd restart a `restart: always` container


class EngineSandboxes:
    """The daemon's sandboxes narrowed to those one engine runs (their ``docker_host``),
    so each engine's reconcile sees only its own and takes another's for nothing."""

    def __init__(self, host: SandboxHost, docker_host: str | None) -> None:
        self._host = host
        self._docker_host = docker_host

    def _mine(self, sb: SandboxRecord | None) -> SandboxRecord | None:
        return sb if sb is not None and sb.spec.docker_host == self._docker_host else None

    def get(self, sandbox: str) -> SandboxRecord | None:
        return self._mine(self._host.get(sandbox))

    def list(self, *, include_deleted: bool = False) -> list[SandboxRecord]:
        return [sb for sb in self._host.list(include_deleted=include_deleted)
                if self._mine(sb) is not None]

    def transition(self, sandbox: str, to: SandboxState, reason: str) -> SandboxRecord:
        return self._host.transition(sandbox, to, reason)

    def event(self, sandbox: str | None, kind: str, reason: str,
              data: dict[str, Any] | None = None) -> None:
        self._host.event(sandbox, kind, reason, data)

    async def finish_delete(self, sb: SandboxRecord) -> SandboxRecord:
        return await self._host.finish_delete(sb)


class ContainerService:
    """One engine's sandboxes: their lifecycle, reconcile and event watch."""

    def __init__(self, host: SandboxHost, engine: DockerEngine,
                 docker_cli: str | None) -> None:
        self.host: SandboxHost = EngineSandboxes(host, engine.host)
        self.engine = engine
        self.docker_cli = docker_cli
        self.probe_result: Probe | None = None
        self.connected = False
        self.reconciles = 0  # full reconciles run (start and every reconnect)
        self.wanted = asyncio.Event()  # set once docker is needed: starts the watcher
        self.leftovers_due = False  # a forced delete left containers: sweep them soon
        self._locks: dict[str, asyncio.Lock] = {}
        # The last health journaled per (sandbox, companion): docker repeats itself, and
        # create reports a required companion's first health before READY.
        self._health: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ helpers
    def lock(self, sandbox: str) -> asyncio.Lock:
        return self._locks.setdefault(sandbox, asyncio.Lock())

    def _transition(self, sandbox: str, to: SandboxState, reason: str) -> SandboxRecord:
        """A transition decided after waiting on docker: the record may have moved on
        meanwhile (a concurrent delete), which is the caller's error, not the daemon's."""
        try:
            return self.host.transition(sandbox, to, reason)
        except IllegalTransition as e:
            raise TetherError(RpcCode.INVALID_STATE, "INVALID_STATE",
                              f"sandbox {sandbox} is now {e.current}, so it cannot become "
                              f"{to}; look at it again and retry",
                              {"sandbox": sandbox, "state": e.current}) from None

    def _event(self, sandbox: str | None, kind: str, reason: str,
               data: dict[str, Any] | None = None) -> None:
        data = data or {}
        if self.engine.host is not None and sandbox is None:  # which engine says so
            data = {**data, "docker_host": self.engine.host}
            reason = f"{reason} ({self.engine.where})"
        self.host.event(sandbox, kind, reason, data)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """An engine call in a worker thread. A broken connection (dockerd restarted or
        gone) becomes a DockerError saying so, and the next :meth:`ensure` re-probes."""
        import docker

        try:
            return await asyncio.to_thread(fn, *args)
        except DockerError:
            raise
        except (OSError, docker.errors.DockerException) as e:
            self.probe_result = None
            raise DockerError(f"{self.engine.where} is not reachable: {short(e)}",
                              "DOCKER_UNAVAILABLE") from e

    async def ensure(self) -> Probe:
        """Probe dockerd (again, unless it is known to work); refuse when it is down."""
        self.wanted.set()
        if self.probe_result is None or not self.probe_result.available:
            self.probe_result = await asyncio.to_thread(self.engine.probe)
        if not self.probe_result.available:
            data: dict[str, Any] = {"runtime": "docker"}
            if self.engine.host is not None:
                data["docker_host"] = self.engine.host
            raise TetherError(RpcCode.INVALID_STATE, "RUNTIME_UNAVAILABLE",
                              f"the docker runtime is not available: "
                              f"{self.probe_result.reason}", data)
        return self.probe_result

    def status(self) -> dict[str, Any]:
        p = self.probe_result
        if p is None:
            installed = self.docker_cli is not None
            # Keys in the same order as a probed engine's (the SDK's RuntimeStatus).
            return {"available": None if installed else False,
                    "reason": "not probed yet (no docker sandbox so far)" if installed
                    else "the docker CLI is not installed (apt-get install docker.io)",
                    "connected": False}
        return {"available": p.available, "version": p.version, "reason": p.reason,
                "connected": self.connected, "reconciles": self.reconciles}

    # ------------------------------------------------------------------ lifecycle
    async def create(self, sb: SandboxRecord) -> SandboxRecord:
        """PENDING → READY once every container runs and required companions are
        healthy; → FAILED (with everything removed) otherwise."""
        ready: list[tuple[str, str]] = []  # required companions, in the order they came up

        async with self.lock(sb.id):
            try:
                await self.call(self.engine.create, sb.id, sb.name, sb.spec,
                                        lambda name, health: ready.append((name, health)))
            except Exception as e:
                code = e.code if isinstance(e, DockerError) else "DOCKER_FAILED"
                with contextlib.suppress(Exception):
                    await self.call(self.engine.remove, sb.id)
                current = self.host.get(sb.id)
                if current is not None and current.state == SandboxState.PENDING:
                    self.host.transition(sb.id, SandboxState.FAILED, f"{code}: {e}")
                raise TetherError(rpc_code(code, RpcCode.START_FAILED), code, str(e),
                                  {"sandbox": sb.id}) from None
            for name, health in ready:
                self._companion_health(sb.id, name, health)
            return self._transition(sb.id, SandboxState.READY, "docker runtime ready")

    async def start(self, sb: SandboxRecord) -> SandboxRecord:
        async with self.lock(sb.id):
            try:
                await self.call(self.engine.start, sb.id, sb.spec)
            except DockerError as e:
                raise TetherError(rpc_code(e.code, RpcCode.START_FAILED), e.code, str(e),
                                  {"sandbox": sb.id}) from None
            return self._transition(sb.id, SandboxState.READY, "started by request")

    async def stop(self, sb: SandboxRecord, reason: str) -> SandboxRecord:
        async with self.lock(sb.id):
            try:
                await self.call(self.engine.stop, sb.id)
            except DockerError as e:
                raise TetherError(RpcCode.UNAVAILABLE, e.code, str(e), {"sandbox": sb.id}) from None
            return self._transition(sb.id, SandboxState.STOPPED, reason)

    async def remove(self, sb: SandboxRecord) -> None:
        async with self.lock(sb.id):
            try:
                await self.call(self.engine.remove, sb.id)
            except DockerError as e:
                raise TetherError(RpcCode.UNAVAILABLE, e.code, f"{e}; the sandbox stays "
                                  "DELETING and the next daemon start finishes it",
                                  {"sandbox": sb.id}) from None

    async def sweep_leftovers(self) -> None:
        """After a forced delete: remove what it left as soon as dockerd answers (the
        event stream may never have broken, so no reconnect would)."""
        if self.leftovers_due and self.connected:
            self.leftovers_due = False
            done = False
            try:
                await self.reconcile_all()
                done = True
            finally:
                self.leftovers_due = not done  # any failure: the next sweep tries again

    # ------------------------------------------------------------------ reconcile
    async def reconcile_all(self) -> dict[str, int]:
        """The full table over every docker sandbox, then labelled leftovers removed."""
        summary = {"checked": 0, "changed": 0, "leftovers": 0}
        for sb in self.host.list():
            summary["checked"] += 1
            if await self.reconcile_one(sb.id):
                summary["changed"] += 1
        known = {sb.id for sb in self.host.list()}
        labelled = await self.call(self.engine.labelled)
        for sandbox, names in sorted(labelled.items()):
            if sandbox in known:
                continue
            async with self.lock(sandbox):
                now = self.host.get(sandbox)  # created meanwhile?
                if now is not None and now.state != SandboxState.DELETED:
                    continue
                try:
                    removed = await self.call(self.engine.remove, sandbox)
                except DockerError as e:  # one stubborn leftover must not stop the watch
                    if e.code == "DOCKER_UNAVAILABLE":
                        raise
                    log.warning("leftover of sandbox %s: %s", sandbox, e)
                    continue
            summary["leftovers"] += 1
            self._event(None, "docker.leftover_removed",
                        f"removed {', '.join(sorted(set(removed or names)))}: labelled "
                        f"for sandbox {sandbox}, which tether has no record of",
                        {"sandbox": sandbox, "names": sorted(set(removed or names))})
        self.reconciles += 1
        return summary

    async def reconcile_one(self, sandbox: str) -> bool:
        """Apply the table to one sandbox. True when its state changed."""
        async with self.lock(sandbox):
            sb = self.host.get(sandbox)
            if sb is None:
                return False
            views = await self.call(self.engine.views, sb.id, sb.spec)
            required = {c.name for c in sb.spec.companions if c.required}
            summary = reconcile.summarize(views, required)
            deadline = asyncio.get_running_loop().time() + RESTART_SETTLE
            while summary == "exited" and sb.spec.restart == "always" and \
                    asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.25)  # dockerd may be about to restart it
                views = await self.call(self.engine.views, sb.id, sb.spec)
                summary = reconcile.summarize(views, required)
            sb = self.host.get(sandbox)  # it may have changed meanwhile
            if sb is None:
                return False
            out = reconcile.decide(sb.state, summary)
            if out.to is None and not out.cleanup and (sb.spec.network or "private") == \
                    "private" and sb.state in (SandboxState.READY, SandboxState.STOPPED):
                # The rule is not persistent (a reboot drops it) and dockerd may have
                # restarted the containers meanwhile: make sure it is there.
                try:
                    await self.call(self.engine.block_host, sb.id)
                except DockerError as e:
                    log.warning("sandbox %s: %s", sb.id, e)
            if out.stop:
                with contextlib.suppress(DockerError):
                    await self.call(self.engine.stop, sb.id)
            if out.cleanup:
                with contextlib.suppress(DockerError):
                    await self.call(self.engine.remove, sb.id)
            if out.to is None:
                return False
            if out.to == SandboxState.DELETED:
                await self.host.finish_delete(sb)
                return True
            reason = (reconcile.describe(views, required, out.code)
                      if out.code != "INTERRUPTED_PENDING" else
                      "INTERRUPTED_PENDING: the daemon stopped while creating it; what it "
                      "had made was removed")
            try:
                self.host.transition(sb.id, out.to, reason)
            except IllegalTransition:  # a request moved it on meanwhile; it decides
                return False
            return True

    # ------------------------------------------------------------------ events
    def _companion_health(self, sandbox: str, companion: str, health: str,
                          **extra: Any) -> None:
        """Journal ``sandbox.companion`` when a companion's health changes."""
        if self._health.get((sandbox, companion)) == health:
            return
        self._health[(sandbox, companion)] = health
        code = extra.get("exit_code")
        self._event(sandbox, "sandbox.companion", f"companion {companion} is {health}"
                    + (f" (exit code {code})" if code is not None else ""),
                    {"companion": companion, "health": health, **extra})

    async def watch_loop(self) -> None:
        """Subscribe to docker's events; on every (re)connect run the full reconcile.
        When the stream breaks (dockerd restarted or down), back off and start over."""
        await self.wanted.wait()
        backoff = BACKOFF_FIRST
        while True:
            try:
                await self._watch_once()
                backoff = BACKOFF_FIRST
            except asyncio.CancelledError:
                raise
            except Exception as e:
                (log.warning if backoff == BACKOFF_FIRST else log.debug)(
                    "docker event stream: %s (retrying with back-off)", e)
            if self.connected:
                self.connected = False
                self._event(None, "docker.disconnected",
                            "the docker event stream broke; reconnecting")
            self.engine.reset()
            self.probe_result = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _watch_once(self) -> None:
        self.probe_result = await asyncio.to_thread(self.engine.probe)
        if not self.probe_result.available:
            raise RuntimeError(self.probe_result.reason)
        stream = await asyncio.to_thread(self.engine.events)  # subscribe first …
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def pump() -> None:
            try:
                for ev in stream:
                    loop.call_soon_threadsafe(queue.put_nowait, ev)
            except Exception as e:  # the connection broke
                log.debug("docker events ended: %s", e)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop may be closing
                    loop.call_soon_threadsafe(queue.put_nowait, None)

        thread = threading.Thread(target=pump, name="docker-events", daemon=True)
        thread.start()
        try:
            summary = await self.reconcile_all()  # … so nothing between is missed
            self.connected = True
            self._event(None, "docker.connected",
                        f"watching docker events; reconcile checked {summary['checked']}, "
                        f"changed {summary['changed']}, removed {summary['leftovers']} "
                        "leftovers", {**summary, "version": self.probe_result.version})
            while (ev := await queue.get()) is not None:
                await self._on_event(ev)
        finally:
            with contextlib.suppress(Exception):
                stream.close()
            await asyncio.to_thread(thread.join, 5.0)

    async def _on_event(self, ev: dict[str, Any]) -> None:
        parsed = parse_event(ev)
        if parsed is None:
            return
        sandbox, role, companion, action, attrs = parsed
        sb = self.host.get(sandbox)
        if action.startswith("health_status"):
            health = action.split(":", 1)[-1].strip()
            if sb is not None and role == "companion" and companion:
                self._companion_health(sb.id, companion, health)
            return
        if action == "oom" and sb is not None:
            self._event(sb.id, "sandbox.oom", f"{attrs.get('name')} ran out of memory",
                        {"container": attrs.get("name"), "role": role})
            return
        if action in ("die", "destroy", "stop", "kill", "start"):
            if sb is None:
                return
            required = any(c.name == companion and c.required for c in sb.spec.companions)
            if role == "companion" and companion and action == "die":
                if not required:
                    self._companion_health(sb.id, companion, "exited",
                                           exit_code=attrs.get("exitCode"))
                else:  # the reconcile says what it means; a later "healthy" is news
                    self._health[(sb.id, companion)] = "exited"
            if role == "companion" and not required:
                return
            if action == "die" and sb.spec.restart == "always":
                async with self.lock(sb.id):  # a stop in progress holds it: then no news
                    current = self.host.get(sb.id)
                if current is not None and current.state == SandboxState.READY:
                    self._event(sb.id, "sandbox.container_exited",
                                f"{attrs.get('name')} exited (code {attrs.get('exitCode')});"
                                " restart: always lets dockerd start it again",
                                {"container": attrs.get("name"), "role": role,
                                 "exit_code": attrs.get("exitCode")})
            if action in ("die", "destroy"):
                await self.reconcile_one(sb.id)


def rpc_code(code: str, default: int) -> int:
    """dockerd being unreachable is UNAVAILABLE whatever was asked of it."""
    return int(RpcCode.UNAVAILABLE) if code == "DOCKER_UNAVAILABLE" else default
