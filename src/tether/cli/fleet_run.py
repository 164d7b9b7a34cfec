"""``tether --fleet URL run``: which of ``run``'s options a placement carries to its host.

A placement carries the command, its ``-e`` variables, working directory, terminal,
name, agent settings and ``--worktree`` branch; the host runs it in its default
sandbox. Any other option given (``--sandbox``, sandbox flags, ``--timeout``,
``--budget``, ``--issue``, …) would be dropped silently and the command run without
it, so it is refused instead, naming each one.
"""

from __future__ import annotations

import click

#: ``run``'s parameters a fleet placement carries (or that change nothing there: a
#: placement is always detached, and only ``-e`` variables travel anyway).
CARRIED = frozenset({
    "argv", "envs", "cwd", "use_tty", "interactive", "detach", "clean_env", "detach_keys",
    "name", "agent_provider", "no_agent", "revival", "max_revivals", "stale_after",
    "crashed_after", "worktree", "fleet_host", "fleet_labels"})


def uncarried(ctx: click.Context) -> list[str]:
    """The options given on this command line that a placement would drop."""
    given = []
    for p in ctx.command.params:
        if p.name in CARRIED or p.name is None or not isinstance(p, click.Option):
            continue
        if ctx.get_parameter_source(p.name) is not click.core.ParameterSource.DEFAULT:
            given.append(max(p.opts, key=len))
    return given
