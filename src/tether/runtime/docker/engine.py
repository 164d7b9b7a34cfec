"""dockerd through its SDK, for one tether home: create, start, stop and remove a
sandbox's containers and network, inspect them, and stream their events.

Every method blocks; the daemon calls them from threads. The SDK is imported on
first use, so a daemon that never uses docker pays nothing for it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any

from tether.model.records import CompanionSpec, SandboxSpec
from tether.runtime.docker.names import (
    KEEPALIVE,
    LABEL_COMPANION,
    LABEL_HOME,
    LABEL_NAME,
    LABEL_ROLE,
    LABEL_SANDBOX,
    STOP_TIMEOUT,
    bridge_name,
    companion_name,
    home_key,
    network_name,
    primary_name,
    signal_command,
    workspace_target,
)
from tether.runtime.docker.views import ContainerView, DockerError, Probe, short

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class DockerEngine:
    """One dockerd through its SDK, for one tether home: the daemon's own (``host``
    None: DOCKER_HOST or the local socket) or a sandbox's ``docker_host``."""

    def __init__(self, home: str, docker_cli: str | None, host: str | None = None,
                 cert_path: str | None = None) -> None:
        self.home = home
        self.docker_cli = docker_cli
        self.host = host
        self.cert_path = cert_path
        self._key: str | None = None
        self._client: docker.DockerClient | None = None

    @property
    def key(self) -> str:
        """Made on first use: a home that never uses docker never writes one."""
        if self._key is None:
            self._key = home_key(self.home)
        return self._key

    @property
    def local(self) -> bool:
        """Whether the engine's bridges are this machine's, so that iptables here keeps
        a sandbox off the host (a tcp:// or ssh:// engine's are another machine's)."""
        return self.host is None or self.host.startswith("unix://")

    @property
    def where(self) -> str:
        return f"dockerd at {self.host}" if self.host else "dockerd"

    # ------------------------------------------------------------------ connection
    def client(self) -> docker.DockerClient:
        if self._client is None:
            import docker

            try:
                if self.host is None:
                    self._client = docker.from_env(timeout=120)
                else:
                    self._client = docker.DockerClient(
                        base_url=self.host, timeout=120, tls=self._tls(),
                        # ssh:// through the ssh binary, as the docker CLI does (its
                        # ~/.ssh/config and agent), not paramiko.
                        use_ssh_client=self.host.startswith("ssh://"))
            except docker.errors.DockerException as e:
                raise DockerError(f"cannot reach {self.where}: {e}",
                                  "DOCKER_UNAVAILABLE") from None
        return self._client

    def _tls(self) -> Any:
        if self.cert_path is None:
            return False
        from docker.tls import TLSConfig

        return TLSConfig(client_cert=(f"{self.cert_path}/cert.pem",
                                      f"{self.cert_path}/key.pem"),
                         ca_cert=f"{self.cert_path}/ca.pem", verify=True)

    def reset(self) -> None:
        """Drop the connection (after dockerd went away) so the next call reconnects."""
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a dead connection
                self._client.close()
        self._client = None

    def probe(self) -> Probe:
        if self.docker_cli is None:
            return Probe(False, None, "the docker CLI is not installed (apt-get install "
                         "docker.io)")
        try:
            c = self.client()
            c.ping()
            version = str(c.version().get("Version"))
        except Exception as e:
            self.reset()
            how = "or fix the sandbox's docker_host" if self.host else "or set DOCKER_HOST"
            return Probe(False, None, f"{self.where} is not reachable: {short(e)} (start "
                         f"it, {how})")
        return Probe(True, version, "ok")

    def labels(self, sandbox: str, name: str, role: str, **extra: str) -> dict[str, str]:
        return {LABEL_SANDBOX: sandbox, LABEL_HOME: self.key, LABEL_ROLE: role,
                LABEL_NAME: name, **extra}

    # ------------------------------------------------------------------ create / start
    def create(self, sandbox: str, name: str, spec: SandboxSpec,
               on_event: Any = None) -> None:
        """Network, companions (required ones healthy), then the primary. Raises
        :class:`DockerError`; the caller removes what was made (:meth:`remove`)."""
        import docker

        c = self.client()
        images = {spec.image, *(x.image for x in spec.companions)}
        for image in sorted(i for i in images if i):
            try:
                c.images.get(image)
            except docker.errors.ImageNotFound:
                raise DockerError(f"image {image!r} is not on this docker engine; load or "
                                  f"pull it first (`docker pull {image}`); tether never pulls",
                                  "IMAGE_NOT_FOUND") from None
            except docker.errors.APIError as e:
                raise DockerError(f"docker cannot inspect image {image!r}: {short(e)}") from e
        net = None
        if (spec.network or "private") != "none":
            net = network_name(sandbox)
            try:
                c.networks.create(
                    net, driver="bridge", internal=spec.network != "host",
                    labels=self.labels(sandbox, name, "network"),
                    options={"com.docker.network.bridge.name": bridge_name(sandbox)})
            except docker.errors.APIError as e:
                raise DockerError(f"creating network {net} failed: {short(e)}") from e
            if spec.network != "host":
                self.block_host(sandbox)
        for comp in spec.companions:
            self._create_companion(sandbox, name, comp, net, spec.restart)
        for comp in spec.companions:
            self._start_companion(sandbox, comp, on_event)
        self._create_primary(sandbox, name, spec, net).start()

    def _create_companion(self, sandbox: str, name: str, comp: CompanionSpec,
                          net: str | None, restart: str) -> Container:
        import docker

        c = self.client()
        kw: dict[str, Any] = _restart_policy(restart)
        if comp.health is not None:
            h = comp.health
            kw["healthcheck"] = {"test": ["CMD", *h.command], "interval": _ns(h.interval),
                                 "timeout": _ns(h.timeout), "retries": h.retries,
                                 "start_period": _ns(h.start_period)}
        if net is not None:
            kw["network"] = net
            kw["networking_config"] = {net: c.api.create_endpoint_config(aliases=[comp.name])}
        try:
            return c.containers.create(
                comp.image, command=comp.command, name=companion_name(sandbox, comp.name),
                environment=comp.env, hostname=comp.name, init=True, detach=True,
                labels=self.labels(sandbox, name, "companion",
                                   **{LABEL_COMPANION: comp.name}), **kw)
        except docker.errors.APIError as e:
            raise DockerError(f"creating companion {comp.name!r} failed: {short(e)}") from e

    def _create_primary(self, sandbox: str, name: str, spec: SandboxSpec,
                        net: str | None) -> Container:
        import docker

        volumes: dict[str, dict[str, str]] = {}
        target = workspace_target(spec)
        kw: dict[str, Any] = _restart_policy(spec.restart)
        if spec.workspace is not None and target is not None:
            volumes[spec.workspace] = {"bind": target, "mode": "rw"}
        for m in spec.mounts:
            volumes[m.source] = {"bind": m.target, "mode": m.mode}
        r = spec.resources
        if r is not None:
            if r.memory is not None:
                kw["mem_limit"] = r.memory
                kw["memswap_limit"] = r.memory  # no swap beyond the limit
            if r.cpus is not None:
                kw["nano_cpus"] = int(r.cpus * 1e9)
            if r.pids is not None:
                kw["pids_limit"] = r.pids
        if net is None:
            kw["network_mode"] = "none"
        else:
            kw["network"] = net
        if target is not None:
            kw["working_dir"] = target
        try:
            assert spec.image is not None
            return self.client().containers.create(
                spec.image, command=KEEPALIVE, name=primary_name(sandbox), init=True,
                detach=True, environment=spec.env, hostname=f"tether-{sandbox[:12]}",
                volumes=volumes, labels=self.labels(sandbox, name, "primary"), **kw)
        except docker.errors.APIError as e:
            raise DockerError(f"creating the primary container failed: {short(e)}") from e

    def _start_companion(self, sandbox: str, comp: CompanionSpec, on_event: Any) -> None:
        import docker

        cname = companion_name(sandbox, comp.name)
        try:
            self.client().containers.get(cname).start()
        except docker.errors.APIError as e:
            raise DockerError(f"starting companion {comp.name!r} failed: {short(e)}") from e
        if comp.required:
            self.wait_healthy(sandbox, comp)
            if on_event is not None:
                on_event(comp.name, "healthy" if comp.health else "running")

    def wait_healthy(self, sandbox: str, comp: CompanionSpec) -> None:
        """Until a required companion passes its health check (or just runs)."""
        h = comp.health
        budget = 30.0 if h is None else h.start_period + h.retries * (h.interval + h.timeout)
        deadline = time.monotonic() + budget + 10.0
        cname = companion_name(sandbox, comp.name)
        while True:
            view = self._view(cname, "companion", comp.name)
            if view.status in ("exited", "dead", "missing"):
                raise DockerError(f"required companion {comp.name!r} exited (code "
                                  f"{view.exit_code}) before it was ready{_tail(view)}",
                                  "COMPANION_FAILED")
            if view.status == "running" and (h is None or view.health == "healthy"):
                return
            if view.health == "unhealthy":
                raise DockerError(f"required companion {comp.name!r} is unhealthy"
                                  f"{_tail(view)}", "COMPANION_UNHEALTHY")
            if time.monotonic() > deadline:
                raise DockerError(f"required companion {comp.name!r} was not healthy within "
                                  f"{budget + 10:g}s{_tail(view)}", "COMPANION_UNHEALTHY")
            time.sleep(0.1)

    def start(self, sandbox: str, spec: SandboxSpec, on_event: Any = None) -> None:
        """Start a stopped sandbox's containers again."""
        import docker

        if (spec.network or "private") == "private":
            self.block_host(sandbox)
        for comp in spec.companions:
            self._start_companion(sandbox, comp, on_event)
        try:
            self.client().containers.get(primary_name(sandbox)).start()
        except docker.errors.NotFound:
            raise DockerError("the primary container is gone; delete the sandbox and "
                              "create it again", "CONTAINER_MISSING") from None
        except docker.errors.APIError as e:
            raise DockerError(f"starting the primary container failed: {short(e)}") from e

    def stop(self, sandbox: str) -> None:
        import docker

        for ctr in self._containers(sandbox, order=("primary", "companion")):
            try:
                ctr.stop(timeout=STOP_TIMEOUT)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                raise DockerError(f"stopping {ctr.name} failed: {short(e)}") from e

    def remove(self, sandbox: str) -> list[str]:
        """Remove every container and network labelled with ``sandbox``. Returns names."""
        import docker

        c = self.client()
        removed: list[str] = []
        for ctr in self._containers(sandbox, order=("primary", "companion")):
            try:
                ctr.remove(force=True)
                removed.append(str(ctr.name))
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                raise DockerError(f"removing {ctr.name} failed: {short(e)}") from e
        for net in c.networks.list(filters={"label": [f"{LABEL_SANDBOX}={sandbox}",
                                                      f"{LABEL_HOME}={self.key}"]}):
            try:
                net.remove()
                removed.append(str(net.name))
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                raise DockerError(f"removing network {net.name} failed: {short(e)}") from e
        self.unblock_host(sandbox)
        return removed

    # ------------------------------------------------------------------ host blocking
    def kill_exec(self, sandbox: str, exec_id: str) -> None:
        """SIGKILL every process of exec ``exec_id`` in the sandbox's primary (those whose
        environment holds its ``TETHER_EXEC_ID``), if the primary runs."""
        import docker

        try:
            ctr = self.client().containers.get(primary_name(sandbox))
        except docker.errors.NotFound:
            return
        if ctr.status == "running":
            ctr.exec_run([*signal_command(exec_id), "9"])

    def block_host(self, sandbox: str) -> None:
        """Drop what the sandbox's bridge sends to the host itself (idempotent). A
        remote engine's bridge is not here: nothing to do (docs/STATE.md Known limits)."""
        if not self.local:
            return
        rule = ["INPUT", "-i", bridge_name(sandbox), "-j", "DROP"]
        if _iptables("-C", *rule) == 0:
            return
        if _iptables("-I", *rule) != 0:
            raise DockerError("cannot keep the sandbox off the host: `iptables -I INPUT` "
                              "failed (the daemon needs root, or use network: host to "
                              "opt out)", "HOST_BLOCK_FAILED")

    def unblock_host(self, sandbox: str) -> None:
        if not self.local:
            return
        rule = ["INPUT", "-i", bridge_name(sandbox), "-j", "DROP"]
        while _iptables("-C", *rule) == 0:
            if _iptables("-D", *rule) != 0:
                return

    # ------------------------------------------------------------------ inspection
    def _containers(self, sandbox: str, order: tuple[str, ...] = ()) -> list[Container]:
        found = self.client().containers.list(all=True, filters={
            "label": [f"{LABEL_SANDBOX}={sandbox}", f"{LABEL_HOME}={self.key}"]})
        rank = {role: i for i, role in enumerate(order)}
        return sorted(found, key=lambda x: rank.get(x.labels.get(LABEL_ROLE, ""), 99))

    def _view(self, cname: str, role: str, companion: str | None) -> ContainerView:
        import docker

        try:
            attrs = self.client().api.inspect_container(cname)
        except docker.errors.NotFound:
            return ContainerView(cname, role, companion, "missing")
        return _view_of(attrs, role, companion)

    def views(self, sandbox: str, spec: SandboxSpec) -> list[ContainerView]:
        """The primary then each companion, ``missing`` where docker has none."""
        out = [self._view(primary_name(sandbox), "primary", None)]
        for comp in spec.companions:
            out.append(self._view(companion_name(sandbox, comp.name), "companion", comp.name))
        return out

    def labelled(self) -> dict[str, list[str]]:
        """Every sandbox id this home has containers or networks for, with their names."""
        c = self.client()
        flt: dict[str, str | list[str] | bool] = {"label": [f"{LABEL_HOME}={self.key}"]}
        out: dict[str, list[str]] = {}
        for ctr in c.containers.list(all=True, filters=flt):
            out.setdefault(ctr.labels.get(LABEL_SANDBOX, "?"), []).append(str(ctr.name))
        for net in c.networks.list(filters=flt):
            labels = net.attrs.get("Labels") or {}
            out.setdefault(labels.get(LABEL_SANDBOX, "?"), []).append(str(net.name))
        return out

    def events(self) -> Any:
        """A blocking stream of this home's container events; ``.close()`` ends it."""
        return self.client().events(decode=True, filters={
            "type": ["container"], "label": [f"{LABEL_HOME}={self.key}"]})


def _restart_policy(restart: str) -> dict[str, Any]:
    # unless-stopped: what tether stops stays stopped, even across a dockerd restart.
    return {"restart_policy": {"Name": "unless-stopped"}} if restart == "always" else {}


def _view_of(attrs: dict[str, Any], role: str, companion: str | None) -> ContainerView:
    state = attrs.get("State") or {}
    health = state.get("Health") or None
    log = (health or {}).get("Log") or []
    return ContainerView(
        name=str(attrs.get("Name", "")).lstrip("/"), role=role, companion=companion,
        status=str(state.get("Status", "unknown")), exit_code=state.get("ExitCode"),
        oom=bool(state.get("OOMKilled")),
        health=health.get("Status") if health else None,
        error=(log[-1].get("Output") or "").strip()[-300:] if log else
        (state.get("Error") or None))


def _tail(view: ContainerView) -> str:
    return f" (last check: {view.error})" if view.error else ""


def _iptables(*args: str) -> int:
    exe = shutil.which("iptables") or "/usr/sbin/iptables"
    try:
        return subprocess.run([exe, "-w", "5", *args], capture_output=True,
                              timeout=15).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 127


