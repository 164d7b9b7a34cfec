"""Cost accounting and budgets.

Costs are computed when asked, from the journal's ``agent.turn`` events (their ``usage``
and ``model``) and the price table (``tether.cost``): nothing but budgets is stored, so
a corrected ``<home>/prices.toml`` corrects every figure, past ones too.

Budgets: a lineage's own (``agent.start`` ``budget_usd``, changed by ``budget.set``) and
a daily one over every agent (``budget.set``, else ``TETHER_BUDGET_DAILY_USD``). When a
turn's end finds one reached, ``agent.budget`` is journaled once per crossing (its key:
scope, lineage or day, and amount, checked in the appending transaction), and then the
policy applies: ``pause`` denies the agent's tool calls (Claude's PreToolUse hook) with a
reason naming the budget; ``stop`` stops the agent (its lineage ends FINISHED, exit
reason ``budget``). A crossing lost to a crash between the turn's commit and its event
is found again at the next check: at start-up, at the next tool call or turn.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.cost import prices as px
from tether.cost import report as rp
from tether.daemon.clock import Clock
from tether.daemon.execs import ExecService
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.tasks import Tasks
from tether.model.errors import RpcCode, TetherError
from tether.model.records import Event, LineageRecord
from tether.model.states import EXEC_TERMINAL
from tether.store.cost import TOKENS, CostTables, Sums
from tether.store.sqlite import Store

log = logging.getLogger("tether.cost")

DAILY = "daily"
POLICIES = ("pause", "stop")
#: Turns are summed per quarter hour where the day must follow the zone exactly (every
#: UTC offset is a multiple of 15 minutes), else per day at the zone's offset now.
QUARTER, DAY = 900.0, 86400.0
BUDGET_PREFIX = "budget: "  # an exec cancelled for its budget says so in its reason


@dataclass(frozen=True)
class Over:
    """A budget reached: which, by how much, and what to do."""

    scope: str  # "lineage" or "daily"
    key: str  # the crossing's identity: one agent.budget event per key
    budget_usd: float
    spent_usd: float
    policy: str
    reason: str

    def data(self, rec: LineageRecord) -> dict[str, Any]:
        return {"key": self.key, "scope": self.scope, "lineage": rec.id,
                "budget_usd": self.budget_usd, "spent_usd": round(self.spent_usd, 6),
                "policy": self.policy}


def _money(v: float) -> str:
    return f"${v:,.2f}"


class CostService:
    def __init__(self, store: Store, home: Path, journal: Journal, execs: ExecService,
                 tasks: Tasks, clock: Clock, faults: Faults, *, tz: dt.tzinfo,
                 daily_usd: float | None, daily_policy: str) -> None:
        self.tables = CostTables(store)
        self.store = store
        self.override = home / "prices.toml"
        self.journal = journal
        self.execs = execs
        self.tasks = tasks
        self.clock = clock
        self.faults = faults
        self.tz = tz
        self.default_daily = (daily_usd, daily_policy) if daily_usd is not None else None
        self._budgets = self.tables.budgets()  # category C: reloaded at every budget.set
        self._table: tuple[tuple[float, int] | None, px.PriceTable] | None = None
        self._fallback: px.PriceTable | None = None  # the shipped one, while no good table
        # Spend, computed once from the journal, then kept current by each turn's end:
        # lineage -> (the price table used, dollars); (day, table, dollars). The table
        # itself, compared by identity: a new one (the override changed) starts over.
        self._lineage_spent: dict[str, tuple[px.PriceTable, float]] = {}
        self._daily_spent: tuple[dt.date, px.PriceTable, float] | None = None

    # ------------------------------------------------------------------ prices
    def prices(self) -> px.PriceTable:
        """The table, reloaded when ``<home>/prices.toml`` changes. Raises
        :class:`TetherError` ``BAD_PRICES`` naming the file and key of a bad override."""
        try:
            st = os.stat(self.override)
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if self._table is None or self._table[0] != stamp:
            try:
                self._table = (stamp, px.load(self.override))
            except px.PriceError as e:
                raise TetherError(RpcCode.INVALID_PARAMS, "BAD_PRICES",
                                  f"{e}; fix it (or remove it to use the shipped prices)",
                                  {"file": str(self.override)}) from None
        return self._table[1]

    def _prices_for_budgets(self) -> px.PriceTable:
        """Budgets keep working on the last good table (else the shipped one) while an
        override is broken."""
        try:
            return self.prices()
        except TetherError as e:
            if self._table is not None:
                return self._table[1]
            if self._fallback is None:
                log.warning("budgets use the shipped prices: %s", e.message)
                self._fallback = px.load(None)
            return self._fallback

    def table(self) -> px.PriceTable:
        """The price table budgets use (the last good one while an override is broken):
        also where a turn's usage limits come from."""
        return self._prices_for_budgets()

    # ------------------------------------------------------------------ reports
    def _day(self, t: float) -> dt.date:
        return dt.datetime.fromtimestamp(t, self.tz).date()

    def _start_of(self, day: dt.date) -> float:
        return dt.datetime.combine(day, dt.time.min, tzinfo=self.tz).timestamp()

    def _shift(self) -> float:
        off = dt.datetime.now(self.tz).utcoffset()
        return off.total_seconds() if off is not None else 0.0

    def _turns(self, sums: list[Sums], bucket: float, shift: float) -> list[rp.Turn]:
        epoch = dt.date(1970, 1, 1)
        return [rp.Turn(key=key, model=model, turns=n, usage=usage,
                        day=self._day(b * bucket) if bucket == QUARTER
                        else epoch + dt.timedelta(days=b))
                for key, model, b, n, usage in sums]

    async def report(self, by: str, since: float | None) -> dict[str, Any]:
        """``cost.report``: every turn since ``since`` summed in SQL and priced, in a
        worker thread with a read connection of its own (``Store.reads``): a year of
        turns takes a second to sum, and the loop serves meanwhile."""
        if by not in rp.GROUPS:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"cannot group costs by {by!r}: one of {', '.join(rp.GROUPS)}")
        table = self.prices()
        key = by if by in ("attempt", "lineage", "sandbox") else "none"
        bucket, shift = (QUARTER, 0.0) if by == "day" else (DAY, self._shift())

        def build(db: Any) -> dict[str, Any]:  # in the worker: the table is immutable
            sums = self.tables.turn_sums(key, since=since or 0.0, until=None, bucket=bucket,
                                         shift=shift, db=db)
            return rp.report(table, self._turns(sums, bucket, shift), by,
                             price_file=str(self.override))
        out = await self.store.reads(build)
        out["since"] = since
        out["price_files"] = table.files
        return out

    # ------------------------------------------------------------------ budgets
    def lineage_budget(self, rec: LineageRecord) -> tuple[float, str] | None:
        row = self._budgets.get(f"lineage:{rec.id}")
        if row is not None:
            return row
        if rec.config.budget_usd is not None:
            return rec.config.budget_usd, rec.config.budget_policy
        return None

    def daily_budget(self) -> tuple[float, str] | None:
        return self._budgets.get(DAILY, self.default_daily)

    def lineage_spent(self, rec: LineageRecord, table: px.PriceTable) -> float:
        cached = self._lineage_spent.get(rec.id)
        if cached is not None and cached[0] is table:
            return cached[1]
        spent = self._lineage_sum(rec, table).priced_usd
        self._lineage_spent[rec.id] = (table, spent)
        return spent

    def _lineage_sum(self, rec: LineageRecord, table: px.PriceTable) -> rp.Sum:
        shift = self._shift()
        ids = [x.id for x in self.store.list_execs_of_lineage(rec.id)]
        sums = self.tables.exec_turn_sums(ids, bucket=DAY, shift=shift)
        return rp.total(table, self._turns(sums, DAY, shift))

    def day_spent(self, day: dt.date, table: px.PriceTable) -> float:
        c = self._daily_spent
        if c is not None and c[0] == day and c[1] is table:
            return c[2]
        spent = self._day_sum(day, table).priced_usd
        self._daily_spent = (day, table, spent)
        return spent

    def _day_sum(self, day: dt.date, table: px.PriceTable) -> rp.Sum:
        start, end = self._start_of(day), self._start_of(day + dt.timedelta(days=1))
        sums = self.tables.turn_sums("none", since=start, until=end, bucket=QUARTER)
        return rp.total(table, self._turns(sums, QUARTER, 0.0))

    def _count(self, rec: LineageRecord, model: str | None, usage: dict[str, int],
               at: float) -> None:
        """A committed turn, added to the spend already computed (never recomputed)."""
        if self._table is None:
            return
        table = self._table[1]
        price = table.lookup(model, self._day(at))
        cost = price.cost({k: v for k, v in usage.items() if k in TOKENS}) if price else 0.0
        mine = self._lineage_spent.get(rec.id)
        if mine is not None and mine[0] is table:
            self._lineage_spent[rec.id] = (mine[0], mine[1] + cost)
        c = self._daily_spent
        if c is not None and c[0] == self._day(at) and c[1] is table:
            self._daily_spent = (c[0], c[1], c[2] + cost)

    def over(self, rec: LineageRecord) -> list[Over]:
        """The budgets ``rec`` is over now (unpriced turns count as nothing: see
        STATE.md Known limits)."""
        mine, daily = self.lineage_budget(rec), self.daily_budget()
        if mine is None and daily is None:
            return []
        table = self._prices_for_budgets()
        out: list[Over] = []
        if mine is not None:
            spent = self.lineage_spent(rec, table)
            if spent >= mine[0]:
                who = rec.name or rec.id
                out.append(Over(
                    "lineage", f"lineage:{rec.id}:{mine[0]:g}", mine[0], spent, mine[1],
                    f"agent {who} spent {_money(spent)} of its {_money(mine[0])} budget; "
                    f"raise it with `tether budget set AMOUNT --lineage {rec.id}`"))
        if daily is not None:
            day = self._day(self.clock.now())
            spent = self.day_spent(day, table)
            if spent >= daily[0]:
                out.append(Over(
                    DAILY, f"daily:{day.isoformat()}:{daily[0]:g}", daily[0], spent, daily[1],
                    f"agents spent {_money(spent)} on {day.isoformat()}, the daily budget is "
                    f"{_money(daily[0])}; raise it with `tether budget set AMOUNT` or wait "
                    f"for the next day"))
        return out

    def enforce(self, rec: LineageRecord,
                turn: tuple[str | None, dict[str, int]] | None = None) -> list[Over]:
        """Check ``rec``'s budgets (after a turn of ``(model, usage)`` was committed):
        journal each new crossing once, stop the agent when a reached budget's policy says
        ``stop``. Returns the budgets reached."""
        if turn is not None:
            self._count(rec, turn[0], turn[1], time.time())
            self.faults.hit("cost.before_crossing")
        reached = self.over(rec)
        for o in reached:
            ev = self.tables.record_crossing(rec.config.sandbox, rec.exec_id,
                                             BUDGET_PREFIX + o.reason, o.data(rec))
            if ev is not None:
                self.journal.bus.publish(ev)
                log.warning("agent.budget: %s", o.reason)
        stop = next((o for o in reached if o.policy == "stop"), None)
        if stop is not None and rec.exec_id and self.tasks.open:
            self.tasks.spawn(self._stop(rec.exec_id, stop), name=f"budget-stop-{rec.id}")
        return reached

    async def _stop(self, exec_id: str, o: Over) -> None:
        try:
            x = self.store.get_exec(exec_id)
            if x is not None and x.state not in EXEC_TERMINAL:
                await self.execs.cancel(x, signal.SIGTERM, 5.0, BUDGET_PREFIX + o.reason)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("stopping exec %s for its budget failed", exec_id)

    def recover(self, lineages: list[LineageRecord]) -> int:
        """At start: journal the crossings a crash lost (and stop agents whose policy
        says so). Returns how many lineages are over a budget."""
        return sum(1 for rec in lineages if self.enforce(rec))

    def set_budget(self, *, usd: float | None, policy: str, lineage: str | None) -> Event:
        scope = f"lineage:{lineage}" if lineage else DAILY
        what = f"lineage {lineage}'s budget" if lineage else "the daily budget"
        reason = (f"{what} cleared" if usd is None else
                  f"{what} set to {_money(usd)} (policy {policy})")
        ev = self.tables.set_budget(scope, usd, policy, reason)
        self.journal.bus.publish(ev)
        self._budgets = self.tables.budgets()
        return ev

    def show(self, lineages: list[LineageRecord]) -> dict[str, Any]:
        table = self.prices()
        day = self._day(self.clock.now())
        daily = self.daily_budget()
        today = self._day_sum(day, table)  # with its unpriced turns: never shown as free
        out: dict[str, Any] = {
            "day": day.isoformat(), "spent_today_usd": round(today.priced_usd, 6),
            "unpriced_today": today.unpriced_turns,
            "daily": None if daily is None else {"budget_usd": daily[0], "policy": daily[1]},
            "lineages": []}
        for rec in lineages:
            mine = self.lineage_budget(rec)
            if mine is not None:
                spent = self._lineage_sum(rec, table)
                out["lineages"].append({
                    "lineage": rec.id, "name": rec.name, "status": rec.status,
                    "budget_usd": mine[0], "policy": mine[1],
                    "spent_usd": round(spent.priced_usd, 6),
                    "unpriced_turns": spent.unpriced_turns})
        return out
