"""``tether run``'s options, grouped by what they shape: the exec and this terminal, the
agent session, its worktree, the fleet placement. The click command hands its ~30
parameters over as these records (:func:`take`), so each step of a run takes the group it
needs instead of every parameter; the sandbox flags stay the dict that
``sandboxflags.create_params`` reads, shared with ``tether sandbox create``.

A field's name is its click parameter's name (``fleet_run.CARRIED`` names them too)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class ExecOptions:
    """The command's exec, and how this terminal follows it."""

    detach: bool  # -d: print the exec id and return
    name: str | None
    sandbox: str  # name or id; "default" unless --sandbox
    envs: tuple[str, ...]  # -e KEY=VALUE, or KEY to copy this shell's
    cwd: str | None
    timeout: float | None
    clean_env: bool
    use_tty: bool  # -t
    interactive: bool  # -i
    detach_keys: str | None


@dataclass(frozen=True)
class AgentOptions:
    """An agent session's: which provider, how it is revived and judged, what it may
    spend and reach."""

    agent_provider: str | None  # --agent NAME
    no_agent: bool
    revival: str
    max_revivals: int
    aging_pct: float
    dying_pct: float
    stale_after: float
    crashed_after: float
    successor: str
    budget_usd: float | None
    budget_policy: str
    allow_domains: tuple[str, ...]


@dataclass(frozen=True)
class WorktreeOptions:
    """Where an agent works: a git worktree of a branch, or a directory as it is, and
    what happens to its work."""

    worktree: str | None
    workdir_opt: str | None  # --workdir
    commit_on_finish: bool
    issue: str | None
    issue_id: str | None
    force: bool


@dataclass(frozen=True)
class FleetOptions:
    """A fleet placement's host: named, or chosen by its labels."""

    fleet_host: str | None  # --host
    fleet_labels: tuple[str, ...]  # --host-label KEY=VALUE


def take(cls: type[R], params: dict[str, Any]) -> R:
    """The record ``cls`` made of its fields' parameters, removed from ``params``."""
    return cls(**{f.name: params.pop(f.name) for f in fields(cls)})  # type: ignore[arg-type]
