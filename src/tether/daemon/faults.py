"""Fault injection for crash tests: ``TETHER_FAULT=<point>`` makes the daemon SIGKILL
itself at that point, so a test can prove what a crash *there* leaves behind;
``<point>#N`` at its Nth passage only (e.g. the second exec's start: a warm one).

Points (docs/STATE.md lists what each must leave):

* ``exec.after_commit`` — the exec's intent is committed, no monitor has it yet;
* ``exec.after_handoff`` — the monitor has the spec, RUNNING is not committed yet;
* ``agent.after_attempt_commit`` — a revival's intent (attempt number, token) is
  committed, its exec is not started yet;
* ``digest.after_node`` — a rollup pass has finished one digest node (and its
  checkpoint), others remain;
* ``schedule.after_fire_commit`` — a scheduled fire time's run is committed, its exec
  is not created yet;
* ``retention.after_mark`` — execs are marked pruned (journaled), their files not yet
  removed;
* ``fleet.after_start`` — fleet work placed on this host has started here, its
  RUNNING is not written to PostgreSQL yet;
* ``fleet.after_handover_stop`` — a draining host stopped an agent's local copy to
  hand it over, the placement is not moved in PostgreSQL yet;
* ``fleet.after_relay`` — a batch of this host's local journal events is committed
  to the fleet journal (its cursor with it), the next batch is not read yet;
* ``cost.before_crossing`` — an agent's turn is committed, whether it crossed a budget
  is not checked yet (its ``agent.budget`` event is not journaled).

And one that is not a crash: ``fleet.partition`` cuts this host off PostgreSQL while
the file ``<home>/fleet.partition`` exists (its lease renewals stop; it fences itself).
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset({"exec.after_commit", "exec.after_handoff", "agent.after_attempt_commit",
                    "digest.after_node", "schedule.after_fire_commit",
                    "retention.after_mark", "fleet.after_start", "fleet.partition",
                    "fleet.after_handover_stop", "fleet.after_relay",
                    "cost.before_crossing"})


class Faults:
    def __init__(self, spec: str | None) -> None:
        #: point -> the passage that fires (0: every one)
        self.armed: dict[str, int] = {}
        for item in (spec or "").split(","):
            point, _, nth = item.strip().partition("#")
            if point:
                if nth and not nth.isdigit():
                    raise ValueError(f"TETHER_FAULT {item.strip()!r}: after '#' comes the "
                                     "passage that fires, a number (e.g. exec.after_commit#2)")
                self.armed[point] = int(nth or 0)
        self.passed: dict[str, int] = {}
        unknown = set(self.armed) - POINTS
        if unknown:
            raise ValueError(f"unknown TETHER_FAULT point(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(POINTS))}")

    def hit(self, point: str) -> None:
        if point in self.armed:
            self.passed[point] = n = self.passed.get(point, 0) + 1
            if self.armed[point] not in (0, n):
                return
            import sys
            import traceback

            sys.stderr.write(f"tether: fault point {point} reached: SIGKILL\n")
            traceback.print_stack(file=sys.stderr)
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
