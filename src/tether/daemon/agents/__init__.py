"""Agent lineages: start, turns, fencing, heartbeats, drain snapshots, revival.

A lineage is an agent's stable identity; each attempt is an exec of it. The
lineage record (category A) holds the intent and the counters; the
conversation lives in the drain snapshot (category D) and nowhere else;
heartbeats are memory (category C: a restarted daemon gives every live session a
fresh grace period).

Exactly once: an attempt's intent (its number and token) is committed before
its exec is started, and the exec carries the request key
``lineage-<id>-<attempt>``. A daemon that crashes anywhere in between finds the
lineage REVIVING and starts the same attempt again with the same key, which
the exec store turns into a no-op if the first try got through. An exec that never
started is no death: the same attempt is started again under the next key. Two
daemons never act at once: the home lock.

The parts, around one shared :class:`~.core.AgentCore`: :mod:`.attempts`
(starting, ending and reviving attempts, successors, the sweep), :mod:`.protocol`
(the ``agent.*`` requests), :mod:`.tick` (the heartbeat, hang and revival tick),
:mod:`.recovery` (after a restart), :mod:`.worktree` (``.agent`` files), and the
facade :mod:`.service`. What a sandboxed agent may see is policy of its own:
``tether.agent.confinement``.
"""

from tether.agent.confinement import _toolchain, git_common_dir
from tether.daemon.agents.attempts import CRASH_LOOP_LIMIT, _write_private, backoff
from tether.daemon.agents.service import AgentService

# The names other modules and the tests import from here.
__all__ = ["CRASH_LOOP_LIMIT", "AgentService", "_toolchain", "_write_private", "backoff",
           "git_common_dir"]
