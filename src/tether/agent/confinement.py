"""What a sandboxed agent may see besides a plain exec's view: the confinement policy.

Policy only: given where the session's files live, the lineage's config, its
snapshot, its executable and PATH, :func:`agent_view` says which host paths a
``bwrap`` sandbox binds for it (``tether.runtime.bwrap`` does the binding). It
knows nothing of the daemon; the one side effect is making a missing protected
file or directory (:func:`_placeholder`), since a bind of nothing would leave its
name free for the agent to plant.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import tether
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import Provider
from tether.egress.policy import compose, default_allow
from tether.hostio.paths import is_within
from tether.hostio.untrusted import NotRegular, open_regular
from tether.model.records import AgentConfig, NetworkPolicy
from tether.runtime import bwrap as bwrap_runtime

#: Under the user's home: what agents keep their login and state in (read-write).
AGENT_CONFIG_PATHS = (".claude", ".claude.json", ".codex", ".config/claude", ".gemini")
#: ... except what names commands the provider runs outside any sandbox, or would make the
#: user's own later run do so (Codex runs ``~/.codex/hooks.json``'s hooks: tether vets its
#: own and passes ``--dangerously-bypass-hook-trust``; Gemini: its settings' hooks, the
#: folders whose project hooks it trusts, extensions, custom commands, policy rules, the
#: ``.env`` it loads).
AGENT_CONFIG_READ_ONLY = (".claude/settings.json", ".claude/settings.local.json",
                          ".claude/hooks", ".codex/config.toml", ".codex/hooks.json",
                          ".gemini/settings.json", ".gemini/trustedFolders.json",
                          ".gemini/extensions", ".gemini/commands", ".gemini/policies",
                          ".gemini/.env")
#: Placeholders made as directories (the others are files).
_PLACEHOLDER_DIRS = frozenset({"hooks", "extensions", "commands", "policies"})
#: Never made: an empty Gemini ``.gemini/.env`` would hide the user's ``~/.env`` from the
#: CLI (it loads the first it finds). Bound read-only only when it exists.
_NO_PLACEHOLDER = frozenset({".env"})


def agent_view(*, state_dir: Path, socket_dir: Path, config: AgentConfig, snapshot: Path,
               handoff: Path | None, argv0: str, path_env: str,
               views: dict[str, str] | None = None) -> bwrap_runtime.AgentView:
    """A sandboxed agent also needs its own config (~/.claude, ~/.codex, ~/.gemini), its
    session state, its snapshot and handoff, a worktree's git directory, and agent.sock.
    ``views``: what the provider shows it at a host path instead (read-only; the files
    are in ``state_dir``, read-only too, so the agent cannot rewrite them there)."""
    user_home = os.path.expanduser("~")
    provider = _provider(config.provider)
    rw = [str(state_dir), *(os.path.join(user_home, n) for n in AGENT_CONFIG_PATHS),
          *(os.path.join(user_home, n) for n in provider.home_config)]
    # What the provider or git would run, unsandboxed, later: read-only, made first
    # when missing (a bind of nothing would leave the name free to plant).
    ro = [_placeholder(os.path.join(user_home, n)) for n in AGENT_CONFIG_READ_ONLY]
    # The provider's own config and keys directly in the home (Aider's ~/.aider.conf.yml,
    # ~/.env): read-only, when they exist (a name planted in the home's tmpfs vanishes).
    ro += [os.path.join(user_home, n) for n in provider.home_config_read_only]
    if config.git_dir:  # recorded at start: the worktree's .git is agent-writable
        rw.append(config.git_dir)
    # What git would run, unsandboxed, later (the user's next `git status` there, the
    # daemon's hand-off): read-only, in the repository of the worktree and in that of a
    # checkout the agent merely runs in (its .git then lies in the agent's workspace).
    for common in dict.fromkeys(d for d in (config.git_dir, config.git_pin and
                                            config.git_pin.common) if d):
        ro += [_placeholder(os.path.join(common, n)) for n in ("hooks", "config")]
    ro.append(str(snapshot))
    if handoff is not None:
        ro.append(str(handoff))
    shown = tuple((dest, src) for dest, src in (views or {}).items()
                  if is_within(src, str(state_dir)))
    ro += [src for _, src in shown]
    return bwrap_runtime.AgentView(rw=tuple(rw), ro=tuple(ro), socket_dir=str(socket_dir),
                                   tools=tuple(_toolchain(argv0, path_env)), views=shown)


def _provider(name: str) -> Provider:
    """The lineage's provider, or the generic one when it is gone (a user's file)."""
    try:
        return get_provider(name)
    except KeyError:
        return get_provider("generic")


def egress_allow(provider: str, network: object, allow_domains: list[str]) -> list[str]:
    """What an agent's egress proxy lets it reach: its provider's API hosts
    (``tether.egress.policy.default_allow``), its sandbox's ``network.allow`` and its
    lineage's ``--allow-domain``s, each once. Raises ``BadEntry``."""
    spec_allow = network.allow if isinstance(network, NetworkPolicy) else []
    return compose(default_allow(provider), spec_allow, allow_domains)


def _placeholder(path: str) -> str:
    """Make a missing protected config file (``{}`` for JSON) or directory (``hooks``,
    ``extensions`` …) when its parent exists, so that it can be bound read-only.
    Returns ``path``."""
    if os.path.lexists(path) or not os.path.isdir(os.path.dirname(path)) \
            or os.path.basename(path) in _NO_PLACEHOLDER:
        return path
    owner = os.stat(os.path.dirname(path))
    with contextlib.suppress(OSError):
        if os.path.basename(path) in _PLACEHOLDER_DIRS:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o755)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("{}\n" if path.endswith(".json") else "")
        # A root daemon working in a user's tree: the file is the user's, not root's.
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
    return path


def _toolchain(argv0: str, path_env: str) -> list[str]:
    """What of the places a sandbox hides an agent needs to run, read-only: tether's own
    interpreter (its hooks run it), git's identity, and the agent's installation and
    PATH entries, by the plain exec's toolchain policy (:func:`bwrap_runtime.toolchain`)."""
    user_home = os.path.expanduser("~")
    extra = (sys.prefix, sys.base_prefix, str(Path(tether.__file__).parent.parent),
             *(os.path.join(user_home, n) for n in (".gitconfig", ".config/git")))
    return list(bwrap_runtime.toolchain(argv0, cwd=os.getcwd(), path_env=path_env,
                                        host_root=True, extra=extra))


def git_common_dir(path: str) -> str | None:
    """The repository's .git of a worktree (commits write there), or None."""
    dirs = git_dirs(path)
    return dirs[0] if dirs is not None else None


def git_dirs(path: str) -> tuple[str, str] | None:
    """(the repository's common git directory, the worktree's own git directory) of the
    checkout at ``path``, or None; both are the ``.git`` directory of a main checkout.
    Read from the files themselves, not by running git (as root git refuses a user's
    repository, and the tree is untrusted), and checked both ways: a worktree's ``.git``
    file is the agent's to rewrite and must not name another repository for the next
    agent."""

    def read(file: str) -> str | None:
        try:
            with open_regular(file, max_bytes=4096) as f:
                return f.read().decode(errors="replace").strip()
        except (OSError, NotRegular):
            return None

    dotgit = os.path.join(path, ".git")
    if os.path.isdir(dotgit) and not os.path.islink(dotgit):
        real = os.path.realpath(dotgit)  # a main worktree: its .git is the common dir
        return real, real
    line = read(dotgit)
    if line is None or not line.startswith("gitdir:"):
        return None
    gitdir = os.path.realpath(os.path.join(path, line.removeprefix("gitdir:").strip()))
    common_rel = read(os.path.join(gitdir, "commondir"))
    back = read(os.path.join(gitdir, "gitdir"))
    if common_rel is None or back is None:
        return None  # not a linked worktree (a submodule, say)
    common = os.path.realpath(os.path.join(gitdir, common_rel))
    back_real = os.path.realpath(os.path.join(gitdir, back))
    if is_within(gitdir, os.path.join(common, "worktrees")) and \
            back_real == os.path.realpath(dotgit):
        return common, gitdir
    return None
