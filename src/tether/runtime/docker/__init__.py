"""The ``docker`` runtime: a sandbox is a few containers on a private network.

* :mod:`.names` — what tether calls things in docker, and what the monitor runs for
  an exec: an Engine API exec of its own, or ``docker exec`` (never the SDK);
* :mod:`.engine` — dockerd through its SDK (blocking; called from threads);
* :mod:`.copying` — ``tether cp`` through tar archives;
* :mod:`.service` — the sandbox lifecycle, the reconcile table
  (:mod:`.reconcile`) applied, and docker's event stream watched;
* :class:`DockerRuntime` — all of it behind :class:`~tether.runtime.base.Runtime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from tether.model.errors import RpcCode, TetherError
from tether.model.records import NetworkPolicy, SandboxRecord, SandboxSpec
from tether.model.states import SandboxState
from tether.runtime.base import (
    ExecRequest,
    Launch,
    LaunchPlan,
    Runtime,
    RuntimeStatus,
    SandboxHost,
    SpecProblem,
)
from tether.runtime.bwrap import mount_problem, workspace_problem
from tether.runtime.docker import copying
from tether.runtime.docker.engine import DockerEngine
from tether.runtime.docker.names import (
    HOST_ONLY_ENV,
    KEEPALIVE,
    bridge_name,
    client_env,
    docker_binary,
    engine_address,
    exec_argv,
    exec_config,
    home_key,
    inside_cwd,
    primary_name,
    signal_argv,
    signal_command,
)
from tether.runtime.docker.service import ContainerService, rpc_code
from tether.runtime.docker.views import DockerError

__all__ = ["HOST_ONLY_ENV", "KEEPALIVE", "DockerEngine", "DockerRuntime", "bridge_name",
           "docker_binary", "exec_argv", "home_key", "inside_cwd", "signal_argv"]

log = logging.getLogger("tether.docker")

PROBE_TIMEOUT = 10.0  # seconds daemon.status waits for a first probe of dockerd


class DockerRuntime(Runtime):
    name = "docker"
    can_be_default = False  # it needs an image: create a sandbox with one
    enforces_resources = True
    refuses_agents = ("agents cannot run in docker sandboxes yet (their hooks need "
                      "tether's agent socket inside the container); use a bwrap or "
                      "process sandbox, e.g. the default one")

    def __init__(self, home: str, docker_cli: str | None, exec_via: str = "api") -> None:
        self.home = home
        self.docker_bin = docker_cli
        self.exec_via = exec_via  # TETHER_DOCKER_EXEC: "api" (else "cli": docker exec)
        self.engine = DockerEngine(home, docker_cli)
        self._services: dict[str | None, ContainerService] = {}  # by docker_host
        self._watches: asyncio.TaskGroup | None = None  # run()'s: one watch per engine

    def attach(self, host: SandboxHost) -> None:
        super().attach(host)
        self.service = ContainerService(host, self.engine, self.docker_bin)
        self._services[None] = self.service

    def service_for(self, spec: SandboxSpec) -> ContainerService:
        """The service of the engine ``spec`` names, made (and watched) on first use."""
        svc = self._services.get(spec.docker_host)
        if svc is None:
            engine = DockerEngine(self.home, self.docker_bin, spec.docker_host,
                                  spec.docker_cert_path)
            svc = self._services[spec.docker_host] = ContainerService(
                self.host, engine, self.docker_bin)
            if self._watches is not None:
                self._watches.create_task(svc.watch_loop())
        return svc

    # ------------------------------------------------------------------ availability
    def available(self) -> tuple[bool, str]:
        return True, "dockerd is probed when a request needs it (ensure)"

    async def status(self) -> RuntimeStatus:
        if self.service.probe_result is None and self.docker_bin:
            with contextlib.suppress(TetherError, TimeoutError):
                await asyncio.wait_for(self.service.ensure(), PROBE_TIMEOUT)
        view = self.service.status()
        remote = {h: svc.status() for h, svc in self._services.items() if h is not None}
        if remote:
            view["hosts"] = remote
        return RuntimeStatus(view.pop("available"), view)

    async def ensure(self, spec: SandboxSpec | None = None) -> None:
        if spec is None:
            await self.service.ensure()
            return
        svc = self.service_for(spec)
        if svc.engine.cert_path != spec.docker_cert_path:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"docker_host {spec.docker_host} is already used with "
                              f"docker_cert_path {svc.engine.cert_path}; one engine has one "
                              "set of TLS files: use that docker_cert_path",
                              {"docker_host": spec.docker_host})
        await svc.ensure()

    # ------------------------------------------------------------------ specs
    @classmethod
    def spec_problems(cls, spec: SandboxSpec) -> list[SpecProblem]:
        out: list[SpecProblem] = []
        if not spec.image:
            out.append(SpecProblem("image", "required field is missing (runtime: docker needs "
                                   "an image)", key="runtime"))
        if isinstance(spec.network, NetworkPolicy):
            out.append(SpecProblem("network", "network.allow is the egress proxy of bwrap "
                                   "sandboxes' agents; a docker sandbox's network is none, "
                                   "private or host"))
        if spec.network == "none" and spec.companions:
            out.append(SpecProblem("network", "network: none cuts the sandbox off from its "
                                   "companions; use private"))
        if spec.docker_cert_path is not None and not (spec.docker_host or "").startswith(
                "tcp://"):
            out.append(SpecProblem("docker_cert_path", "TLS certificates are for a "
                                   "docker_host of tcp://HOST:PORT (unix:// and ssh:// "
                                   "need none); remove docker_cert_path or set docker_host"))
        return out

    def workspace_problem(self, path: str) -> str | None:
        return workspace_problem(path)

    def mount_problem(self, source: str, mode: str, tether_home: str) -> str | None:
        return mount_problem(source, mode, tether_home)

    # ------------------------------------------------------------------ execs
    def prepare_exec(self, req: ExecRequest) -> LaunchPlan:
        docker_bin = self.docker_bin
        spec, sandbox = req.spec, req.sandbox
        host = engine_address(sandbox.spec) if self.exec_via == "api" else None
        if host is None and docker_bin is None:
            raise TetherError(RpcCode.INVALID_STATE, "RUNTIME_UNAVAILABLE",
                              "the docker CLI is not installed; docker execs on this engine "
                              "need it", {"runtime": "docker"})

        def launch(exec_id: str) -> Launch:
            # The sandbox's own env is the container's; only the exec's travels.
            inner = {k: v for k, v in spec.env.items()
                     if k not in HOST_ONLY_ENV and not k.startswith("DOCKER_")}
            if spec.tty:
                inner["TERM"] = spec.env.get("TERM", "xterm")
            inner["TETHER_EXEC_ID"] = exec_id
            inner["TETHER_SANDBOX"] = sandbox.id
            cwd = inside_cwd(sandbox.spec, req.cwd)
            if host is not None:  # the monitor's own Engine API client
                return Launch(argv=list(spec.argv), env={}, cwd="/", engine={
                    "host": host, "container": primary_name(sandbox.id),
                    "config": exec_config(spec.argv, inner, cwd=cwd, tty=spec.tty,
                                          stdin=spec.stdin),
                    "signal": signal_command(exec_id)})
            assert docker_bin is not None
            env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                   "HOME": os.environ.get("HOME", "/"),
                   "LANG": os.environ.get("LANG", "C.UTF-8")}
            env.update(client_env(sandbox.spec))
            env.update(inner)
            # The values are the client's environment; only their names are on its argv.
            argv = exec_argv(docker_bin, sandbox.id, spec.argv, sorted(inner), cwd=cwd,
                             tty=spec.tty, stdin=spec.stdin)
            # cwd "/": the docker client's own; the exec's is its -w.
            return Launch(argv=argv, env=env, cwd="/",
                          signal_argv=signal_argv(docker_bin, sandbox.id, exec_id))
        return launch

    # ------------------------------------------------------------------ lifecycle
    async def create(self, sb: SandboxRecord, note: str | None) -> SandboxRecord:
        return await self.service_for(sb.spec).create(sb)

    async def start(self, sb: SandboxRecord) -> SandboxRecord:
        svc = self.service_for(sb.spec)
        await svc.ensure()
        return await svc.start(sb)

    async def stop(self, sb: SandboxRecord, reason: str) -> SandboxRecord:
        svc = self.service_for(sb.spec)
        await svc.ensure()
        return await svc.stop(sb, reason)

    async def remove(self, sb: SandboxRecord, *, force: bool) -> None:
        svc = self.service_for(sb.spec)
        try:
            await svc.ensure()
            await svc.remove(sb)
        except TetherError as e:
            if not force:
                raise TetherError(e.rpc_code, e.code, f"{e.message}; the sandbox stays "
                                  "DELETING until dockerd answers (or `tether sandbox rm "
                                  "--force` records it deleted now)", e.data) from None
            log.warning("sandbox %s deleted by force: %s", sb.id, e.message)
            svc.leftovers_due = True
            svc.wanted.set()

    async def copy(self, sb: SandboxRecord, direction: str, src: str, dst: str, *,
                   tether_home: str) -> int:
        svc = self.service_for(sb.spec)
        await svc.ensure()
        try:
            if direction == "in":
                return await svc.call(copying.copy_in, svc.engine, sb.id, src, dst)
            return await svc.call(copying.copy_out, svc.engine, sb.id, src, dst,
                                  tether_home)
        except DockerError as e:
            raise TetherError(rpc_code(e.code, RpcCode.INVALID_PARAMS), e.code, str(e),
                              {"sandbox": sb.id}) from None

    # ------------------------------------------------------------------ recovery
    def adopts_at_start(self) -> bool:
        return False  # the reconcile takes them over once dockerd answers

    def note_sandboxes(self, sandboxes: list[SandboxRecord]) -> None:
        if sandboxes:  # a home that used docker: reconcile, sweep leftovers
            self.service.wanted.set()
        for sb in sandboxes:  # other engines: those with a sandbox left to reconcile
            if sb.spec.docker_host is not None and sb.state != SandboxState.DELETED:
                self.service_for(sb.spec).wanted.set()

    async def end_orphan(self, sb: SandboxRecord, exec_id: str) -> None:
        """Killing a docker exec's client (or its monitor) does not end its command in
        the container: SIGKILL every process there that carries its ``TETHER_EXEC_ID``."""
        svc = self.service_for(sb.spec)
        try:
            await svc.ensure()
            await svc.call(svc.engine.kill_exec, sb.id, exec_id)
        except (TetherError, DockerError) as e:
            log.warning("exec %s: its monitor died; what it left running in sandbox %s "
                        "could not be ended: %s", exec_id, sb.id, e)

    async def run(self) -> None:
        """One watch per engine in use, in a task group this task owns: an engine a
        sandbox names later joins it (:meth:`service_for`)."""
        async with asyncio.TaskGroup() as tg:
            self._watches = tg
            try:
                for svc in list(self._services.values()):
                    tg.create_task(svc.watch_loop())
                await asyncio.Future()  # until the daemon cancels run()
            finally:
                self._watches = None

    async def sweep(self) -> None:
        for svc in list(self._services.values()):
            await svc.sweep_leftovers()

