"""``tether cost``: what agents' turns cost; ``tether budget``: caps on it."""

from __future__ import annotations

import datetime as dt
import re
import time

import click

from tether.cli import output as out
from tether.cli.context import client, die
from tether.client.replies import Budgets, CostSum

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float) -> float:
    """``7d``, ``12h``, ``30m`` (ago), or a date ``2026-11-01`` (local midnight)."""
    m = _SPAN.match(text.strip())
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return dt.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        die(f"--since {text!r}: give a span (7d, 12h, 30m) or a date (2026-11-01)", 2)


def _money(s: CostSum) -> str:
    if s.cost_usd is not None:
        return f"${s.cost_usd:,.4f}"
    return "unknown" + (f" (>= ${s.priced_usd:,.4f})" if s.priced_usd else "")


def _tokens(s: CostSum) -> str:
    t = s.tokens
    return (f"in {t.get('input_tokens', 0):,}  out {t.get('output_tokens', 0):,}  "
            f"cache r/w {t.get('cache_read_tokens', 0):,}/{t.get('cache_creation_tokens', 0):,}")


@click.command()
@click.option("--by", type=click.Choice(["lineage", "day", "sandbox", "attempt", "model"]),
              default="lineage", show_default=True, help="group the spend by this")
@click.option("--since", default=None, metavar="7d|DATE",
              help="only turns from then on (a span ago, or a date)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def cost(ctx: click.Context, by: str, since: str | None, as_json: bool) -> None:
    """What agents' turns cost, priced by the table (`<home>/prices.toml` overrides it).

    A turn whose model has no price is shown as unknown, never as free."""
    start = parse_since(since, time.time()) if since else None
    rep = client(ctx).cost_report(by, since=start)  # type: ignore[arg-type]
    if as_json:
        out.emit_json(rep)
        return
    width = max([len(by), *(len(r.key) for r in rep.rows)])
    click.echo(f"{by.upper():<{width}}  {'TURNS':>6}  {'COST':>14}  TOKENS")
    for row in rep.rows:
        click.echo(f"{row.key:<{width}}  {row.turns:>6}  {_money(row):>14}  {_tokens(row)}")
    click.echo(f"{'total':<{width}}  {rep.total.turns:>6}  {_money(rep.total):>14}  "
               f"{_tokens(rep.total)}")
    for n in rep.notes:
        out.note(n)


def _spent(usd: float, unpriced: int) -> str:
    """Dollars spent; with turns no price covers, unknown (never shown as free)."""
    if not unpriced:
        return f"${usd:,.4f}"
    return (f"unknown (>= ${usd:,.4f}; {unpriced} turn{'s' if unpriced != 1 else ''} of a "
            "model without a price)")


def _show(b: Budgets) -> None:
    daily = (f"${b.daily.budget_usd:,.2f} a day ({b.daily.policy})" if b.daily
             else "none (`tether budget set AMOUNT`)")
    click.echo(f"daily budget: {daily}; spent on {b.day}: "
               f"{_spent(b.spent_today_usd, b.unpriced_today)}")
    for lb in b.lineages:
        click.echo(f"lineage {lb.lineage}{f' ({lb.name})' if lb.name else ''}  {lb.status}  "
                   f"{_spent(lb.spent_usd, lb.unpriced_turns)} of ${lb.budget_usd:,.2f} "
                   f"({lb.policy})")
    if b.unpriced_today or any(lb.unpriced_turns for lb in b.lineages):
        out.note("a budget counts only what is priced: add a [[price]] for the model to "
                 "<home>/prices.toml (`tether cost` names it)")


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def budget(ctx: click.Context, as_json: bool) -> None:
    """Cost budgets: a daily one over every agent, and per lineage (`tether run --budget`).

    Reaching one journals `agent.budget`; policy pause denies the agent's tool calls,
    stop stops it."""
    if ctx.invoked_subcommand is None:
        b = client(ctx).budget_show()
        out.emit_json(b) if as_json else _show(b)


@budget.command("set")
@click.argument("amount", type=click.FloatRange(min=0, min_open=True))
@click.option("--lineage", default=None, help="this lineage's budget (default: the daily one)")
@click.option("--policy", type=click.Choice(["pause", "stop"]), default="pause",
              show_default=True, help="at the budget, deny tool calls or stop the agent")
@click.pass_context
def budget_set(ctx: click.Context, amount: float, lineage: str | None, policy: str) -> None:
    """Set the daily budget (dollars), or a lineage's."""
    _show(client(ctx).budget_set(amount, policy=policy, lineage=lineage))  # type: ignore[arg-type]


@budget.command("clear")
@click.option("--lineage", default=None, help="this lineage's (back to its --budget)")
@click.pass_context
def budget_clear(ctx: click.Context, lineage: str | None) -> None:
    """Remove the daily budget, or a lineage's change to its budget."""
    _show(client(ctx).budget_set(None, lineage=lineage))
