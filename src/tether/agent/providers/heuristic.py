"""Providers for agent CLIs without hooks: tether reads their terminal output.

Such a CLI cannot tell tether when a turn ends, so the daemon infers it (the agent
tick, ``daemon/agents/turns.py``): a turn has ended when the attempt's output has been
quiet for ``turn_idle_seconds`` and, if ``turn_end_pattern`` is set, the last output
matches it (the CLI's prompt). That is a **heuristic**: a CLI that thinks silently for
longer than that is counted as idle, and a prompt-looking line in the middle of a turn
can end it early. ``session_pattern``, ``context_pattern`` and ``usage_pattern`` read
the session id, the context use and the turn's token counts from the output where the
CLI prints them; none is required.

Resuming: ``resume_argv`` is a template (``{argv0}``, ``{session}``; ``{args}`` is the
original arguments less ``resume_drop`` options and, when ``drop_positionals``, less
positional words such as a prompt); ``resume_last_argv`` is used when no session id
was learned. Both are data, so a user-defined provider (``user.py``) is the same class.
A turn is priced as ``model``, or as what ``model_pattern`` reads from the output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.agent.providers.base import HookEvent, LaunchPlan, Provider, SessionContext


class OutputProvider(Provider):
    """A CLI driven by its own terminal; turns are inferred from its output."""

    name = "output"
    turn_idle_seconds: float | None = 5.0
    resume_argv: tuple[str, ...] = ("{argv0}", "{args}")
    resume_last_argv: tuple[str, ...] = ("{argv0}", "{args}")
    # Options dropped from ``{args}`` when resuming, and how many values each takes.
    resume_drop: Mapping[str, int] = {}
    drop_positionals = False
    # Options that take a value: with ``drop_positionals``, their value is kept.
    value_options: frozenset[str] = frozenset()
    # The model its turns are priced as (``tether cost``, budgets): read from its output
    # by ``model_pattern`` (group 1) when that matches, else ``model``; None: unpriced.
    model: str | None = None
    model_pattern: str | None = None
    # What is doubtful in a user's profile (a regex that can never match): said by the
    # daemon's log and by ``tether run`` when the profile is used.
    warnings: tuple[str, ...] = ()

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        if not argv:
            raise ValueError("empty command line")
        return LaunchPlan(argv=list(argv))

    def kept_args(self, args: list[str]) -> list[str]:
        """The original arguments that still apply to a resumed session."""
        kept: list[str] = []
        i = 0
        while i < len(args):
            word = args[i]
            name = word.partition("=")[0]
            if name in self.resume_drop:
                i += 1 + (0 if "=" in word else self.resume_drop[name])
                continue
            if self.drop_positionals and not word.startswith("-"):
                i += 1
                continue
            kept.append(word)
            i += 1
            if name in self.value_options and "=" not in word and i < len(args):
                kept.append(args[i])
                i += 1
        return kept

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        if not argv:
            raise ValueError("empty command line")
        template = self.resume_argv if provider_session_id else self.resume_last_argv
        out: list[str] = []
        for word in template:
            if word == "{args}":
                out.extend(self.kept_args(argv[1:]))
            else:
                out.append(word.replace("{argv0}", argv[0])
                           .replace("{session}", provider_session_id or ""))
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        if provider_session_id:
            env["TETHER_PROVIDER_SESSION"] = provider_session_id
        return LaunchPlan(argv=out, env=env)

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        return HookEvent(kind="other", raw=payload)  # no hooks: a heartbeat at most
