"""What a repository's ``.tether.yaml`` says (parsed in ``tether.agent.repoconfig``), kept
in a lineage's config (category A) so that its end runs what its start read, and where a
worktree's git directories were at the start (:class:`GitPin`)."""

from __future__ import annotations

import msgspec


class Ports(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    base: int
    per_session: int = 10
    sessions: int = 100  # how many blocks of per_session ports the range holds


class Handoff(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    commit: bool = False  # commit what the agent left uncommitted first
    remote: str | None = None  # push the branch there
    command: str | None = None  # then run this in the worktree (e.g. gh pr create --fill)
    on_finish: bool = True  # run it when the lineage finishes; else only `lineage finish`


class RepoConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True,
                 omit_defaults=True):
    setup: str | None = None
    run: str | None = None
    archive: str | None = None
    copy: list[str] = msgspec.field(default_factory=list)
    ports: Ports | None = None
    handoff: Handoff | None = None
    setup_timeout: float = 600.0
    archive_timeout: float = 120.0


#: The keys that name a command tether runs **outside** the sandbox, as the daemon's user
#: (``run`` is an ordinary exec in the lineage's sandbox). Such a command is read only from
#: a place the agent cannot write (docs/SECURITY.md, "Repository config").
UNSANDBOXED = ("setup", "archive", "handoff.command")


def unsandboxed(cfg: RepoConfig) -> list[str]:
    """Which of :data:`UNSANDBOXED` ``cfg`` sets."""
    got = {"setup": cfg.setup, "archive": cfg.archive,
           "handoff.command": cfg.handoff.command if cfg.handoff else None}
    return [k for k in UNSANDBOXED if got[k]]


class GitPin(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A worktree's git directories as they were when the user started its lineage: the
    worktree's ``.git`` file (or, in a main checkout, the ``.git`` directory itself) is the
    agent's to rewrite or replace, so git run by the daemon in the tree is pointed at these
    (``GIT_DIR``, ``GIT_COMMON_DIR``) and refused when either is no longer the same
    directory (``ids``: device and inode of each, checked before every use)."""

    common: str  # the repository's common git directory (its config, hooks, objects)
    gitdir: str  # the worktree's own (HEAD, index): ``common`` for a main checkout
    ids: list[int] = msgspec.field(default_factory=list)  # [dev, ino] of common, gitdir
    top: str | None = None  # the checkout's top (GIT_WORK_TREE); None: the tree itself
