"""The one interface every runtime implements, and what a runtime may ask of the daemon.

A runtime is *where* a sandbox's execs run: plain processes, bubblewrap
namespaces, a docker container. Every exec, whatever its runtime, is run by a
monitor from the :class:`~tether.runtime.monitors.MonitorPool`; a runtime only
says *what* that monitor launches (:meth:`Runtime.prepare_exec` → :class:`Launch`)
and manages the sandbox's own resources (containers, networks) through its
lifecycle. The daemon's services call runtimes only through this interface and
never compare a runtime's name: adding one is a new module and one line in
:mod:`tether.runtime.registry`.

Runtimes never import the daemon: what they need of it (the sandbox records and
journaled transitions) comes through :class:`SandboxHost`, which the daemon's
sandbox service implements.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Protocol

from tether.model.errors import RpcCode, TetherError, invalid_params
from tether.model.records import ExecSpec, SandboxRecord, SandboxSpec
from tether.model.states import SandboxState

#: The code of an exec a confining runtime refuses only because of where it runs (its
#: working directory): the implicit default sandbox runs it unconfined instead.
CANNOT_CONFINE = "CANNOT_SANDBOX_HERE"


@dataclass(frozen=True)
class AgentView:
    """What an agent session sees besides a plain exec's view (a confining runtime
    binds these; see :mod:`tether.agent.confinement` for the policy)."""

    rw: tuple[str, ...] = ()  # host paths bound read-write at the same place
    ro: tuple[str, ...] = ()  # files under tether's home it may read (its snapshot)
    socket_dir: str | None = None  # the directory of tether's agent.sock, bound as is
    tools: tuple[str, ...] = ()  # under the hidden home directories: its toolchain, read-only
    # The host directory holding its egress proxy socket (``tether.egress``), bound
    # read-only inside when its network goes through the proxy; None: no way out then.
    egress: str | None = None
    # (path the agent sees, the file shown there read-only instead): bound last, over
    # the rest (the provider's config with tether's hooks, over the user's own).
    views: tuple[tuple[str, str], ...] = ()


class SpecProblem(NamedTuple):
    """A spec field a runtime cannot honour: ``path`` is the key path the message names;
    a spec file's error points at the line of top-level ``key`` (default: the path's own)."""

    path: str
    problem: str
    key: str | None = None


@dataclass(frozen=True)
class ExecRequest:
    """An exec about to be accepted: everything a runtime needs to vet and plan it."""

    sandbox: SandboxRecord
    spec: ExecSpec
    cwd: str | None  # the exec's cwd, else the sandbox's workspace (checked to exist)
    tether_home: str  # real path: never visible inside a sandbox
    agent: AgentView | None = None


@dataclass(frozen=True)
class Launch:
    """What the exec's monitor runs: argv, its environment and working directory, and
    (when the monitor's child only drives the command, like a ``docker exec`` client)
    the argv that, plus a signal number, signals the command itself. ``gated``: the
    child runs the command as its grandchild behind a gate on fd 3 (see
    :mod:`tether.monitor.pin`), so the monitor can record the command's own status and
    signal its own process group rather than the child's (bwrap's). ``engine``: the
    command is a docker exec the monitor creates through dockerd's Engine API and its
    child, a fork of the monitor, runs (:mod:`tether.monitor.dockerexec`); ``argv`` is
    then the command as requested, for messages, and ``env`` unused."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    signal_argv: list[str] | None = None
    gated: bool = False
    warm: Warm | None = None
    engine: dict[str, Any] | None = None


@dataclass(frozen=True)
class Warm:
    """How a pre-started sandbox (a zygote: :mod:`tether.monitor.zygote`) can run the
    same exec instead: ``argv`` set the sandbox up ahead (one per ``sandbox``, matched
    exactly, so a different bind set starts cold), then the command runs inside with
    the launch's environment, at ``cwd`` (a path inside the sandbox). ``ident``: what the
    binds' sources are now (``bwrap.bind_identity``); a zygote made for other ones
    (a workspace replaced at the same path) is not used."""

    sandbox: str
    argv: tuple[str, ...]
    cwd: str
    command: tuple[str, ...]
    ident: tuple[tuple[int, int], ...] = ()


#: The reason of an exec its monitor killed because its host's fleet lease ran out
#: begins with this (``MonitorFence``); the exec is CANCELLED.
FENCED = "fenced: "


@dataclass(frozen=True)
class MonitorFence:
    """Makes an exec's monitor kill its command (SIGKILL, outcome ``fenced``) once the
    lease file at ``path`` (``tether.daemon.fleet.lease``) names another ``epoch``,
    another boot, a deadline on ``CLOCK_MONOTONIC`` that has passed, or cannot be read:
    the exec's work is then revived on another host, and must not run here too, even
    when this host's daemon is dead. ``reason`` (starting with :data:`FENCED`) is
    written into the exit file."""

    path: str
    epoch: int
    reason: str


#: Called with the new exec's id once its intent is committed.
LaunchPlan = Callable[[str], Launch]


@dataclass(frozen=True)
class RuntimeStatus:
    """``daemon.status``'s view of one runtime."""

    available: bool | None  # None: not probed yet
    fields: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {"available": self.available, **self.fields}


class SandboxHost(Protocol):
    """What a runtime may ask of the daemon: read sandboxes, journal what it did."""

    def get(self, sandbox: str) -> SandboxRecord | None: ...

    def list(self, *, include_deleted: bool = False) -> list[SandboxRecord]: ...

    def transition(self, sandbox: str, to: SandboxState, reason: str) -> SandboxRecord:
        """Commit and publish; raises ``IllegalTransition`` when the record moved on."""
        ...

    def event(self, sandbox: str | None, kind: str, reason: str,
              data: dict[str, Any] | None = None) -> None: ...

    async def finish_delete(self, sb: SandboxRecord) -> SandboxRecord:
        """Stop the sandbox's execs, drop their scratch files, record DELETED."""
        ...


def host_env(spec: ExecSpec, sandbox: SandboxRecord, exec_id: str) -> dict[str, str]:
    """The environment of a command that runs on the host's own files: a minimal base
    from the daemon's, then the sandbox's, then the exec's, then tether's ids."""
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/"), "LANG": os.environ.get("LANG", "C.UTF-8")}
    env.update(sandbox.spec.env)
    env.update(spec.env)
    if spec.tty:  # ncurses trusts these over the terminal: they would pin its size
        env.pop("LINES", None)
        env.pop("COLUMNS", None)
    env["TETHER_EXEC_ID"] = exec_id
    env["TETHER_SANDBOX"] = sandbox.id
    return env


def unavailable(name: str, reason: str) -> TetherError:
    return TetherError(RpcCode.INVALID_STATE, "RUNTIME_UNAVAILABLE",
                       f"the {name} runtime is not available: {reason}", {"runtime": name})


class Runtime(ABC):
    """A place where execs run. The defaults fit a runtime whose sandboxes are only
    records (nothing to create or remove) and whose files are the host's own."""

    host: SandboxHost  # set by attach()

    #: The name in specs, records and the registry.
    name: ClassVar[str]
    #: May the implicit ``default`` sandbox use it (it has no spec of its own)?
    can_be_default: ClassVar[bool] = True
    #: Does an agent run in it confined, with an :class:`AgentView` of what it may see?
    confines_agents: ClassVar[bool] = False
    #: Why agents cannot run in it, or None when they can.
    refuses_agents: ClassVar[str | None] = None
    #: Can it enforce ``resources`` (memory, cpus, pids)? Checked when a sandbox is
    #: created, not when a spec is parsed (a spec may leave its runtime to ``auto``).
    enforces_resources: ClassVar[bool] = False

    # ------------------------------------------------------------------ availability
    def available(self) -> tuple[bool, str]:
        """Can it run here, and if not, why (for ``auto`` and for errors)."""
        return True, "ok"

    async def status(self) -> RuntimeStatus:
        ok, reason = self.available()
        return RuntimeStatus(ok, {} if ok else {"reason": reason})

    async def ensure(self, spec: SandboxSpec | None = None) -> None:
        """Refuse (``RUNTIME_UNAVAILABLE``) when it cannot serve a request now (for a
        sandbox of ``spec``: it may name where it runs, a docker ``docker_host``)."""
        ok, reason = self.available()
        if not ok:
            raise unavailable(self.name, reason)

    # ------------------------------------------------------------------ specs
    @classmethod
    def spec_problems(cls, spec: SandboxSpec) -> list[SpecProblem]:
        """The spec fields this runtime cannot honour; checked when a spec is parsed
        (with the file's line) and again when a sandbox is created."""
        return []

    def workspace_problem(self, path: str) -> str | None:
        """Why ``path`` (a real path) cannot be this runtime's workspace, or None."""
        return None

    def mount_problem(self, source: str, mode: str, tether_home: str) -> str | None:
        """Why a host path (real) cannot be mounted into this runtime's sandbox, or None."""
        return None

    def check_spec(self, spec: SandboxSpec) -> None:
        problems = self.spec_problems(spec)
        if problems:  # the same words as a spec file's error, with the field's path
            raise invalid_params(f"{problems[0].path}: {problems[0].problem}")
        if spec.resources is not None and not self.enforces_resources:
            raise invalid_params(f"resource limits (memory, cpus, pids) are enforced by the "
                                 f"docker runtime only (runtime is {self.name!r}); use runtime "
                                 "docker or drop resources")

    # ------------------------------------------------------------------ execs
    @abstractmethod
    def prepare_exec(self, req: ExecRequest) -> LaunchPlan:
        """Vet an exec before its intent is committed (raise ``TetherError`` to refuse
        it) and return how to launch it once it has an id."""

    # ------------------------------------------------------------------ lifecycle
    def attach(self, host: SandboxHost) -> None:
        """Called once, by the service that journals sandbox changes for every runtime."""
        self.host = host

    async def create(self, sb: SandboxRecord, note: str | None) -> SandboxRecord:
        """PENDING → READY (or FAILED), making whatever the sandbox needs."""
        ready = f"{self.name} runtime ready" + (f" ({note})" if note else "")
        return self.host.transition(sb.id, SandboxState.READY, ready)

    async def start(self, sb: SandboxRecord) -> SandboxRecord:
        return self.host.transition(sb.id, SandboxState.READY, "started by request")

    async def stop(self, sb: SandboxRecord, reason: str) -> SandboxRecord:
        return self.host.transition(sb.id, SandboxState.STOPPED, reason)

    async def remove(self, sb: SandboxRecord, *, force: bool) -> None:
        """Remove what the sandbox owns (its execs have ended). ``force``: record the
        sandbox deleted even if that fails now; leftovers are swept later."""
        return None

    @abstractmethod
    async def copy(self, sb: SandboxRecord, direction: str, src: str, dst: str, *,
                   tether_home: str) -> int:
        """``tether cp`` in (host → sandbox) or out; returns the bytes copied. Never
        writes into ``tether_home``."""

    # ------------------------------------------------------------------ recovery
    def adopts_at_start(self) -> bool:
        """True: the daemon's start-up recovery finishes this runtime's half-done
        sandboxes (PENDING → FAILED, DELETING → DELETED). False: the runtime does it
        itself, later (:meth:`run`), so a slow engine never delays serving."""
        return True

    def note_sandboxes(self, sandboxes: list[SandboxRecord]) -> None:
        """At start-up, every sandbox of this runtime the store knows, deleted ones too."""
        return None

    async def end_orphan(self, sb: SandboxRecord, exec_id: str) -> None:
        """An exec's monitor died while its command may still run, and the daemon has
        killed the child's process group on the host (recovery, ``lost``): end what the
        command runs where that cannot reach (a container). Nothing by default: the
        host's process group is all of it."""
        return None

    async def run(self) -> None:
        """The runtime's own long-lived work (watching an engine's events), owned by the
        daemon's task group. Returns at once when there is none."""
        return None

    async def sweep(self) -> None:
        """Called by the daemon's periodic sweep."""
        return None
