"""Sandboxes: a named place (runtime, workspace, env, labels) that execs run in.

The service owns the sandbox lifecycle and its journal; what a runtime must make,
start, stop or remove for a sandbox goes through the runtime's interface
(:class:`~tether.runtime.base.Runtime`), which reports back through
:class:`_Host` (a :class:`~tether.runtime.base.SandboxHost` scoped to that
runtime's sandboxes). Stopping or deleting a sandbox cancels its execs first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

import msgspec

from tether.daemon.execs.service import ExecService
from tether.daemon.journal import Journal
from tether.daemon.logfmt import ids
from tether.hostio.copy import CopyError
from tether.hostio.paths import paths_overlap
from tether.model.errors import RpcCode, TetherError, ambiguous, invalid_params, not_found
from tether.model.records import DEFAULT_SANDBOX, SandboxRecord, SandboxSpec
from tether.model.states import EXEC_TERMINAL, ExecState, IllegalTransition, SandboxState
from tether.runtime.base import Runtime
from tether.runtime.registry import AUTO, Runtimes
from tether.store import Store

log = logging.getLogger("tether.sandboxes")

EPHEMERAL_GRACE = 60.0  # seconds an ephemeral sandbox may wait for its first exec


class _Host:
    """A runtime's view of the sandboxes: only its own, journaled by the service."""

    def __init__(self, service: SandboxService, runtime: Runtime) -> None:
        self._service = service
        self._runtime = runtime.name

    def _mine(self, sb: SandboxRecord | None) -> SandboxRecord | None:
        return sb if sb is not None and sb.spec.runtime == self._runtime else None

    def get(self, sandbox: str) -> SandboxRecord | None:
        return self._mine(self._service.store.get_sandbox(sandbox))

    def list(self, *, include_deleted: bool = False) -> list[SandboxRecord]:
        return [sb for sb in self._service.store.list_sandboxes(include_deleted=include_deleted)
                if self._mine(sb) is not None]

    def transition(self, sandbox: str, to: SandboxState, reason: str) -> SandboxRecord:
        return self._service.journal.commit(self._service.store.transition_sandbox(
            sandbox, to, reason=reason))

    def event(self, sandbox: str | None, kind: str, reason: str,
              data: dict[str, Any] | None = None) -> None:
        self._service.journal.record(sandbox, kind, reason=reason, data=data or {})

    async def finish_delete(self, sb: SandboxRecord) -> SandboxRecord:
        """The reconcile's DELETING row: what the runtime made is already removed."""
        await self._service._stop_execs(sb, 5.0, f"sandbox {sb.name} deleted")
        return self._service._finish_delete(sb)


class SandboxService:
    def __init__(self, store: Store, journal: Journal, execs: ExecService,
                 runtimes: Runtimes) -> None:
        self.store = store
        self.journal = journal
        self.execs = execs
        self.runtimes = runtimes
        runtimes.attach(lambda rt: _Host(self, rt))

    def runtime_of(self, sb: SandboxRecord) -> Runtime:
        return self.runtimes.get(sb.spec.runtime)

    def resolve(self, ref: str) -> SandboxRecord:
        found = self.store.find_sandboxes(ref)
        if not found:
            raise not_found("sandbox", ref)
        if len(found) > 1:
            raise ambiguous("sandboxes", ref, [r.id for r in found])
        return found[0]

    def configure_default(self, wanted: str) -> str | None:
        """The implicit ``default`` sandbox runs what ``tether run`` starts without
        ``--sandbox``: sandboxed (``auto``) unless the daemon was told otherwise.
        Returns a warning when auto fell back."""
        usable = ["auto", *(rt.name for rt in self.runtimes if rt.can_be_default)]
        if wanted not in usable:
            raise ValueError(f"--default-runtime must be {', '.join(usable[:-1])} or "
                             f"{usable[-1]}, not {wanted!r} (it needs a spec of its own: "
                             "create a sandbox)")
        rt, warning = self.runtimes.resolve(wanted)
        self.execs.default_falls_back = wanted == AUTO  # a named runtime stays strict
        sb = self.store.get_sandbox(DEFAULT_SANDBOX)
        if sb is not None and sb.spec.runtime != rt.name:
            self.journal.commit(self.store.set_sandbox_spec(
                sb.id, msgspec.structs.replace(sb.spec, runtime=rt.name),
                f"default runtime is now {rt.name}" + (f" ({warning})" if warning else "")))
        return warning

    async def create(self, name: str, spec: SandboxSpec) -> SandboxRecord:
        rt, warning = self.runtimes.resolve(spec.runtime)
        spec = msgspec.structs.replace(spec, runtime=rt.name)
        rt.check_spec(spec)
        if spec.workspace is not None:
            if not os.path.isabs(spec.workspace) or not os.path.isdir(spec.workspace):
                raise invalid_params(
                    f"workspace {spec.workspace!r} must be an existing absolute directory")
            spec.workspace = os.path.realpath(spec.workspace)
            problem = rt.workspace_problem(spec.workspace)
            if problem is not None:
                raise invalid_params(problem)
            if paths_overlap(spec.workspace, os.path.realpath(self.execs.layout.root)):
                raise invalid_params(f"workspace {spec.workspace} overlaps tether's home; "
                                     "a sandbox must not see tether's own state")
        for i, m in enumerate(spec.mounts):
            problem = rt.mount_problem(os.path.realpath(m.source), m.mode,
                                       os.path.realpath(self.execs.layout.root))
            if problem is not None:
                raise invalid_params(f"mounts[{i}]: {problem}")
        await rt.ensure(spec)  # refuse before anything is recorded
        rec = self.journal.commit(self.store.create_sandbox(name, spec))
        return await rt.create(rec, warning)

    async def copy(self, sb: SandboxRecord, direction: str, src: str,
                   dst: str) -> dict[str, Any]:
        """``tether cp``, by the sandbox's runtime."""
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
            n = await self.runtime_of(sb).copy(sb, direction, src, dst, tether_home=home)
        except CopyError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, e.code, str(e),
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
        self.execs.monitors.drop_zygotes(sb.id)
        await self._stop_execs(sb, grace, f"sandbox {sb.name} stopped")
        return await self.runtime_of(sb).stop(sb, reason)

    async def start(self, sb: SandboxRecord) -> SandboxRecord:
        if sb.state == SandboxState.READY:
            return sb
        self._guard(sb, SandboxState.READY)
        return await self.runtime_of(sb).start(sb)

    async def delete(self, sb: SandboxRecord, grace: float,
                     force: bool = False) -> SandboxRecord:
        if sb.id == DEFAULT_SANDBOX:
            raise TetherError(RpcCode.INVALID_STATE, "DEFAULT_SANDBOX",
                              "the default sandbox cannot be deleted (it can be stopped)")
        if sb.state != SandboxState.DELETING:
            self._guard(sb, SandboxState.DELETING)
            sb = self.journal.commit(self.store.transition_sandbox(sb.id, SandboxState.DELETING,
                                                            reason="delete requested"))
        self.execs.monitors.drop_zygotes(sb.id)
        await self._stop_execs(sb, grace, f"sandbox {sb.name} deleted")
        await self.runtime_of(sb).remove(sb, force=force)
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
        return self.journal.commit(self.store.transition_sandbox(sb.id, SandboxState.DELETED,
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
                log.warning("lifetime of sandbox %s: %s", sb.id, e, extra=ids(sandbox=sb.id))

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
        return self.journal.commit(self.store.transition_sandbox(sb.id, SandboxState.DELETING,
                                                          reason=reason))

    async def recover(self) -> None:
        """Finish what a dead daemon left half done. A runtime that adopts its own
        sandboxes later (docker, once dockerd answers) is told about them instead, so a
        slow or absent engine never delays serving."""
        every = self.store.list_sandboxes(include_deleted=True)
        for rt in self.runtimes:
            rt.note_sandboxes([sb for sb in every if sb.spec.runtime == rt.name])
        for sb in self.store.list_sandboxes():
            if not self.runtime_of(sb).adopts_at_start():
                continue
            if sb.state == SandboxState.PENDING:
                self.journal.commit(self.store.transition_sandbox(
                    sb.id, SandboxState.FAILED,
                    reason="INTERRUPTED_PENDING: the daemon stopped while creating it"))
            elif sb.state == SandboxState.DELETING:
                await self._stop_execs(sb, 5.0, f"sandbox {sb.name} deleted")
                self._finish_delete(sb)
        await asyncio.sleep(0)
