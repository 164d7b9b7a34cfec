"""What a repository's ``.tether.yaml`` says (parsed in ``tether.agent.repoconfig``), kept
in a lineage's config (category A) so that its end runs what its start read."""

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
