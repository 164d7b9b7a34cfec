"""A repository's worktree scripts: ``.tether.yaml`` (or ``tether.toml``) at its root.

::

    setup: npm ci                 # once, when a worktree is first used, before the agent
    run: npm run dev              # a companion exec started beside the agent
    archive: ./scripts/teardown   # when the lineage ends (finished, reaped or failed)
    copy: [.env, config/local.json]   # from the main checkout into each new worktree
    ports: {base: 4000, per_session: 10, sessions: 50}   # TETHER_PORT_BASE per lineage
    handoff: {commit: true, remote: origin, command: "gh pr create --fill"}

Read by the daemon once, at ``agent.start``, from the repository's main checkout (not
the agent's worktree, which the agent may rewrite) and kept in the lineage's config:
what later runs at the lineage's end is what the user's repository said at its start.
Pure: parsing and validation only; the scripts run in ``tether.daemon.agents.scripts``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import PurePosixPath

import msgspec
import yaml

from tether.model.repo import Handoff, Ports, RepoConfig

__all__ = ["NAMES", "Handoff", "Ports", "RepoConfig", "RepoConfigError", "load", "parse"]

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


def load(root: str) -> RepoConfig | None:
    """The config at ``root`` (the first of :data:`NAMES` there), or None without one.
    Refuses a symlink or a file that is not regular (a repository's file, not a link out)."""
    for name in NAMES:
        path = os.path.join(root, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise RepoConfigError(f"{path}: cannot read it ({e.strerror}); it must be a "
                                  "regular file, not a symlink") from None
        with os.fdopen(fd, "rb") as f:
            if not os.path.isfile(path):
                raise RepoConfigError(f"{path}: not a regular file")
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise RepoConfigError(f"{path}: larger than {MAX_BYTES} bytes")
        return parse(data, path)
    return None
