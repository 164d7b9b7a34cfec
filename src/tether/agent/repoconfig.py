"""A repository's worktree scripts: ``.tether.yaml`` (or ``tether.toml``) at its root.

::

    setup: npm ci                 # once, when a worktree is first used, before the agent
    run: npm run dev              # a companion exec started beside the agent
    archive: ./scripts/teardown   # when the lineage ends (finished, reaped or failed)
    copy: [.env, config/local.json]   # from the main checkout into each new worktree
    ports: {base: 4000, per_session: 10, sessions: 50}   # TETHER_PORT_BASE per lineage
    handoff: {commit: true, remote: origin, command: "gh pr create --fill"}

Read by the daemon once, when the user starts a lineage (``agent.start``), from the
repository's main checkout (not the agent's worktree, which the agent may rewrite), and
frozen in the lineage's config: revivals, successors, hand-offs and the lineage's end run
what the user's repository said at that start (docs/SECURITY.md). Parsing, validation and
the bounded read of the file; the scripts run in ``tether.daemon.agents.scripts``.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import PurePosixPath
from typing import NamedTuple

import msgspec
import yaml

from tether.hostio.untrusted import NotRegular, open_regular
from tether.model.repo import Handoff, Ports, RepoConfig

__all__ = ["NAMES", "Found", "Handoff", "Ports", "RepoConfig", "RepoConfigError",
           "fingerprint", "load", "parse", "read"]

NAMES = (".tether.yaml", "tether.toml")
MAX_BYTES = 64 * 1024


class RepoConfigError(ValueError):
    """The file exists but says something tether cannot do; the message names the file."""


def parse(data: bytes, name: str) -> RepoConfig:
    """Decode ``data`` (the file ``name``: YAML unless it ends in ``.toml``) and check it."""
    try:
        raw = (tomllib.loads(data.decode()) if name.endswith(".toml")
               else yaml.safe_load(data) or {})
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise RepoConfigError(f"{name}: not valid {'TOML' if name.endswith('.toml') else 'YAML'}"
                              f": {e}") from None
    try:
        cfg = msgspec.convert(raw, RepoConfig)
    except msgspec.ValidationError as e:
        raise RepoConfigError(f"{name}: {e}") from None
    for rel in cfg.copy:
        p = PurePosixPath(rel)
        if not rel or p.is_absolute() or ".." in p.parts:
            raise RepoConfigError(f"{name}: copy: {rel!r} must be a path inside the "
                                  "repository (relative, without '..')")
    if cfg.ports is not None:
        pt = cfg.ports
        if pt.per_session < 1 or pt.sessions < 1 or pt.base < 1024 or \
                pt.base + pt.per_session * pt.sessions > 65536:
            raise RepoConfigError(f"{name}: ports: base {pt.base} + per_session "
                                  f"{pt.per_session} x sessions {pt.sessions} must fit in "
                                  "1024..65535 with per_session and sessions at least 1")
    if cfg.setup_timeout <= 0 or cfg.archive_timeout <= 0:
        raise RepoConfigError(f"{name}: setup_timeout and archive_timeout must be positive")
    return cfg


class Found(NamedTuple):
    config: RepoConfig
    path: str  # the file read
    sha256: str  # of its bytes


def _raw(root: str) -> tuple[str, bytes] | None:
    """The first of :data:`NAMES` at ``root`` and its bytes, or None without one. Refuses
    a symlink or a file that is not regular (a repository's file, not a link out), never
    blocks on a FIFO and never reads more than :data:`MAX_BYTES` (+1)."""
    for name in NAMES:
        path = os.path.join(root, name)
        try:
            with open_regular(path) as f:
                data = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            continue
        except NotRegular as e:
            raise RepoConfigError(f"{path}: {e.reason}; it must be a regular file, not a "
                                  "symlink") from None
        except OSError as e:
            raise RepoConfigError(f"{path}: cannot read it ({e.strerror})") from None
        if len(data) > MAX_BYTES:
            raise RepoConfigError(f"{path}: larger than {MAX_BYTES} bytes")
        return path, data
    return None


def read(root: str) -> Found | None:
    """The config at ``root``, the file it came from and its digest; None without one."""
    raw = _raw(root)
    if raw is None:
        return None
    path, data = raw
    return Found(parse(data, path), path, hashlib.sha256(data).hexdigest())


def load(root: str) -> RepoConfig | None:
    """The config at ``root`` (the first of :data:`NAMES` there), or None without one."""
    found = read(root)
    return found.config if found is not None else None


def fingerprint(root: str) -> tuple[str, str] | None:
    """(path, SHA-256) of the config file at ``root`` without parsing it, None without
    one or when it cannot be read safely: what a tree holds now, to compare with what a
    lineage froze (the file may be the agent's)."""
    try:
        raw = _raw(root)
    except RepoConfigError:
        return None
    return None if raw is None else (raw[0], hashlib.sha256(raw[1]).hexdigest())
