"""The ``bwrap`` runtime: the process runtime with the command wrapped in bubblewrap.

The monitor runs ``bwrap … -- CMD`` as its child, so a bwrap exec is supervised,
logged and re-adopted exactly like a plain one. What the sandbox sees:

* the system directories (``/usr``, ``/etc``, ``/bin``, ``/lib*``, ``/sbin``,
  ``/opt``), read-only — not the rest of the host, so ``~/.ssh`` and other
  users' files stay out of reach;
* the command's toolchain where the rest is hidden (a virtualenv, pyenv, nvm,
  ``~/.local/bin``: :func:`toolchain`), read-only;
* the workspace (the sandbox's, else the exec's working directory), read-write,
  at the same path or at ``workspace_target``; plus the spec's mounts;
* a private ``/tmp``, a private ``/run`` (host sockets such as Docker's are not
  reachable), its own ``/proc`` and a minimal ``/dev``;
* new pid, ipc and uts namespaces, and a new network namespace (loopback only)
  unless the spec says ``network: host``;
* tether's own home is never visible, even if it lies under a mounted path.

An agent session (:class:`AgentView`) sees more: the host read-only except the
users' home directories (its own tools and interpreter may live anywhere), from
those only its toolchain read-only and its config directories read-write, its
session state, and tether's restricted ``agent.sock``, which serves only the agent's
own session. Its network namespace is its own too, and its way out is tether's egress
proxy (``tether.egress``): the directory of its proxy socket bound at
``/run/tether-egress``, and the bridge started before its command, which serves that
socket as ``127.0.0.1:3128`` inside (``HTTPS_PROXY`` and the like say so), unless the
spec says ``network: host`` (the host's network), ``none`` or ``private`` (none).

The command runs behind :data:`GATE` (``Launch.gated``) so that the monitor can pin it
and record its own exit status and signal its own group (bwrap reports a death by signal N
as exit 128+N). A cancel's SIGKILL kills bwrap; ``--die-with-parent`` then takes the
sandbox's init with it, and the kernel ends every process in its pid namespace.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tether.egress import bridge as egress_bridge
from tether.egress.policy import PROXY_PORT, SANDBOX_DIR, SOCKET_NAME, network_mode, proxy_env
from tether.hostio.copy import copy_into, copy_out_of
from tether.hostio.paths import is_within
from tether.model.errors import RpcCode, TetherError, invalid_params
from tether.model.records import SandboxRecord, SandboxSpec
from tether.monitor.child import resolve_command
from tether.monitor.zygote import ENV as ZYGOTE_ENV
from tether.monitor.zygote import STUB
from tether.runtime.base import (
    CANNOT_CONFINE,
    ExecRequest,
    Launch,
    LaunchPlan,
    Runtime,
    RuntimeStatus,
    SpecProblem,
    Warm,
    host_env,
)
from tether.runtime.base import AgentView as AgentView  # where agents' policy finds it
from tether.runtime.mapping import host_path
from tether.runtime.process import no_container_fields
from tether.runtime.toolchain import ToolchainCache, candidates

log = logging.getLogger("tether.daemon")

SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/srv")
HOME_ROOTS = ("/root", "/home")
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                "/etc/security/opasswd")
SECRET_DIRS = ("/etc/ssl/private",)
#: What an agent (shown the whole host read-only) must not see besides the homes.
HOST_ROOT_SECRET_DIRS = ("/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
                         "/var/lib/kubelet", "/var/lib/lxd", "/var/backups", "/var/mail",
                         "/var/spool", "/var/log", "/srv", "/mnt", "/media")
MAYBE_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: bwrap reports a death by signal N as exit status 128+N: the command waits at this gate
#: until the monitor holds a pidfd to it, which tells the two apart (tether.monitor.pin).
#: Its monitor opens it only once the start is recorded; EOF (the monitor died before
#: that) ends it without running the command, as ``monitor.child.START_GATE`` does.
GATE = ["/bin/sh", "-c", 'read -r _ <&3 || exit 125; exec "$@" 3<&-', "sh"]


@dataclass(frozen=True)
class Probe:
    available: bool
    path: str | None
    version: str | None
    reason: str  # why not, or "ok"


def probe(timeout: float = 10.0) -> Probe:
    """Can bubblewrap create the namespaces we need here? (Run once at daemon start.)"""
    path = shutil.which("bwrap")
    if path is None:
        return Probe(False, None, None, "bubblewrap is not installed (apt-get install "
                     "bubblewrap)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=timeout).stdout.strip() or None
        r = subprocess.run([path, *base_args(network="none"), "--", "true"],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Probe(False, path, None, f"bubblewrap did not run: {e}")
    if r.returncode != 0:
        err = r.stderr.strip() or f"exit {r.returncode}"
        hint = (" (user namespaces are disabled or restricted, e.g. by "
                "kernel.unprivileged_userns_clone=0 or an AppArmor profile)"
                if "namespace" in err or "uid map" in err or "Permission" in err else "")
        return Probe(False, path, version, f"bubblewrap cannot create a sandbox: {err}{hint}")
    return Probe(True, path, version, "ok")


def base_args(*, network: str, host_root: bool = False) -> list[str]:
    """The namespaces and the filesystem skeleton. ``host_root``: ``/`` is already
    bound read-only (agents), so the system directories need no binds of their own."""
    # As root bwrap would keep root's capabilities: enough to remount /etc read-write or
    # unmount the tmpfs that hides tether's home.
    caps = ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
    args = [*caps, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--hostname", "tether-sandbox", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/var/tmp"]
    if network != "host":
        args.append("--unshare-net")
    for d in () if host_root else SYSTEM_DIRS:
        args += ["--ro-bind-try", d, d]
    for d in () if host_root else MAYBE_LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    # Under a root daemon the sandbox is uid 0 without capabilities: it still owns
    # root's files. Hide the secrets among what it is shown.
    for f in _secret_files():
        args += ["--ro-bind", "/dev/null", f]
    for d in SECRET_DIRS + (HOST_ROOT_SECRET_DIRS if host_root else ()):
        if os.path.isdir(d):
            args += ["--tmpfs", d]
    # Keep name resolution working with network: host when resolv.conf points into /run.
    resolv = Path("/etc/resolv.conf")
    if network == "host" and resolv.is_symlink():
        target = resolv.resolve()
        if str(target).startswith("/run/") and target.exists():
            args += ["--ro-bind", str(target), str(target)]
    return args


@functools.lru_cache(maxsize=1)
def _secret_files() -> tuple[str, ...]:
    """Read once per daemon: every bwrap exec start masks them."""
    import glob

    found = [f for f in SECRET_FILES if os.path.isfile(f)]
    return (*found, *sorted(glob.glob("/etc/ssh/ssh_host_*_key")))


def toolchain(argv0: str, *, cwd: str, path_env: str, virtual_env: str | None = None,
              host_root: bool = False, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What the sandbox hides of the command's installation (and of ``extra``), to bind
    read-only. ``host_root``: the sandbox shows the host but the homes and the other
    hidden roots (an agent's view); else only the system directories. Exact
    directories, never a home directory or a hidden root (nor anything containing one)."""
    homes = home_dirs()
    hidden = [h for h in (*HOME_ROOTS, "/tmp", "/var/tmp", "/run", *HOST_ROOT_SECRET_DIRS)
              if os.path.isdir(h)]
    # Without the host root: the system directories are shown already; the kernel's
    # and the host's runtime state never.
    shown = [*SYSTEM_DIRS, *(d for d in MAYBE_LINKS if not os.path.islink(d))]
    never = ["/proc", "/sys", "/dev", "/run", "/var/run", *HOST_ROOT_SECRET_DIRS]
    too_wide = [*hidden, *homes] if host_root else [*PROTECTED, *HOME_ROOTS, "/var", "/mnt",
                                                    "/media", *homes]

    def allowed(p: str) -> bool:
        if any(is_within(w, p) for w in too_wide):
            return False
        return _under(p, hidden) if host_root else not _under(p, [*shown, *never])

    found: list[str] = []
    for p in (*extra, *candidates(argv0, cwd=cwd, path_env=path_env,
                                  virtual_env=virtual_env, homes=homes)):
        # bwrap binds what a symlink names: the real path must pass too (a link to /).
        if p not in found and allowed(p) and allowed(os.path.realpath(p)):
            found.append(p)
    return tuple(found)


def wrap(argv: list[str], spec: SandboxSpec, *, cwd: str, tether_home: str,
         tty: bool, bwrap_path: str = "bwrap", agent: AgentView | None = None,
         tools: tuple[str, ...] = ()) -> list[str]:
    """The argv the monitor runs for ``argv`` inside a sandbox described by ``spec``;
    ``tools``: a plain exec's toolchain (:func:`toolchain`), bound read-only."""
    args, inside_cwd = sandbox_args(spec, cwd=cwd, tether_home=tether_home,
                                    bwrap_path=bwrap_path, agent=agent, tools=tools)
    return [*args, *tail(inside_cwd, tty), *bridge(spec, agent), *argv]


def network_of(spec: SandboxSpec, agent: AgentView | None) -> str:
    """``host``, ``none`` or ``proxy`` (:func:`tether.egress.policy.network_mode`); an
    agent meant for the proxy without a proxy socket gets ``none``: no way out."""
    mode = network_mode(spec.network, agent=agent is not None)
    if mode == "proxy" and (agent is None or agent.egress is None):
        return "none"
    return mode


def bridge(spec: SandboxSpec, agent: AgentView | None) -> list[str]:
    """What runs the command behind the egress bridge (``tether.egress.bridge``), on
    tether's own interpreter (an agent sees it); nothing when it has no proxy."""
    if network_of(spec, agent) != "proxy":
        return []
    return [sys.executable, "-I", "-S", os.path.abspath(egress_bridge.__file__),
            str(PROXY_PORT), f"{SANDBOX_DIR}/{SOCKET_NAME}"]


def tail(inside_cwd: str, tty: bool) -> list[str]:
    """What follows the sandbox's arguments: its working directory, then the command."""
    # Without a terminal: no TIOCSTI into a terminal we do not own.
    return ["--chdir", inside_cwd, *([] if tty else ["--new-session"]), "--"]


def sandbox_args(spec: SandboxSpec, *, cwd: str, tether_home: str,
                 bwrap_path: str = "bwrap", agent: AgentView | None = None,
                 tools: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """bwrap and the sandbox's arguments (all but the working directory and the command:
    what a zygote sets up ahead), and the working directory inside."""
    network = network_of(spec, agent)
    args = [bwrap_path]
    if agent is not None:
        args += ["--ro-bind", "/", "/"]  # later mounts (/proc, /tmp, binds) cover it
    args += base_args(network=network, host_root=agent is not None)
    if agent is not None:
        # Not the users' home directories (keys, other tools' sockets, other tether
        # homes): only the agent's toolchain from them, then its config (below).
        args += [x for h in HOME_ROOTS if os.path.isdir(h) for x in ("--tmpfs", h)]
    home = os.path.realpath(tether_home)
    # Nothing inside tether's home, named or through a link (a PATH entry of its logs/).
    tools = tuple(p for p in tools if not _under(os.path.realpath(p), [home]))
    for p in agent.tools if agent is not None else tools:
        args += ["--ro-bind-try", p, p]
    workspace = os.path.realpath(spec.workspace or cwd)
    target = spec.workspace_target or workspace
    args += ["--bind", workspace, target]
    for m in spec.mounts:
        args += ["--bind" if m.mode == "rw" else "--ro-bind", m.source, m.target]
    if agent is not None:
        for p in agent.rw:
            if not _under(p, [tether_home]):
                args += ["--bind-try", p, p]
    sources = [os.path.realpath(m.source) for m in spec.mounts]
    if agent is not None or _under(home, [workspace, *sources, *SYSTEM_DIRS, *tools]):
        args += ["--tmpfs", home]  # never expose tether's own state
    if agent is not None:  # then only this session's own files in it
        for p in agent.rw:
            if _under(p, [tether_home]):
                args += ["--bind-try", p, p]
        for p in agent.ro:
            args += ["--ro-bind-try", p, p]
        if agent.socket_dir is not None:  # read-only: connecting works; replacing does not
            args += ["--ro-bind", agent.socket_dir, agent.socket_dir]
        if network == "proxy" and agent.egress is not None:  # likewise its proxy socket's
            args += ["--ro-bind", agent.egress, SANDBOX_DIR]
        for dest, src in agent.views:
            args += ["--ro-bind", src, dest]
    inside_cwd = cwd
    if spec.workspace is not None and not _under(cwd, [workspace]):
        inside_cwd = target  # the host cwd does not exist inside: start in the workspace
    elif spec.workspace_target and _under(cwd, [workspace]):
        inside_cwd = os.path.normpath(os.path.join(target, os.path.relpath(cwd, workspace)))
    if agent is None:
        # Directories bwrap made to hold the binds (/root for a toolchain under it, /home/u
        # for a workspace there) live on the sandbox's own root: writable, though nothing
        # written there reaches the host. Read-only, so a write outside the workspace
        # fails as the user expects instead of vanishing.
        args += ["--remount-ro", "/"]
    return args, inside_cwd


#: A workspace may not be, or contain, one of these: bound read-write over the
#: sandbox's own /proc, /dev, /run or /tmp it would undo the isolation.
PROTECTED = ("/proc", "/sys", "/dev", "/run", "/var/run", "/tmp", "/var/tmp", "/etc", "/usr",
             "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/opt", "/srv")
#: ... nor lie inside one of these (writable system state: /etc/cron.d, /var/lib/docker).
SYSTEM_INSIDE = ("/proc", "/sys", "/dev", "/run", "/etc", "/usr", "/bin", "/sbin", "/lib",
                 "/lib32", "/lib64", "/libx32", "/boot", "/var")


@functools.lru_cache(maxsize=1)
def home_dirs() -> tuple[str, ...]:
    """Every user's home directory (and the daemon's own), read once and compared as
    strings: no stat of each home (an automounted NFS home could hang the daemon)."""
    import pwd

    homes = {os.path.normpath(os.path.expanduser("~"))}
    try:
        entries = pwd.getpwall()
    except OSError:
        entries = []
    for entry in entries:
        d = os.path.normpath(entry.pw_dir or "/")
        if os.path.isabs(d) and d not in ("/", "/nonexistent", "/dev/null"):
            homes.add(d)
    return tuple(sorted(homes))


def workspace_problem(path: str) -> str | None:
    """Why ``path`` (a real path) cannot be a sandbox's writable workspace, or None."""
    for p in PROTECTED:
        if _under(p, [path]):
            return (f"{path} is or contains {p}; a sandbox's workspace must be a project "
                    "directory, not a system one")
    for p in SYSTEM_INSIDE:
        if _under(path, [p]) and not _under(path, ["/var/tmp"]):
            return (f"{path} is inside {p}; a sandbox's workspace must be a project "
                    "directory, not a system one")
    for h in [*HOME_ROOTS, *home_dirs()]:
        if _under(h, [path]):
            return (f"{path} is or contains the home directory {h} (dotfiles, keys); run "
                    "from a project directory inside it instead")
    return None


def mount_problem(source: str, mode: str, tether_home: str) -> str | None:
    """Why a host path cannot be mounted into a sandbox, or None: a mount is another
    way in, so what is hidden at its own path (tether's home, the masked secrets)
    must not be reachable under the mount's target either."""
    if _under(tether_home, [source]) or _under(source, [tether_home]):
        return f"{source} would expose tether's own state ({tether_home})"
    for secret in (*_secret_files(), *SECRET_DIRS):
        if _under(secret, [source]):
            return f"{source} contains {secret}; mount a directory that does not"
    if mode == "rw":
        problem = workspace_problem(source)
        if problem is not None:
            return problem.replace("workspace", "read-write mount")
    return None


def cannot_sandbox(problem: str) -> TetherError:
    return TetherError(RpcCode.INVALID_PARAMS, CANNOT_CONFINE,
                       f"cannot run in a bwrap sandbox from here: {problem}; cd into a "
                       "project directory, or use --sandbox with a workspace",
                       {"problem": problem})


def _under(path: str, roots: list[str] | tuple[str, ...]) -> bool:
    return any(is_within(path, r) for r in roots)


BIND_FLAGS = frozenset({"--bind", "--ro-bind", "--bind-try", "--ro-bind-try"})


def bind_identity(args: list[str]) -> tuple[tuple[int, int], ...]:
    """The (device, inode) of every bind source in ``args`` ((0, 0) when missing): a
    zygote's binds are as of its start, so a workspace or toolchain replaced since (the
    same path, a new directory) must not reuse it. The zygote's mount holds the old inode,
    so its number cannot go to the new one."""
    ident = []
    for flag, src in itertools.pairwise(args):
        if flag in BIND_FLAGS:
            try:
                st = os.stat(src)
                ident.append((st.st_dev, st.st_ino))
            except OSError:
                ident.append((0, 0))
    return tuple(ident)


def agent_command(name: str, *, cwd: str, path_env: str) -> None:
    """Refuse an agent whose program cannot be started, as the monitor refuses a plain
    command (START_FAILED, exit 127/126) rather than let the gate's shell exit 127 later:
    that would read as a crash and be revived. An agent sees the host's paths read-only
    (its toolchain is what this lookup finds), so the host's answer is the sandbox's."""
    where = name if "/" not in name else os.path.join(cwd, name)
    try:
        resolve_command(where, {"PATH": path_env})
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        raise TetherError(RpcCode.START_FAILED, "START_FAILED", f"{e.strerror}: {name}",
                          {"exit_code": code}) from None


def _warm_fits(tty: bool, stdin: bool) -> bool:
    """Whether a zygote can run this exec: no terminal and no stdin (a zygote's stdio is
    its logs and /dev/null)."""
    return not tty and not stdin


class BwrapRuntime(Runtime):
    """bubblewrap namespaces around the command; the default sandbox where it works."""

    name = "bwrap"
    confines_agents = True

    def __init__(self, probed: Probe) -> None:
        """``probed``: :func:`probe`'s answer, asked once per daemon (it runs bwrap)."""
        self.probed = probed
        self._toolchains = ToolchainCache()
        #: Whether execs may start in pre-started sandboxes (zygotes, started by the
        #: monitor pool): the stub runs the command through env(1).
        self.zygotes = probed.available and os.access(ZYGOTE_ENV, os.X_OK)
        if not probed.available:
            log.warning("sandboxes fall back to the process runtime: %s", probed.reason)

    def available(self) -> tuple[bool, str]:
        return self.probed.available, self.probed.reason

    async def status(self) -> RuntimeStatus:
        return RuntimeStatus(self.probed.available, {"version": self.probed.version,
                                                     "reason": self.probed.reason})

    @classmethod
    def spec_problems(cls, spec: SandboxSpec) -> list[SpecProblem]:
        return no_container_fields(spec)

    def workspace_problem(self, path: str) -> str | None:
        return workspace_problem(path)

    def mount_problem(self, source: str, mode: str, tether_home: str) -> str | None:
        return mount_problem(source, mode, tether_home)

    def prepare_exec(self, req: ExecRequest) -> LaunchPlan:
        if not req.cwd:  # the default sandbox then runs it unsandboxed, as from /
            raise cannot_sandbox("no working directory (cwd) was given, and a bwrap exec "
                                 "needs one (or a sandbox workspace) as its writable place")
        cwd = os.path.realpath(req.cwd)  # symlinks and .. must not widen what is mounted
        home = req.tether_home
        if is_within(cwd, home):  # a parent is fine: the home is hidden under it
            # Refused even for the default sandbox: no ordinary command runs from there.
            raise invalid_params(f"cwd {cwd!r} is inside tether's home {home}: a sandbox "
                                 "must not see tether's own state")
        problem = workspace_problem(cwd) if req.sandbox.spec.workspace is None else None
        if problem is not None:
            raise cannot_sandbox(problem)
        env = host_env(req.spec, req.sandbox, "")
        argv0, path_env, venv = req.spec.argv[0], env.get("PATH", ""), env.get("VIRTUAL_ENV")
        if req.agent is not None:
            agent_command(argv0, cwd=cwd, path_env=env.get("PATH", os.defpath))
        tools = () if req.agent is not None else self._toolchains.get(
            (argv0, cwd if "/" in argv0 else "", path_env, venv), path_env, venv,
            lambda: toolchain(argv0, cwd=cwd, path_env=path_env, virtual_env=venv))
        args, inside_cwd = sandbox_args(req.sandbox.spec, cwd=cwd, tether_home=home,
                                        bwrap_path=self.probed.path or "bwrap",
                                        agent=req.agent, tools=tools)
        via = bridge(req.sandbox.spec, req.agent)
        argv = [*args, *tail(inside_cwd, req.spec.tty), *via, *GATE, *req.spec.argv]
        warm = None
        if self.zygotes and _warm_fits(req.spec.tty, req.spec.stdin):
            warm = Warm(req.sandbox.id, (*args, *tail("/", False), *via, *STUB), inside_cwd,
                        tuple(req.spec.argv), bind_identity(args))
        extra = proxy_env() if via else {}

        def launch(exec_id: str) -> Launch:
            return Launch(argv=argv, env={**host_env(req.spec, req.sandbox, exec_id), **extra},
                          cwd=cwd, gated=True, warm=warm)
        return launch

    async def copy(self, sb: SandboxRecord, direction: str, src: str, dst: str, *,
                   tether_home: str) -> int:
        # The sandbox runs meanwhile: walk by descriptors, never through a symlink.
        if direction == "in":
            place = host_path(sb.spec, dst, writing=True)
            return await asyncio.to_thread(copy_into, src, place.root, place.rel)
        place = host_path(sb.spec, src, writing=False)
        return await asyncio.to_thread(functools.partial(copy_out_of, place.root, place.rel,
                                                         dst, forbidden=tether_home))
