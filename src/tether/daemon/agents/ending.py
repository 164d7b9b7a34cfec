"""Why an attempt ended, read from the exec's end and the tail of its logs.

The rules are the provider's (:mod:`tether.agent.exits`); this module only gathers
the facts: the exec record, whether tether killed it as hung, whether its context
was DEAD, and the last :data:`~tether.agent.exits.TAIL_BYTES` of its output (the
terminal log for a tty exec, else stdout, then stderr), never the whole file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tether.agent import exits
from tether.agent import lifecycle as lc
from tether.agent.providers.base import Provider
from tether.daemon.agents.core import AgentCore
from tether.model.records import ExecRecord, LineageRecord


def read_tail(path: Path, limit: int = exits.TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``path`` as text ('' when it does not exist)."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit).decode("utf-8", "replace")
    return ""


def output_tail(core: AgentCore, x: ExecRecord) -> str:
    """The end of an exec's output: its terminal (or stdout), then its stderr."""
    paths = core.execs.paths(x)
    main = paths.pty if x.spec.tty else paths.stdout
    return read_tail(main) + "\n" + read_tail(paths.stderr)


def rules_of(provider: Provider) -> exits.ExitRules:
    return exits.ExitRules(usage_limit=provider.usage_limit_patterns,
                           out_of_context=provider.out_of_context_patterns,
                           waiting_for_user=provider.waiting_patterns)


#: The reason of a cancel tether sends when an agent's CLI reported a usage limit.
LIMIT_STOP = "usage limit: "


def classify(core: AgentCore, rec: LineageRecord, x: ExecRecord, provider: Provider,
             *, hung: bool) -> exits.Exit:
    reason = x.reason or ""
    facts = exits.ExitFacts(state=str(x.state), exit_code=x.exit_code, hung=hung,
                            dead=rec.lifecycle == lc.Lifecycle.DEAD,
                            limited=reason.removeprefix(LIMIT_STOP)
                            if reason.startswith(LIMIT_STOP) else None, reason=reason)
    return exits.classify(facts, output_tail(core, x), rules_of(provider), core.clock.now())
