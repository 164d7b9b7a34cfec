"""What a turn can have used: a reported usage bounded by its model's limits (pure).

An agent reports its own token counts (``agent.turn``, its hook's transcript), and the
daemon prices them for ``tether cost`` and the budgets, the daily one shared by every
agent. So a count is believed only up to what the model could have produced in the time
the turn took: each API call carries at most the model's context window on its input side
(input, cache reads, cache writes together) and at most its output limit, and a lineage
makes at most :data:`CALLS_PER_SECOND` such calls per second since its previous turn (one
more for the turn itself). Anything above is cut to that bound; the caller journals it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The usage keys that fill a request's context window; the one a response is made of.
INPUT_KEYS = ("input_tokens", "cache_read_tokens", "cache_creation_tokens")
OUTPUT_KEY = "output_tokens"
#: Full-window requests one lineage can have made per second, sustained: far above what
#: any agent does (a 200k-token request takes seconds), so an honest turn is never cut.
CALLS_PER_SECOND = 1.0


@dataclass(frozen=True)
class Bounded:
    usage: dict[str, int]  # what is kept: every count at most its bound
    capped: bool  # whether any count was cut
    calls: int  # the requests the turn can have made
    input_limit: int  # tokens on the input side, all of them together
    output_limit: int


def calls_possible(elapsed: float) -> int:
    """Requests a lineage can have made in ``elapsed`` seconds (at least one)."""
    return 1 + int(max(0.0, elapsed) * CALLS_PER_SECOND)


def bound(usage: dict[str, int], *, window: int, max_output: int, elapsed: float) -> Bounded:
    """``usage`` cut to what ``elapsed`` seconds of a model with this ``window`` and
    ``max_output`` allow. The input-side counts are scaled down together (their shares
    kept); a count of another name (not priced) is held to the input bound; a negative
    count is 0."""
    calls = calls_possible(elapsed)
    in_limit, out_limit = window * calls, max_output * calls
    given = {k: max(0, int(v)) for k, v in usage.items()}
    kept = {k: min(v, out_limit if k == OUTPUT_KEY else in_limit) for k, v in given.items()}
    total = sum(given.get(k, 0) for k in INPUT_KEYS)
    if total > in_limit:
        for k in INPUT_KEYS:
            if k in given:
                kept[k] = given[k] * in_limit // total
    return Bounded(kept, kept != {k: int(v) for k, v in usage.items()}, calls, in_limit,
                   out_limit)
