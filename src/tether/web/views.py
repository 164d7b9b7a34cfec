"""What each view of the page shows, as JSON, made from the SDK's replies.

One function per view (``overview``, ``execs``, ``lineages``, ``exec_view``,
``lineage_view``, …), each asking the daemon only for what that view shows: a page of
execs (``exec.list`` with ``limit``/``offset``/filters, newest first), the live
lineages, one lineage's story (``digest.lineage``). Costs and budgets are computed by the
daemon over every turn, so they are asked again only after a turn was journaled
(:class:`Costs`), not at every refresh.

Everything an agent can write (names, reasons, handoff text, a branch name) is passed on
as data; the page puts it in the document as text, never as markup.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec

from tether.client.aio import AsyncClient
from tether.client.replies import CostReport, LineageView
from tether.model.states import LINEAGE_LIVE
from tether.web.watch import Watch

PAGE = 50  # rows per page of the execs and agents views
MAX_PAGE = 500
HANDOFF_MAX = 64 * 1024  # the end of a longer handoff is shown
MAX_CHART = 400  # turns in a lineage's context chart (evenly thinned beyond)
_BRANCH = re.compile(rb"^ref: refs/heads/([^\s]{1,255})\s*$")
EXEC_STATES = ("PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED")
LINEAGE_STATUSES = ("ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT",
                    "FINISHED", "REAPED", "FAILED")


def plain(value: Any) -> Any:
    return msgspec.to_builtins(value)


class Costs:
    """``cost.report`` and ``budget.show``, asked again only once a turn was journaled
    since the last answer (the watch counts them): both add up every turn in the home."""

    def __init__(self, client: AsyncClient, watch: Watch) -> None:
        self.client = client
        self.watch = watch
        self._by: dict[str, tuple[int, CostReport]] = {}
        self._budgets: tuple[int, Any] | None = None

    async def report(self, by: str) -> CostReport:
        gen = self.watch.turns
        got = self._by.get(by)
        if got is None or got[0] != gen:
            got = (gen, await self.client.cost_report(by))  # type: ignore[arg-type]
            self._by[by] = got
        return got[1]

    async def budgets(self) -> Any:
        gen = self.watch.turns
        if self._budgets is None or self._budgets[0] != gen:
            self._budgets = (gen, await self.client.budget_show())
        return self._budgets[1]


def _exec_row(x: Any, names: dict[str, str]) -> dict[str, Any]:
    return {"id": x.id, "name": x.name, "sandbox": x.sandbox,
            "sandbox_name": names.get(x.sandbox, x.sandbox), "state": x.state,
            "argv": x.spec.argv, "tty": x.spec.tty, "cwd": x.spec.cwd,
            "created_at": x.created_at, "started_at": x.started_at, "ended_at": x.ended_at,
            "exit_code": x.exit_code, "signal": x.signal, "reason": x.reason,
            "lineage": x.lineage, "notice": x.notice, "pid": x.pid,
            "terminal": x.state == "RUNNING" and x.spec.tty,
            "agent": plain(x.agent) if x.agent is not None else None}


def _cost_of(row: Any) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"usd": row.cost_usd, "priced_usd": row.priced_usd}


def _lineage_row(lin: LineageView, costs: dict[str, Any], budgets: dict[str, Any],
                 waiting: dict[str, tuple[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = plain(lin)
    out["cost"] = _cost_of(costs.get(lin.id))
    b = budgets.get(lin.id)
    out["budget"] = None if b is None else {"usd": b.budget_usd, "spent_usd": b.spent_usd,
                                            "policy": b.policy}
    w = waiting.get(lin.id) if lin.status == "ACTIVE" else None
    out["waiting"] = None if w is None else {"reason": w[0], "since": w[1]}
    return out


def needs(lineages: list[dict[str, Any]], budgets: Any) -> list[dict[str, Any]]:
    """What waits for a person: ``ask`` revivals, usage limits, budgets reached, agents
    waiting for their user, and the daily budget."""
    out: list[dict[str, Any]] = []
    for lin in lineages:
        base = {"lineage": lin["id"], "name": lin["name"] or lin["id"], "exec": lin["exec"]}
        b = lin["budget"]
        if lin["status"] == "ASK_PENDING":
            out.append({**base, "kind": "ask", "actions": ["revive", "reap-lineage"],
                        "text": "died (revival policy ask): revive it from its last turn, "
                                "or reap it"})
        elif lin["status"] == "WAITING_LIMIT":
            out.append({**base, "kind": "limit", "actions": ["revive", "reap-lineage"],
                        "until": lin["revive_at"],
                        "text": "hit its provider's usage limit: it resumes at the reset "
                                "time"})
        elif b is not None and b["spent_usd"] >= b["usd"] and lin["status"] == "ACTIVE":
            out.append({**base, "kind": "budget", "actions": [], "budget": b,
                        "text": "reached its budget",
                        "command": f"tether budget set USD --lineage {lin['name'] or lin['id']}"})
        elif lin["waiting"] is not None:
            out.append({**base, "kind": "waiting", "actions": ["terminal"] if lin["exec"]
                        else [], "since": lin["waiting"]["since"],
                        "text": f"is waiting for you: {lin['waiting']['reason']}"})
    daily = budgets.daily
    if daily is not None and budgets.spent_today_usd >= daily.budget_usd:
        out.append({"lineage": None, "name": "all agents", "kind": "daily", "actions": [],
                    "text": f"spent ${budgets.spent_today_usd:.2f} on {budgets.day}: the "
                            f"daily budget is ${daily.budget_usd:.2f} ({daily.policy})",
                    "command": "tether budget set USD"})
    return out


async def _names(c: AsyncClient) -> dict[str, str]:
    return {s.id: s.name for s in await c.sandbox_list(all=True)}


async def _lineage_rows(c: AsyncClient, costs: Costs, watch: Watch,
                        lineages: list[LineageView]) -> list[dict[str, Any]]:
    by_lineage = {r.key: r for r in (await costs.report("lineage")).rows}
    budgets = {b.lineage: b for b in (await costs.budgets()).lineages}
    return [_lineage_row(lin, by_lineage, budgets, watch.waiting) for lin in lineages]


async def live_needs(c: AsyncClient, costs: Costs, watch: Watch) -> list[dict[str, Any]]:
    """The "needs you" list alone (the header's count, on every view)."""
    live = await c.lineage_page(statuses=sorted(LINEAGE_LIVE), limit=1000)
    return needs(await _lineage_rows(c, costs, watch, live.lineages), await costs.budgets())


async def overview(c: AsyncClient, costs: Costs, watch: Watch) -> dict[str, Any]:
    """The home view: what needs you, the live agents, the running execs, the sandboxes'
    health and the counts."""
    status = await c.status()
    live = await c.lineage_page(statuses=sorted(LINEAGE_LIVE), limit=200)
    rows = await _lineage_rows(c, costs, watch, live.lineages)
    names = await _names(c)
    running = await c.exec_page(states=["PENDING", "RUNNING"], limit=25)
    recent = await c.exec_page(states=["FINISHED", "FAILED", "CANCELLED"], limit=10)
    return {"status": plain(status), "needs": needs(rows, await costs.budgets()),
            "lineages": rows, "lineages_live": live.total,
            "running": [_exec_row(x, names) for x in running.execs],
            "running_total": running.total,
            "recent": [_exec_row(x, names) for x in recent.execs],
            "sandboxes": await sandboxes(c, status)}


async def sandboxes(c: AsyncClient, status: Any = None) -> list[dict[str, Any]]:
    status = status or await c.status()
    runtimes = plain(status.runtimes)
    out = []
    for s in await c.sandbox_list():
        rt = runtimes.get(s.spec.runtime, {})
        problems = []
        if s.reason and s.state != "READY":
            problems.append(s.reason)
        if rt.get("available") is False or rt.get("connected") is False:
            problems.append(f"runtime unavailable: {rt.get('reason') or 'not connected'}")
        out.append({"id": s.id, "name": s.name, "runtime": s.spec.runtime, "state": s.state,
                    "workspace": s.spec.workspace,
                    "companions": [comp.name for comp in (s.spec.companions or [])],
                    "problems": problems, "created_at": s.created_at})
    return out


def ints(text: str | None, default: int, hi: int) -> int:
    try:
        return max(0, min(hi, int(text))) if text else default
    except ValueError:
        return default


def _choices(text: str | None, allowed: tuple[str, ...]) -> list[str] | None:
    picked = [s for s in (text or "").split(",") if s in allowed]
    return picked or None


async def execs(c: AsyncClient, q: dict[str, str]) -> dict[str, Any]:
    """``/api/execs?states=RUNNING,PENDING&sandbox=S&q=TEXT&offset=N&limit=N``."""
    limit = ints(q.get("limit"), PAGE, MAX_PAGE) or PAGE
    offset = ints(q.get("offset"), 0, 2**31)
    page = await c.exec_page(sandbox=q.get("sandbox") or None,
                             states=_choices(q.get("states"), EXEC_STATES),
                             query=(q.get("q") or "").strip()[:256] or None,
                             limit=limit, offset=offset)
    names = await _names(c)
    return {"execs": [_exec_row(x, names) for x in page.execs], "total": page.total,
            "offset": offset, "limit": limit,
            "sandboxes": sorted(set(names.values()))}


async def lineages(c: AsyncClient, costs: Costs, watch: Watch,
                   q: dict[str, str]) -> dict[str, Any]:
    """``/api/lineages?statuses=ACTIVE&q=TEXT&offset=N&limit=N``."""
    limit = ints(q.get("limit"), PAGE, MAX_PAGE) or PAGE
    offset = ints(q.get("offset"), 0, 2**31)
    page = await c.lineage_page(statuses=_choices(q.get("statuses"), LINEAGE_STATUSES),
                                query=(q.get("q") or "").strip()[:256] or None,
                                limit=limit, offset=offset)
    return {"lineages": await _lineage_rows(c, costs, watch, page.lineages),
            "total": page.total, "offset": offset, "limit": limit}


async def exec_view(c: AsyncClient, ref: str) -> dict[str, Any]:
    x = await c.exec_get(ref)
    names = await _names(c)
    out = _exec_row(x, names)
    out["env"] = sorted(x.spec.env)  # names only: the values never leave the monitor
    out["timeout"] = x.spec.timeout
    lin = await c.lineage_get(x.lineage) if x.lineage else None
    out["lineage_name"] = lin.name if lin is not None else None
    out["lineage_current"] = lin is not None and lin.exec == x.id
    return out


def _thin(points: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    if len(points) <= most:
        return points
    step = len(points) / most
    return [points[int(i * step)] for i in range(most - 1)] + [points[-1]]


def _attempt(n: int, x: Any, sandbox: str, cost: Any) -> dict[str, Any]:
    return {"n": n, "exec": x.id, "name": x.name, "sandbox": sandbox, "state": x.state,
            "created_at": x.created_at, "started_at": x.started_at, "ended_at": x.ended_at,
            "exit_code": x.exit_code, "signal": x.signal, "reason": x.reason,
            "never_started": x.never_started, "turns": 0, "first_turn": None,
            "last_turn": None, "exit_reason": None, "exit_detail": None,
            "revived_because": None, "cost": _cost_of(cost)}


async def lineage_view(c: AsyncClient, costs: Costs, watch: Watch,
                       home: Path, ref: str) -> dict[str, Any]:
    """One agent: its attempts as a timeline (turns and context % over time, revivals
    and why, exit reasons, cost), its last handoff, worktree and branch, what it needs."""
    story = await c.digest_lineage(ref)
    lin = story.lineage
    (row,) = await _lineage_rows(c, costs, watch, [lin])
    by_attempt = {r.key: r for r in (await costs.report("attempt")).rows}
    names = await _names(c)
    attempts: list[dict[str, Any]] = []
    index: dict[str, dict[str, Any]] = {}
    for n, x in enumerate(story.attempts, 1):
        attempt = _attempt(n, x, names.get(x.sandbox, x.sandbox), by_attempt.get(x.id))
        attempts.append(attempt)
        index[x.id] = attempt
    chart: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    why: str | None = None  # the death that made the next attempt a revival
    for ev in story.events:
        a = index.get(ev.exec or "")
        if ev.type == "agent.turn":
            turn = ev.data.get("turn")
            if a is not None:
                a["turns"] += 1
                a["first_turn"] = a["first_turn"] or turn
                a["last_turn"] = turn
            chart.append({"time": ev.time, "turn": turn, "pct": ev.data.get("context_pct"),
                          "attempt": a["n"] if a else None})
        elif ev.type == "lineage.state":
            num = ev.data.get("attempt")
            changes.append({"time": ev.time, "state": ev.state, "reason": ev.reason,
                            "attempt": num if isinstance(num, int) else a["n"] if a else None})
            if ev.state == "ORPHANED" and a is not None:
                a["exit_reason"] = ev.data.get("exit_reason")
                a["exit_detail"] = ev.data.get("exit_detail")
                why = ev.reason
            elif ev.state == "REVIVING":
                nxt = ev.data.get("attempt")
                if isinstance(nxt, int) and 1 <= nxt <= len(attempts):
                    attempts[nxt - 1]["revived_because"] = why or ev.reason
            elif ev.state in ("FINISHED", "FAILED", "REAPED") and a is not None:
                a["exit_reason"] = a["exit_reason"] or ev.data.get("exit_reason")
        elif ev.type in ("agent.lifecycle", "agent.waiting", "agent.handoff", "agent.fenced",
                         "agent.session", "lineage.setup"):
            changes.append({"time": ev.time, "type": ev.type, "state": ev.state,
                            "reason": ev.reason, "attempt": a["n"] if a else None})
    if attempts and attempts[-1]["exit_reason"] is None and lin.exit_reason \
            and lin.status not in ("ACTIVE", "REVIVING"):
        attempts[-1]["exit_reason"] = lin.exit_reason
    return {"lineage": row, "attempts": attempts, "chart": _thin(chart, MAX_CHART),
            "changes": changes[-200:], "needs": needs([row], await costs.budgets())
            if row["status"] in LINEAGE_LIVE else [],
            "handoff": read_handoff(home, lin.id) if lin.has_handoff else None,
            "branch": branch_of(lin.worktree) if lin.worktree else None}


def read_handoff(home: Path, lineage: str) -> dict[str, Any] | None:
    """The lineage's last handoff (``drain/<id>.handoff.md``), its end if it is long."""
    path = home / "drain" / f"{lineage}.handoff.md"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        f.seek(max(0, st.st_size - HANDOFF_MAX))
        data = f.read(HANDOFF_MAX)
    return {"text": data.decode("utf-8", "replace"), "size": st.st_size,
            "truncated": st.st_size > HANDOFF_MAX, "mtime": st.st_mtime}


def branch_of(worktree: str) -> str | None:
    """The branch checked out in a worktree, from its ``HEAD`` file: read, never run
    (the agent writes that tree, git config included, so no git command runs in it)."""
    dotgit = os.path.join(worktree, ".git")
    head = os.path.join(dotgit, "HEAD")
    try:
        if not os.path.isdir(dotgit):
            text = _small(dotgit)
            if not text.startswith(b"gitdir: "):
                return None
            gitdir = text[8:].strip().decode("utf-8", "replace")
            head = os.path.join(os.path.join(worktree, gitdir) if not os.path.isabs(gitdir)
                                else gitdir, "HEAD")
        m = _BRANCH.match(_small(head))
    except OSError:
        return None
    return m.group(1).decode("utf-8", "replace") if m else None


def _small(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(4096)
