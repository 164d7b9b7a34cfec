"""Sandboxes: a named place (runtime, workspace, env, labels) that execs run in.

The ``process`` and ``bwrap`` runtimes need nothing besides the execs' own
monitors; the ``docker`` runtime's containers and network are managed by
:class:`~tether.daemon.containers.ContainerService`. Stopping or deleting a
sandbox cancels its execs first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from functools import partial
from typing import Any

import msgspec

from tether.daemon.containers import ContainerService, rpc_code
from tether.daemon.events import EventBus
from tether.daemon.execs import ExecService
from tether.hostio.copy import CopyError, copy_into, copy_out_of, copy_path
from tether.hostio.paths import paths_overlap
from tether.model.errors import RpcCode, TetherError, invalid_params, not_found
from tether.model.records import DEFAULT_SANDBOX, Event, SandboxRecord, SandboxSpec
from tether.model.states import EXEC_TERMINAL, ExecState, IllegalTransition, SandboxState
from tether.runtime import bwrap as bwrap_runtime
from tether.runtime.docker import DockerEngine, DockerError
from tether.runtime.mapping import host_path
from tether.store import Store

RUNTIMES = ("auto", "process", "bwrap", "docker")

log = logging.getLogger("tether.sandboxes")

EPHEMERAL_GRACE = 60.0  # seconds an ephemeral sandbox may wait for its first exec


class SandboxService:
    def __init__(self, store: Store, bus: EventBus, execs: ExecService,
                 bwrap: bwrap_runtime.Probe, engine: DockerEngine) -> None:
        self.store = store
        self.bus = bus
        self.execs = execs
        self.bwrap = bwrap
        self.docker = ContainerService(store, bus, engine, self._finish_docker_delete)

    def _commit(self, result: tuple[SandboxRecord, Event]) -> SandboxRecord:
        self.bus.publish(result[1])
        return result[0]

    def resolve(self, ref: str) -> SandboxRecord:
        found = self.store.find_sandboxes(ref)
        if not found:
            raise not_found("sandbox", ref)
        if len(found) > 1:
            raise TetherError(RpcCode.AMBIGUOUS, "AMBIGUOUS",
                              f"{ref!r} matches {len(found)} sandboxes; give more of the id",
                              {"ref": ref, "matches": [r.id for r in found]})
        return found[0]

    def resolve_runtime(self, wanted: str) -> tuple[str, str | None]:
        """``auto`` → bwrap when it works here, else process (with the reason why)."""
        if wanted == "auto":
            if self.bwrap.available:
                return "bwrap", None
            return "process", f"runtime auto fell back to process: {self.bwrap.reason}"
        if wanted == "bwrap" and not self.bwrap.available:
            raise TetherError(RpcCode.INVALID_STATE, "RUNTIME_UNAVAILABLE",
                              f"the bwrap runtime is not available: {self.bwrap.reason}; "
                              "use runtime auto or process", {"runtime": "bwrap"})
        if wanted not in RUNTIMES:
            raise invalid_params(f"unknown runtime {wanted!r}; use one of: "
                                 f"{', '.join(RUNTIMES)}", runtime=wanted)
        return wanted, None

    def configure_default(self, wanted: str) -> str | None:
        """The implicit ``default`` sandbox runs what ``tether run`` starts without
        ``--sandbox``: sandboxed (``auto``) unless the daemon was told otherwise.
        Returns a warning when auto fell back to process."""
        if wanted not in ("auto", "bwrap", "process"):
            raise ValueError(f"--default-runtime must be auto, bwrap or process, not "
                             f"{wanted!r} (docker needs an image: create a sandbox)")
        runtime, warning = self.resolve_runtime(wanted)
        sb = self.store.get_sandbox(DEFAULT_SANDBOX)
        if sb is not None and sb.spec.runtime != runtime:
            self._commit(self.store.set_sandbox_spec(
                sb.id, msgspec.structs.replace(sb.spec, runtime=runtime),
                f"default runtime is now {runtime}" + (f" ({warning})" if warning else "")))
        return warning

    async def create(self, name: str, spec: SandboxSpec) -> SandboxRecord:
        runtime, warning = self.resolve_runtime(spec.runtime)
        spec = msgspec.structs.replace(spec, runtime=runtime)
        if runtime == "process" and (spec.mounts or spec.workspace_target or
                                     spec.network not in (None, "host")):
            raise invalid_params("the process runtime cannot isolate: mounts, "
                                 "workspace_target and network none/private need bwrap")
        if runtime != "docker" and (spec.image or spec.companions):
            raise invalid_params("image and companions need runtime docker")
        if runtime != "docker" and spec.resources is not None:
            raise invalid_params("resource limits (memory, cpus, pids) are enforced by the "
                                 "docker runtime only; use runtime docker or drop resources")
        if runtime == "docker":
            if not spec.image:
                raise invalid_params("runtime docker needs an image")
            if spec.network == "none" and spec.companions:
                raise invalid_params("network none cuts the sandbox off from its "
                                     "companions; use private")
        if spec.workspace is not None:
            if not os.path.isabs(spec.workspace) or not os.path.isdir(spec.workspace):
                raise invalid_params(
                    f"workspace {spec.workspace!r} must be an existing absolute directory")
            spec.workspace = os.path.realpath(spec.workspace)
            problem = bwrap_runtime.workspace_problem(spec.workspace)
            if problem is not None and runtime in ("bwrap", "docker"):
                raise invalid_params(problem)
            if paths_overlap(spec.workspace, os.path.realpath(self.execs.layout.root)):
                raise invalid_params(f"workspace {spec.workspace} overlaps tether's home; "
                                     "a sandbox must not see tether's own state")
        for i, m in enumerate(spec.mounts):
            problem = bwrap_runtime.mount_problem(os.path.realpath(m.source), m.mode,
                                                  os.path.realpath(self.execs.layout.root))
            if problem is not None:
                raise invalid_params(f"mounts[{i}]: {problem}")
        if runtime == "docker":
            await self.docker.ensure()  # refuse before anything is recorded
            rec = self._commit(self.store.create_sandbox(name, spec))
            return await self.docker.create(rec)
        rec = self._commit(self.store.create_sandbox(name, spec))
        ready = f"{runtime} runtime ready" + (f" ({warning})" if warning else "")
        return self._commit(self.store.transition_sandbox(rec.id, SandboxState.READY,
                                                          reason=ready))

    async def copy(self, sb: SandboxRecord, direction: str, src: str,
                   dst: str) -> dict[str, Any]:
        """``tether cp``: through dockerd for docker, else on the host's own files."""
        host = src if direction == "in" else dst
        if not os.path.isabs(host):
            raise invalid_params(f"the host path must be absolute, got {host!r}")
        home = os.path.realpath(self.execs.layout.root)
        # Nothing of tether's own state goes in (nor is written into it: copy_path).
        if direction == "in" and paths_overlap(os.path.realpath(src), home):
            raise invalid_params(f"{src} overlaps tether's home {home}; copy elsewhere")
        if sb.state not in (SandboxState.READY, SandboxState.STOPPED):
            raise TetherError(RpcCode.INVALID_STATE, "SANDBOX_NOT_READY",
                              f"sandbox {sb.name!r} is {sb.state}", {"sandbox": sb.id})
        try:
            if sb.spec.runtime == "docker":
                await self.docker.ensure()
                if direction == "in":
                    n = await self.docker.call(self.docker.engine.copy_in, sb.id, src, dst)
                else:
                    n = await self.docker.call(self.docker.engine.copy_out, sb.id, src, dst,
                                               home)
            elif direction == "in":
                place = host_path(sb.spec, dst, writing=True)
                if place.root is None:  # process runtime: the host's own paths
                    n = await asyncio.to_thread(partial(copy_path, src, place.path,
                                                        forbidden=home))
                else:  # the sandbox runs meanwhile: walk by descriptors, no symlinks
                    n = await asyncio.to_thread(copy_into, src, place.root, place.rel)
            else:
                place = host_path(sb.spec, src, writing=False)
                if place.root is None:  # process runtime: the host's own paths
                    n = await asyncio.to_thread(partial(copy_path, place.path, dst,
                                                        forbidden=home))
                else:  # the sandbox runs meanwhile: read by descriptors, no symlinks
                    n = await asyncio.to_thread(partial(copy_out_of, place.root,
                                                        place.rel, dst, forbidden=home))
        except (CopyError, DockerError) as e:
            raise TetherError(rpc_code(e.code, RpcCode.INVALID_PARAMS), e.code, str(e),
                              {"sandbox": sb.id}) from None
        except OSError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "COPY_FAILED",
                              f"copy failed: {e.strerror or e}: {e.filename or ''}",
                              {"sandbox": sb.id}) from None
        return {"sandbox": sb.id, "direction": direction, "src": src, "dst": dst, "bytes": n}

    async def _stop_execs(self, sb: SandboxRecord, grace: float, reason: str) -> None:
        live = self.store.list_execs(sandbox=sb.id,
                                     states=(ExecState.PENDING, ExecState.RUNNING))
        for rec in live:
            await self.execs.cancel(rec, signal.SIGTERM, grace, reason)
        for rec in live:
            await self.execs.wait(rec, grace + 5.0)

    async def stop(self, sb: SandboxRecord, grace: float,
                   reason: str = "stopped by request") -> SandboxRecord:
        if sb.state == SandboxState.STOPPED:
            return sb
        self._guard(sb, SandboxState.STOPPED)
        await self._stop_execs(sb, grace, f"sandbox {sb.name} stopped")
        if sb.spec.runtime == "docker":
            await self.docker.ensure()
            return await self.docker.stop(sb, reason)
        return self._commit(self.store.transition_sandbox(sb.id, SandboxState.STOPPED,
                                                          reason=reason))

    async def start(self, sb: SandboxRecord) -> SandboxRecord:
        if sb.state == SandboxState.READY:
            return sb
        self._guard(sb, SandboxState.READY)
        if sb.spec.runtime == "docker":
            await self.docker.ensure()
            return await self.docker.start(sb)
        return self._commit(self.store.transition_sandbox(sb.id, SandboxState.READY,
                                                          reason="started by request"))

    async def delete(self, sb: SandboxRecord, grace: float,
                     force: bool = False) -> SandboxRecord:
        if sb.id == DEFAULT_SANDBOX:
            raise TetherError(RpcCode.INVALID_STATE, "DEFAULT_SANDBOX",
                              "the default sandbox cannot be deleted (it can be stopped)")
        if sb.state != SandboxState.DELETING:
            self._guard(sb, SandboxState.DELETING)
            sb = self._commit(self.store.transition_sandbox(sb.id, SandboxState.DELETING,
                                                            reason="delete requested"))
        await self._stop_execs(sb, grace, f"sandbox {sb.name} deleted")
        if sb.spec.runtime == "docker":
            try:
                await self.docker.ensure()
                await self.docker.remove(sb)
            except TetherError as e:
                if not force:
                    raise TetherError(e.rpc_code, e.code, f"{e.message}; the sandbox stays "
                                      "DELETING until dockerd answers (or `tether sandbox rm "
                                      "--force` records it deleted now)", e.data) from None
                log.warning("sandbox %s deleted by force: %s", sb.id, e.message)
                self.docker.leftovers_due = True
                self.docker.wanted.set()
        return self._finish_delete(sb)

    async def _finish_docker_delete(self, sb: SandboxRecord) -> SandboxRecord:
        """The reconcile's DELETING row: its containers are already removed."""
        await self._stop_execs(sb, 5.0, f"sandbox {sb.name} deleted")
        return self._finish_delete(sb)

    def _finish_delete(self, sb: SandboxRecord) -> SandboxRecord:
        # Scratch files go; logs and exit files stay (they are history).
        for rec in self.store.list_execs(sandbox=sb.id):
            if rec.state not in EXEC_TERMINAL:
                continue
            paths = self.execs.paths(rec)
            for p in (paths.handles, paths.socket):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        return self._commit(self.store.transition_sandbox(sb.id, SandboxState.DELETED,
                                                          reason="deleted"))

    def _guard(self, sb: SandboxRecord, to: SandboxState) -> None:
        from tether.model.states import SANDBOX_TRANSITIONS, can_transition

        if not can_transition(SANDBOX_TRANSITIONS, sb.state, to):
            raise TetherError(RpcCode.INVALID_STATE, "INVALID_STATE",
                              f"sandbox {sb.name!r} is {sb.state} and cannot become {to}",
                              {"sandbox": sb.id, "state": sb.state})

    async def enforce_lifetimes(self, now: float) -> None:
        """``ttl`` deletes a sandbox that old; ``idle_timeout`` stops a READY one that has
        had no live exec for that long. Both are derived from durable times (creation,
        the last exec's end), so a daemon restart neither resets nor skips them."""
        for sb in self.store.list_sandboxes():
            if sb.id == DEFAULT_SANDBOX or sb.state in (SandboxState.DELETING,
                                                        SandboxState.PENDING):
                continue
            try:
                await self._enforce(sb, now)
            except (TetherError, IllegalTransition) as e:  # dockerd down, or a race
                log.warning("lifetime of sandbox %s: %s", sb.id, e)

    async def _enforce(self, sb: SandboxRecord, now: float) -> None:
        ttl, idle = sb.spec.ttl, sb.spec.idle_timeout
        if sb.spec.ephemeral:
            execs = self.store.list_execs(sandbox=sb.id)
            live = any(x.state not in EXEC_TERMINAL for x in execs)
            # No exec after a minute: the `tether run` that made it died before starting one.
            # From READY (updated_at), not creation: a slow docker create must not eat it.
            if not live and (execs or now - sb.updated_at >= EPHEMERAL_GRACE):
                await self.delete(self._mark(sb, "its command ended (made by tether run)"),
                                  grace=5.0)
                return
        if ttl is not None and now - sb.created_at >= ttl:
            await self.delete(self._mark(sb, f"ttl of {ttl:g}s expired"), grace=5.0)
            return
        if idle is None or sb.state != SandboxState.READY:
            return
        execs = self.store.list_execs(sandbox=sb.id)
        if any(x.state not in EXEC_TERMINAL for x in execs):
            return  # an attached client always has a live exec behind it
        idle_since = max([sb.updated_at, *(x.ended_at or 0.0 for x in execs)])
        if now - idle_since >= idle:
            await self.stop(sb, 5.0, reason=f"idle_timeout: no exec for {idle:g}s")

    def _mark(self, sb: SandboxRecord, reason: str) -> SandboxRecord:
        if sb.state == SandboxState.DELETING:
            return sb
        return self._commit(self.store.transition_sandbox(sb.id, SandboxState.DELETING,
                                                          reason=reason))

    async def recover(self) -> None:
        """Finish what a dead daemon left half done. Docker sandboxes are left to the
        reconcile that runs once dockerd answers, so a slow or absent engine never
        delays serving."""
        if any(sb.spec.runtime == "docker"
               for sb in self.store.list_sandboxes(include_deleted=True)):
            self.docker.wanted.set()  # a home that used docker: reconcile, sweep leftovers
        for sb in self.store.list_sandboxes():
            if sb.spec.runtime == "docker":
                continue
            if sb.state == SandboxState.PENDING:
                self._commit(self.store.transition_sandbox(
                    sb.id, SandboxState.FAILED,
                    reason="INTERRUPTED_PENDING: the daemon stopped while creating it"))
            elif sb.state == SandboxState.DELETING:
                await self._stop_execs(sb, 5.0, f"sandbox {sb.name} deleted")
                self._finish_delete(sb)
        await asyncio.sleep(0)
