"""Sums of priced turns, grouped by attempt, lineage, sandbox, day or model.

A turn whose model has no price is never counted as free: its group's ``cost_usd`` is
``None`` (unknown), ``priced_usd`` keeps the part that is known, and a note names the
model and the file to add it to.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tether.cost.prices import PriceTable

GROUPS = ("attempt", "lineage", "sandbox", "day", "model")


@dataclass(frozen=True)
class Turn:
    """``turns`` ``agent.turn`` events of one key (an attempt, lineage or sandbox; None
    when grouped otherwise), model and day, their usage summed: pricing is linear, so a
    sum priced once costs what its turns priced one by one do."""

    key: str | None
    day: dt.date
    model: str | None
    usage: dict[str, int]
    turns: int = 1


@dataclass
class Sum:
    turns: int = 0
    priced_usd: float = 0.0
    unpriced_turns: int = 0
    tokens: dict[str, int] = field(default_factory=dict)

    def add(self, turn: Turn, cost: float | None) -> None:
        self.turns += turn.turns
        if cost is None:
            self.unpriced_turns += turn.turns
        else:
            self.priced_usd += cost
        for k, n in turn.usage.items():
            self.tokens[k] = self.tokens.get(k, 0) + int(n)

    @property
    def cost_usd(self) -> float | None:
        return None if self.unpriced_turns else self.priced_usd

    def view(self) -> dict[str, Any]:
        cost = self.cost_usd
        return {"turns": self.turns, "cost_usd": None if cost is None else round(cost, 6),
                "priced_usd": round(self.priced_usd, 6),
                "unpriced_turns": self.unpriced_turns, "tokens": dict(self.tokens)}


def turn_cost(table: PriceTable, t: Turn) -> float | None:
    price = table.lookup(t.model, t.day)
    return None if price is None else price.cost(t.usage)


def total(table: PriceTable, turns: list[Turn]) -> Sum:
    s = Sum()
    for t in turns:
        s.add(t, turn_cost(table, t))
    return s


def _key(by: str, t: Turn) -> str:
    value = {"day": t.day.isoformat(), "model": t.model}.get(by, t.key)
    return value if value is not None else "-"


def report(table: PriceTable, turns: list[Turn], by: str, *, price_file: str) -> dict[str, Any]:
    """``{"by", "rows": [{"key", turns, cost_usd, ...}], "total", "notes"}``."""
    if by not in GROUPS:
        raise ValueError(f"cannot group costs by {by!r}: one of {', '.join(GROUPS)}")
    groups: dict[str, Sum] = {}
    whole = Sum()
    unpriced: dict[str, int] = {}
    for t in turns:
        cost = turn_cost(table, t)
        if cost is None:
            name = t.model or "(no model reported)"
            unpriced[name] = unpriced.get(name, 0) + t.turns
        groups.setdefault(_key(by, t), Sum()).add(t, cost)
        whole.add(t, cost)
    notes = [f"no price for model {m!r} ({n} turn{'s' if n != 1 else ''}): its cost is "
             f"unknown, not zero; add a [[price]] for it to {price_file}"
             for m, n in sorted(unpriced.items())]
    rows = [{"key": k, **s.view()} for k, s in sorted(groups.items())]
    return {"by": by, "rows": rows, "total": whole.view(), "notes": notes}
