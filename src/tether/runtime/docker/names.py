"""What tether calls things in docker, and the commands the monitor runs there.

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

Execs do not go through the SDK: the exec's monitor creates it through the Engine API
(:func:`exec_config` is the request) and its child, a fork of the monitor, starts it
and writes its streams to the log files (:mod:`tether.monitor.dockerexec`), so the exec
survives a daemon SIGKILL like any other. An engine the monitor cannot reach on a plain
socket (TLS, ssh: :func:`engine_address` is None) runs ``docker exec`` instead (argv
from :func:`exec_argv`). Ending a ``docker exec`` (the client, or the monitor's) does
not end what it started, so :func:`signal_command` is how the monitor delivers a signal
inside the container: to every process carrying the exec's ``TETHER_EXEC_ID``, which
its descendants inherit.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Mapping
from typing import Any

from tether.hostio.trust import open_private
from tether.model.records import SandboxSpec
from tether.runtime.docker.views import DockerError

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
#: Where the SDK (``docker.from_env``) finds the daemon's own engine without DOCKER_HOST.
DEFAULT_ENGINE = "unix:///var/run/docker.sock"
#: How a docker exec runs: ``api`` (the monitor speaks the Engine API) or ``cli``
#: (``docker exec``): TETHER_DOCKER_EXEC. ``api`` falls back to the CLI for engines
#: behind TLS or ssh.
EXEC_VIA = ("api", "cli")
STOP_TIMEOUT = 5  # seconds docker waits after SIGTERM before SIGKILL on stop


def home_key(home: str) -> str:
    """The id of a tether home, put on everything it creates: random and kept in the
    home (``docker.key``), so two homes at the same path on different machines that
    share one engine never take each other's containers for leftovers. A missing or
    unreadable key is (re)made durably; the first writer wins a race."""
    path = os.path.join(home, "docker.key")
    for _ in range(3):
        try:
            # Never through a symlink planted while the home was open to others.
            with os.fdopen(open_private(path, os.O_RDONLY), encoding="ascii",
                           errors="replace") as f:
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
        except OSError as e:  # a symlink, or not ours
            raise DockerError(str(e), "DOCKER_FAILED") from None
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


def client_env(spec: SandboxSpec) -> dict[str, str]:
    """The ``docker`` CLI's environment for a sandbox's execs and signals: the daemon's
    DOCKER_* for its own engine, else the sandbox's ``docker_host`` (and TLS files)
    alone, so no context or certificate of the daemon's engine leaks into it."""
    if spec.docker_host is None:
        return {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
    env = {"DOCKER_HOST": spec.docker_host}
    if spec.docker_cert_path is not None:
        env.update(DOCKER_TLS_VERIFY="1", DOCKER_CERT_PATH=spec.docker_cert_path)
    if "DOCKER_CONFIG" in os.environ:  # the client's own settings (ssh, auth), not an engine's
        env["DOCKER_CONFIG"] = os.environ["DOCKER_CONFIG"]
    return env


def engine_address(spec: SandboxSpec, env: Mapping[str, str] = os.environ) -> str | None:
    """The address at which a monitor reaches the sandbox's engine itself: the one the
    SDK created its containers on (the sandbox's ``docker_host``, else DOCKER_HOST, else
    the local socket). None for an engine behind TLS or ssh (or of an unknown kind):
    the ``docker`` CLI, which holds their certificates, config and transport, runs
    those execs."""
    if spec.docker_host is not None:
        host, tls = spec.docker_host, spec.docker_cert_path is not None
    else:
        host = env.get("DOCKER_HOST") or DEFAULT_ENGINE
        tls = bool(env.get("DOCKER_TLS_VERIFY") or env.get("DOCKER_CERT_PATH"))
    if tls or not host.startswith(("unix://", "tcp://")):
        return None
    return host


def exec_config(argv: list[str], env: dict[str, str], *, cwd: str | None, tty: bool,
                stdin: bool) -> dict[str, Any]:
    """The body of the exec's ``POST /containers/{primary}/exec``: what
    :func:`exec_argv`'s flags ask of dockerd (the values of ``env`` go to dockerd over
    its socket, never on a command line)."""
    config: dict[str, Any] = {
        "AttachStdin": stdin or tty, "AttachStdout": True, "AttachStderr": True,
        "Tty": tty, "Env": [f"{k}={v}" for k, v in sorted(env.items())], "Cmd": list(argv),
        "DetachKeys": UNTYPABLE_DETACH_KEYS}
    if cwd:
        config["WorkingDir"] = cwd
    return config


def signal_command(exec_id: str) -> list[str]:
    """Run in the primary with a signal number appended: signals the exec's tree."""
    return ["/bin/sh", "-c", _SIGNAL_SCRIPT, "tether-signal", exec_id]


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
    return [docker_bin, "exec", primary_name(sandbox), *signal_command(exec_id)]


def parse_event(ev: dict[str, Any]) -> tuple[str, str, str | None, str, dict[str, str]] | None:
    """``(sandbox, role, companion, action, attributes)`` of a docker event, or None."""
    actor = ev.get("Actor") or {}
    attrs = {str(k): str(v) for k, v in (actor.get("Attributes") or {}).items()}
    sandbox = attrs.get(LABEL_SANDBOX)
    if not sandbox:
        return None
    action = str(ev.get("Action") or ev.get("status") or "")
    return sandbox, attrs.get(LABEL_ROLE, ""), attrs.get(LABEL_COMPANION), action, attrs
