"""Git that the daemon runs in an agent's tree (a hand-off's ``git add``/``commit``/
``push``, and any git a repository script or hand-off command runs), pinned to the
repository the user started the lineage in.

A worktree's ``.git`` file is the agent's to rewrite, and in a main checkout the agent
can rename the ``.git`` directory and put its own in its place: git that found its
repository by itself would then read the agent's ``config`` — ``core.fsmonitor``,
``core.hooksPath``, ``gpg.program``, filters — and run what it names, outside the
sandbox. So the daemon's git never looks: ``GIT_DIR``, ``GIT_COMMON_DIR`` and
``GIT_WORK_TREE`` name the directories found when the user started the lineage
(:class:`~tether.model.repo.GitPin`), each checked to still be the same directory (device
and inode, not a symlink) before every use. The common directory's ``config`` and
``hooks/`` are bound read-only into the agent's sandbox (``agent/confinement.py``); hooks
are still switched off (``core.hooksPath=/dev/null``: a repository may keep its hooks in
the tree, as husky does) and so is ``core.fsmonitor``, as ``git -c`` would (by
``GIT_CONFIG_PARAMETERS``, which every git the command starts inherits).
"""

from __future__ import annotations

import os
import stat

from tether.agent.confinement import git_dirs
from tether.hostio.untrusted import NotRegular, open_regular
from tether.model.repo import GitPin

#: Config given to every git the daemon runs in a tree (``git -c``, by environment).
FORCED_CONFIG = (("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"))
#: GIT_DIR when the tree had no repository at start: git finds none, whatever the agent
#: made since.
NO_REPOSITORY = "/nonexistent/tether: no git repository at the lineage's start"


class PinBroken(Exception):
    """The tree's git directory is not the one its lineage started with (the message
    says which and what to do)."""


def _ident(path: str) -> list[int]:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PinBroken(f"{path} is no longer a directory")
    return [st.st_dev, st.st_ino]


def pin(tree: str) -> GitPin | None:
    """The git directories of the checkout ``tree`` is in now (the user's start: its top
    is ``tree`` or the nearest directory above it with a ``.git``, as git would find it),
    or None when it is in none."""
    top = os.path.realpath(tree)
    while not os.path.lexists(os.path.join(top, ".git")):
        if top == os.path.dirname(top):
            return None
        top = os.path.dirname(top)
    dirs = git_dirs(top)
    if dirs is None:
        return None
    common, gitdir = dirs
    try:
        return GitPin(common=common, gitdir=gitdir, ids=[*_ident(common), *_ident(gitdir)],
                      top=top)
    except (OSError, PinBroken):
        return None


def legacy_pin(git_dir: str | None, tree: str) -> GitPin | None:
    """A pin for a lineage started by an older tether, which kept only the common
    directory (``AgentConfig.git_dir``): its main checkout's, or the worktree entry under
    it whose ``gitdir`` names this tree (no identities to check: they were never taken)."""
    if not git_dir:
        return None
    if os.path.realpath(os.path.dirname(git_dir)) == os.path.realpath(tree):
        return GitPin(common=git_dir, gitdir=git_dir)
    want = os.path.realpath(os.path.join(tree, ".git"))
    entries = os.path.join(git_dir, "worktrees")
    try:
        names = sorted(os.listdir(entries))
    except OSError:
        return None
    for name in names:
        try:
            with open_regular(os.path.join(entries, name, "gitdir"), max_bytes=4096) as f:
                back = f.read().decode(errors="replace").strip()
        except (OSError, NotRegular):
            continue
        if os.path.realpath(os.path.join(entries, name, back)) == want:
            return GitPin(common=git_dir, gitdir=os.path.join(entries, name))
    return None


def env(p: GitPin | None, tree: str) -> dict[str, str]:
    """The environment variables for git in ``tree``: the pinned directories (or none at
    all when the tree had no repository at start) and :data:`FORCED_CONFIG`. Raises
    :class:`PinBroken` when a pinned directory was replaced."""
    if p is None:
        out = {"GIT_DIR": NO_REPOSITORY}
    else:
        if len(p.ids) == 4:
            for path, want, what in ((p.common, p.ids[:2], "repository's git directory"),
                                     (p.gitdir, p.ids[2:], "worktree's git directory")):
                try:
                    got = _ident(path)
                except OSError as e:
                    raise PinBroken(f"the {what} {path} is gone ({e.strerror})") from None
                if got != want:
                    raise PinBroken(f"the {what} {path} was replaced since the lineage "
                                    "started (by its agent?): tether runs no git in it; "
                                    "look at the tree yourself before you trust it")
        out = {"GIT_DIR": p.gitdir, "GIT_COMMON_DIR": p.common,
               "GIT_WORK_TREE": p.top or tree}
    # As ``git -c``: it also reaches the git a submodule's is run by (which gets no
    # GIT_CONFIG_COUNT), and it wins over every config file.
    out["GIT_CONFIG_PARAMETERS"] = " ".join(f"'{key}={value}'" for key, value in FORCED_CONFIG)
    return out
