"""The ``docker`` runtime: a sandbox is a few containers on a private network.

* ``tether-net-{id}``: a bridge network, ``internal`` (no route out) unless the
  spec says ``network: host``. Its bridge is named ``tth{id}`` so that one
  iptables rule (``INPUT -i tth{id} -j DROP``) also keeps the sandbox off the
  host's own addresses, which an internal network still reaches through its
  gateway address.
* ``tether-companion-{id}-{name}``: each companion, reachable by ``name``.
* ``tether-primary-{id}``: where execs run; a shell under docker's init keeps it up.

Everything carries labels (``tether.sandbox``, ``tether.home``, ``tether.role``),
so a daemon finds all it made even when its store lost track, and never touches
what another tether home made on the same engine.

Execs do not go through the SDK: the monitor runs ``docker exec`` (argv from
:func:`exec_argv`), so output goes straight to the log files and the exec
survives a daemon SIGKILL like any other. Killing a ``docker exec`` client does
not kill what it started, so :func:`signal_argv` is how the monitor delivers a
signal inside the container: to every process carrying the exec's
``TETHER_EXEC_ID``, which its descendants inherit.

Every method blocks; the daemon calls them from threads.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.hostio.copy import CopyError, check_write
from tether.model.records import CompanionSpec, SandboxSpec

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

LABEL_SANDBOX = "tether.sandbox"
LABEL_HOME = "tether.home"
LABEL_ROLE = "tether.role"  # primary | companion | network
LABEL_COMPANION = "tether.companion"
LABEL_NAME = "tether.name"  # the sandbox's name, for people reading `docker ps`

#: The primary's command: a shell that ends at once on SIGTERM. It needs /bin/sh,
#: which the in-container signal helper needs too.
KEEPALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done"]

#: Delivers signal $2 to every process whose environment holds TETHER_EXEC_ID=$1.
_SIGNAL_SCRIPT = ('for d in /proc/[0-9]*; do case "$(tr "\\0" "\\n" < "$d/environ" '
                  '2>/dev/null)" in *"TETHER_EXEC_ID=$1"*) kill -"$2" "${d#/proc/}" '
                  '2>/dev/null;; esac; done; exit 0')

#: Host-specific variables that `tether run` forwards from the shell but that mean
#: nothing (or harm) inside a container; the image's own values stay.
HOST_ONLY_ENV = frozenset({"PATH", "HOME", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", "USER",
                           "LOGNAME", "SHELL", "MAIL", "TMPDIR", "TERM", "LINES", "COLUMNS"})

UNTYPABLE_DETACH_KEYS = "ctrl-],ctrl-^,ctrl-_,ctrl-],ctrl-^,ctrl-_,ctrl-],ctrl-^"
STOP_TIMEOUT = 5  # seconds docker waits after SIGTERM before SIGKILL on stop


class DockerError(Exception):
    """A docker operation failed; ``str()`` says what and what to do."""

    def __init__(self, message: str, code: str = "DOCKER_FAILED") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Probe:
    available: bool
    version: str | None
    reason: str  # why not, or "ok"


@dataclass(frozen=True)
class ContainerView:
    """What docker says about one of a sandbox's containers (category B)."""

    name: str
    role: str  # primary | companion
    companion: str | None
    status: str  # created | running | exited | paused | restarting | dead | missing
    exit_code: int | None = None
    oom: bool = False
    health: str | None = None  # starting | healthy | unhealthy (with a health check)
    error: str | None = None


def home_key(home: str) -> str:
    """The id of a tether home, put on everything it creates: random and kept in the
    home (``docker.key``), so two homes at the same path on different machines that
    share one engine never take each other's containers for leftovers. A missing or
    unreadable key is (re)made durably; the first writer wins a race."""
    path = os.path.join(home, "docker.key")
    for _ in range(3):
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                key = f.read().strip()
            if len(key) == 16 and all(c in "0123456789abcdef" for c in key):
                return key
            # Corrupt (e.g. empty after a power cut): a new one. What the old key
            # labelled is no longer this home's; say so.
            logging.getLogger("tether.docker").warning(
                "%s was corrupt; making a new key (containers labelled with the old one "
                "are no longer recognised: remove them with docker rm)", path)
            os.unlink(path)
        except FileNotFoundError:
            pass
        key = secrets.token_hex(8)
        tmp = f"{path}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (key + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
            dfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return key
        except FileExistsError:
            continue  # another writer won: read its key
        finally:
            os.unlink(tmp)
    raise DockerError(f"cannot settle {path}; remove it and retry", "DOCKER_FAILED")


def primary_name(sandbox: str) -> str:
    return f"tether-primary-{sandbox}"


def companion_name(sandbox: str, name: str) -> str:
    return f"tether-companion-{sandbox}-{name}"


def network_name(sandbox: str) -> str:
    return f"tether-net-{sandbox}"


def bridge_name(sandbox: str) -> str:
    return f"tth{sandbox[:12]}"  # interface names are at most 15 bytes


def docker_binary() -> str | None:
    return os.environ.get("TETHER_DOCKER") or shutil.which("docker")


def workspace_target(spec: SandboxSpec) -> str | None:
    if spec.workspace is None:
        return None
    return spec.workspace_target or spec.workspace


def inside_cwd(spec: SandboxSpec, host_cwd: str | None) -> str | None:
    """Where an exec starts inside: the host cwd's place in the workspace when it
    lies there, else the workspace itself (else the image's working directory)."""
    target = workspace_target(spec)
    if target is None or spec.workspace is None:
        return None
    if host_cwd is not None:
        cwd = os.path.realpath(host_cwd)
        root = spec.workspace.rstrip("/")
        if cwd == root or cwd.startswith(root + "/"):
            return os.path.normpath(os.path.join(target, os.path.relpath(cwd, root)))
    return target


def exec_argv(docker_bin: str, sandbox: str, argv: list[str], env_names: list[str], *,
              cwd: str | None, tty: bool, stdin: bool) -> list[str]:
    """The ``docker exec`` the monitor runs. Values of ``env_names`` come from the
    monitor's environment (``-e NAME``), so they never show in a process listing."""
    # The client's own detach keys (ctrl-p ctrl-q) would eat typed input and end the
    # exec's client while the command runs on: make them a sequence nobody types.
    args = [docker_bin, "exec", "--detach-keys", UNTYPABLE_DETACH_KEYS]
    if stdin or tty:
        args.append("-i")
    if tty:
        args.append("-t")
    if cwd:
        args += ["-w", cwd]
    for name in env_names:
        args += ["-e", name]
    return [*args, primary_name(sandbox), *argv]


def signal_argv(docker_bin: str, sandbox: str, exec_id: str) -> list[str]:
    """The monitor appends a signal number and runs this to signal the exec's tree."""
    return [docker_bin, "exec", primary_name(sandbox), "/bin/sh", "-c", _SIGNAL_SCRIPT,
            "tether-signal", exec_id]


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class DockerEngine:
    """dockerd through its SDK, for one tether home."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._key: str | None = None
        self._client: docker.DockerClient | None = None

    @property
    def key(self) -> str:
        """Made on first use: a home that never uses docker never writes one."""
        if self._key is None:
            self._key = home_key(self.home)
        return self._key

    # ------------------------------------------------------------------ connection
    def client(self) -> docker.DockerClient:
        if self._client is None:
            import docker

            try:
                self._client = docker.from_env(timeout=120)
            except docker.errors.DockerException as e:
                raise DockerError(f"cannot reach dockerd: {e}", "DOCKER_UNAVAILABLE") from None
        return self._client

    def reset(self) -> None:
        """Drop the connection (after dockerd went away) so the next call reconnects."""
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a dead connection
                self._client.close()
        self._client = None

    def probe(self) -> Probe:
        if docker_binary() is None:
            return Probe(False, None, "the docker CLI is not installed (apt-get install "
                         "docker.io)")
        try:
            c = self.client()
            c.ping()
            version = str(c.version().get("Version"))
        except Exception as e:
            self.reset()
            return Probe(False, None, f"dockerd is not reachable: {short(e)} (start it, "
                         "or set DOCKER_HOST)")
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
    def block_host(self, sandbox: str) -> None:
        """Drop what the sandbox's bridge sends to the host itself (idempotent)."""
        rule = ["INPUT", "-i", bridge_name(sandbox), "-j", "DROP"]
        if _iptables("-C", *rule) == 0:
            return
        if _iptables("-I", *rule) != 0:
            raise DockerError("cannot keep the sandbox off the host: `iptables -I INPUT` "
                              "failed (the daemon needs root, or use network: host to "
                              "opt out)", "HOST_BLOCK_FAILED")

    def unblock_host(self, sandbox: str) -> None:
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

    # ------------------------------------------------------------------ copying
    def path_stat(self, sandbox: str, path: str) -> dict[str, Any] | None:
        """docker's stat of a path in the primary (None when it does not exist)."""
        api = self.client().api
        url = api._url("/containers/{0}/archive", primary_name(sandbox))  # type: ignore[attr-defined]
        res = api.head(url, params={"path": path})
        if res.status_code == 404:
            return None
        if res.status_code >= 400:
            raise DockerError(f"cannot stat {path} in the sandbox: HTTP {res.status_code}")
        header = res.headers.get("X-Docker-Container-Path-Stat", "")
        stat: dict[str, Any] = json.loads(base64.b64decode(header)) if header else {}
        return stat

    def copy_in(self, sandbox: str, src: str, dst: str) -> int:
        """``docker cp`` semantics: into ``dst`` if it is a directory, else as ``dst``."""
        import docker

        stat = self.path_stat(sandbox, dst)
        is_dir = stat is not None and bool(int(stat.get("mode", 0)) & (1 << 31))
        parent, arcname = (dst, os.path.basename(src.rstrip("/"))) if is_dir else \
            (os.path.dirname(dst.rstrip("/")) or "/", os.path.basename(dst.rstrip("/")))
        with tempfile.TemporaryFile() as buf:
            try:
                with tarfile.open(fileobj=buf, mode="w") as tar:
                    tar.add(src, arcname=arcname)
            except (OSError, tarfile.TarError) as e:
                raise DockerError(f"cannot read {src}: {e}", "COPY_FAILED") from None
            size = buf.tell()
            buf.seek(0)
            try:
                ok = self.client().api.put_archive(primary_name(sandbox), parent, buf)
            except docker.errors.NotFound:
                raise DockerError(f"{parent} does not exist in the sandbox",
                                  "PATH_NOT_FOUND") from None
            except docker.errors.APIError as e:
                raise DockerError(f"copying into the sandbox failed: {short(e)}") from e
        if not ok:
            raise DockerError("docker refused the copy")
        return size

    def copy_out(self, sandbox: str, src: str, dst: str, forbidden: str) -> int:
        """Into ``dst`` if it is an existing directory, else as ``dst``; never into
        ``forbidden`` (tether's home)."""
        import docker

        try:
            stream, _stat = self.client().api.get_archive(primary_name(sandbox), src)
        except docker.errors.NotFound:
            raise DockerError(f"{src} does not exist in the sandbox", "PATH_NOT_FOUND") from None
        except docker.errors.APIError as e:
            raise DockerError(f"copying out of the sandbox failed: {short(e)}") from e
        into_dir = os.path.isdir(dst)
        parent = dst if into_dir else (os.path.dirname(os.path.abspath(dst)) or "/")
        try:
            check_write(os.path.join(parent, "x") if into_dir else dst, None, forbidden)
            return self._extract(stream, dst, parent, into_dir, forbidden)
        except CopyError as e:
            raise DockerError(str(e), e.code) from None
        except (OSError, tarfile.TarError) as e:
            raise DockerError(f"copying to {dst} failed: {e}", "COPY_FAILED") from None

    @staticmethod
    def _extract(stream: Any, dst: str, parent: str, into_dir: bool, forbidden: str) -> int:
        with tempfile.TemporaryFile() as buf:
            for chunk in stream:
                buf.write(chunk)
            size = buf.tell()
            buf.seek(0)
            with tempfile.TemporaryDirectory(dir=parent, prefix=".tether-cp-") as tmp, \
                    tarfile.open(fileobj=buf, mode="r") as tar:
                tar.extractall(tmp, filter=_copy_filter)
                entries = os.listdir(tmp)
                if len(entries) != 1:
                    raise DockerError("docker returned an unexpected archive", "COPY_FAILED")
                final = os.path.join(dst, entries[0]) if into_dir else dst
                check_write(final, None, forbidden)
                os.replace(os.path.join(tmp, entries[0]), final)
        return size


def _copy_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter (no devices or FIFOs, no owners, no setuid, nothing
    outside ``path``), except that symlinks are kept as they are, absolute ones too:
    the archive comes from a sandbox, and a link is only a name until followed."""
    if member.issym():
        where = os.path.realpath(os.path.join(path, os.path.dirname(member.name)))
        if not (where + "/").startswith(os.path.realpath(path).rstrip("/") + "/"):
            raise tarfile.OutsideDestinationError(member, where)
        # None: not chowned on extraction (what tarfile.data_filter does; typeshed says int)
        return member.replace(uid=None, gid=None, uname=None, gname=None,  # type: ignore[arg-type]
                              deep=False)
    return tarfile.data_filter(member, path)


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


def short(e: BaseException) -> str:
    text = str(getattr(e, "explanation", None) or e)
    return text if len(text) < 400 else text[:400] + "…"


def _iptables(*args: str) -> int:
    exe = shutil.which("iptables") or "/usr/sbin/iptables"
    try:
        return subprocess.run([exe, "-w", "5", *args], capture_output=True,
                              timeout=15).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 127


def parse_event(ev: dict[str, Any]) -> tuple[str, str, str | None, str, dict[str, str]] | None:
    """``(sandbox, role, companion, action, attributes)`` of a docker event, or None."""
    actor = ev.get("Actor") or {}
    attrs = {str(k): str(v) for k, v in (actor.get("Attributes") or {}).items()}
    sandbox = attrs.get(LABEL_SANDBOX)
    if not sandbox:
        return None
    action = str(ev.get("Action") or ev.get("status") or "")
    return sandbox, attrs.get(LABEL_ROLE, ""), attrs.get(LABEL_COMPANION), action, attrs
