"""Where a command's toolchain lives on the host: the paths a sandbox must show it.

Users run their commands with interpreters and tools installed under their home
directory (a virtualenv, pyenv, ``~/.local/bin``, pipx, nvm, cargo), which a
sandbox hides. :func:`candidates` names the installation behind a command —
its executable's directory and installation prefix (resolved too), for a node
program its package and that package's whole dependency closure (optional and
platform packages included: Codex's and Gemini CLI's binaries live in those), the
interpreter its ``#!`` line names, the active virtualenv, and the PATH entries —
so that a sandbox can bind them read-only. It only names paths: which of them a
sandbox may show is the sandbox's policy (:func:`tether.runtime.bwrap.toolchain`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Hashable

from tether.hostio.paths import is_within
from tether.hostio.untrusted import NotRegular, open_regular

#: Names of the directory an installation keeps its commands in (pyenv's and
#: rbenv's ``shims`` run ``libexec`` from their root).
BIN_DIRS = ("bin", "shims")


def candidates(argv0: str, *, cwd: str, path_env: str, virtual_env: str | None,
               homes: tuple[str, ...]) -> list[str]:
    """Host paths that the command ``argv0`` may need to run, unfiltered, in order."""
    found: list[str] = []

    def add(paths: list[str]) -> None:
        found.extend(p for p in paths if p not in found)

    exe = _which(argv0, cwd=cwd, path_env=path_env)
    if exe is not None:
        add(_installation(exe, homes))
        interp = _shebang(os.path.realpath(exe))
        if interp is not None:
            argv = interp.split()
            if os.path.basename(argv[0]) == "env" and len(argv) > 1:
                argv = argv[1:]
            found_interp = _which(argv[0], cwd=cwd, path_env=path_env)
            if found_interp is not None:
                add(_installation(found_interp, homes))
    if virtual_env and os.path.isabs(virtual_env) and os.path.isdir(virtual_env):
        add([os.path.normpath(virtual_env)])
        python = os.path.join(virtual_env, "bin", "python")
        if os.path.exists(python):  # a venv of a pyenv (or other home-made) python
            add(_installation(python, homes))
    for d in path_env.split(":"):
        if os.path.isabs(d) and os.path.isdir(d):
            add(_prefix(os.path.normpath(d), homes))
    return found


def _which(cmd: str, *, cwd: str, path_env: str) -> str | None:
    if "/" in cmd:
        path = os.path.normpath(os.path.join(cwd, cmd))
        return path if os.path.exists(path) else None
    return shutil.which(cmd, path=path_env)


def _installation(exe: str, homes: tuple[str, ...]) -> list[str]:
    """An executable's directory and prefix, as named and resolved (a venv's python
    links to its base interpreter; pipx's and nvm's commands link into a package)."""
    out: list[str] = []
    for q in dict.fromkeys((os.path.normpath(exe), os.path.realpath(exe))):
        out += _prefix(os.path.dirname(q), homes)
        pkg = os.path.dirname(q)  # a node package's bin/ script needs its whole package
        while pkg != "/" and not os.path.isfile(os.path.join(pkg, "package.json")):
            pkg = os.path.dirname(pkg)
        if pkg != "/":
            out.append(pkg)
            out.extend(p for p in node_dependencies(pkg) if p not in out)
    return out


#: The ``package.json`` fields whose packages node may load at run time. An optional
#: dependency is how npm ships a platform's binary (``@openai/codex-linux-x64``).
_DEPENDENCY_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies")
#: A dependency closure larger than this is cut short (a package tree is not a bound).
MAX_NODE_PACKAGES = 2000
_MAX_PACKAGE_JSON = 1 << 20


def node_dependencies(pkg: str) -> list[str]:
    """The installed packages the node package ``pkg`` depends on, transitively: each
    dependency name resolved as node does (``node_modules/NAME`` in the requiring
    package's directory, then in each directory above it), a package under one
    already found left out (it is bound with it). What is not installed (another
    platform's optional package) is skipped."""
    found: list[str] = []
    root = os.path.realpath(pkg)
    seen = {root}
    queue = [root]  # node resolves a module's requires from its real path
    while queue and len(seen) < MAX_NODE_PACKAGES:
        here = queue.pop(0)
        for name in _dependency_names(here):
            dep = _resolve_package(name, here)
            if dep is None:
                continue
            real = os.path.realpath(dep)
            if real in seen:
                continue
            seen.add(real)
            queue.append(real)
            for p in dict.fromkeys((dep, real)):  # a link (pnpm's) and what it names
                if not any(is_within(p, q) for q in (pkg, root, *found)):
                    found.append(p)
    return found


def _dependency_names(pkg: str) -> list[str]:
    try:
        with open_regular(os.path.join(pkg, "package.json"), max_bytes=_MAX_PACKAGE_JSON) as f:
            data = json.loads(f.read())
    except (OSError, ValueError, NotRegular):
        return []
    names: list[str] = []
    for fld in _DEPENDENCY_FIELDS:
        deps = data.get(fld) if isinstance(data, dict) else None
        if isinstance(deps, dict):
            names += [n for n in deps if isinstance(n, str) and n not in names]
    return names


def _resolve_package(name: str, start: str) -> str | None:
    """Where node finds package ``name`` required from package directory ``start``."""
    parts = name.split("/")
    if not all(parts) or ".." in parts or len(parts) > 2 or name.startswith("."):
        return None  # not a package name (a path, ``..``)
    d = start
    while True:
        if os.path.basename(d) != "node_modules":
            cand = os.path.join(d, "node_modules", *parts)
            if os.path.isfile(os.path.join(cand, "package.json")):
                return cand
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _prefix(bindir: str, homes: tuple[str, ...]) -> list[str]:
    """``bindir`` and the installation it belongs to: a ``bin`` directory's parent (a
    venv, a pyenv or nvm version), except a directory of a home's own that is no venv
    (``~/.local``, ``~/.cargo``), of which only ``bin`` and ``lib`` (``pip --user``'s
    packages)."""
    if os.path.basename(bindir) not in BIN_DIRS:
        return [bindir]
    prefix = os.path.dirname(bindir)
    whole = (os.path.basename(bindir) == "shims"  # pyenv's root: versions/, libexec/
             or os.path.isfile(os.path.join(prefix, "pyvenv.cfg")))
    if not whole and any(os.path.dirname(prefix) == h for h in homes):
        lib = os.path.join(prefix, "lib")
        return [bindir, *([lib] if os.path.isdir(lib) else [])]
    if any(is_within(h, prefix) for h in homes):
        return [bindir]  # ~/bin: not the whole home
    return [bindir, prefix]


def _shebang(path: str) -> str | None:
    """The interpreter line of a script (``#!/path/python -u``), or None."""
    try:
        with open_regular(path) as f:
            head = f.read(256)
    except (OSError, NotRegular):
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode(errors="replace").strip()
    return line if line.startswith("/") else None


#: How long a looked-up toolchain may serve at most, even when nothing it watches changed
#: (what the stamp cannot see: a ``package.json`` appearing up the tree, a symlink
#: retargeted outside PATH, a script's ``#!`` line edited in place).
CACHE_TTL = 5.0
CACHE_SIZE = 64

_Stamp = tuple[tuple[int, int] | None, ...]


def _stamp(paths: tuple[str, ...]) -> _Stamp:
    """The inode and modification time of each path (None when missing): an entry
    added, removed or renamed in a directory changes its mtime."""
    out: list[tuple[int, int] | None] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_mtime_ns))
    return tuple(out)


class ToolchainCache:
    """Toolchains looked up per (command, PATH, virtualenv, ...): a lookup walks PATH,
    resolves links and reads a script's ``#!`` line (about a millisecond, on every exec's
    start), while its answer changes only when a tool is installed or removed. An answer
    serves again while the PATH directories, the virtualenv and the paths it named keep
    their inode and mtime (a dozen ``stat`` calls), for at most ``ttl`` seconds."""

    def __init__(self, ttl: float = CACHE_TTL, size: int = CACHE_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._entries: dict[Hashable, tuple[float, tuple[str, ...], _Stamp,
                                            tuple[str, ...]]] = {}

    def get(self, key: Hashable, path_env: str, virtual_env: str | None,
            lookup: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """``lookup()``'s answer for ``key`` (which must hold every input of the lookup),
        from the cache while still valid."""
        now = self.clock()
        hit = self._entries.get(key)
        if hit is not None:
            at, watched, stamp, found = hit
            if now - at < self.ttl and _stamp(watched) == stamp:
                return found
        watched = tuple(dict.fromkeys(
            [*(d for d in path_env.split(":") if os.path.isabs(d)),
             *([virtual_env] if virtual_env else [])]))
        before = _stamp(watched)  # taken first: a change during the lookup is seen later
        found = lookup()
        watched_all = tuple(dict.fromkeys([*watched, *found]))
        stamp = (*before, *_stamp(watched_all[len(watched):]))
        self._entries.pop(key, None)
        self._entries[key] = (now, watched_all, stamp, found)
        while len(self._entries) > self.size:
            del self._entries[next(iter(self._entries))]
        return found
