"""Rendering for the CLI: rich tables for people, JSON for programs, errors on stderr.

rich is imported only when something is rendered with it (a table, an error): it costs
more than the rest of a command's start-up, and ``status``, ``logs`` or ``--json`` never
need it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import shlex
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tether.client.replies import ExecView, LineageView
    from tether.model.records import Event, SandboxRecord


@functools.cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _console() -> Console:
    from rich.console import Console

    # Piped output keeps whole ids instead of rich's 80-column default.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)


def _table() -> Table:
    from rich.table import Table

    return Table(box=None, pad_edge=False, header_style="bold")


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def emit_json(obj: Any) -> None:
    """``obj``'s JSON on one line; a reply struct as the daemon sent it (its fields in
    order, none left out: the reply structs round-trip)."""
    sys.stdout.write(json.dumps(msgspec.to_builtins(obj), indent=None, sort_keys=False) + "\n")


def fail(message: str, hint: str | None = None) -> None:
    err_console().print(f"[bold red]tether:[/] {message}", markup=True, soft_wrap=True)
    if hint:
        err_console().print(f"  {hint}", soft_wrap=True)


def note(message: str) -> None:
    err_console().print(f"[dim]tether:[/] {message}", markup=True, soft_wrap=True)


def exec_row(x: ExecView) -> dict[str, Any]:
    """The fields `tether ps --json` promises."""
    return {
        "id": x.id, "name": x.name, "sandbox": x.sandbox, "state": x.state,
        "exit_code": x.exit_code, "signal": x.signal, "pid": x.pid,
        "started_at": x.started_at, "ended_at": x.ended_at,
        "reason": x.reason, "argv": x.spec.argv, "agent": x.agent,
    }


def exec_table(execs: Iterable[ExecView]) -> None:
    rows = list(execs)
    agents = any(x.agent for x in rows)
    t = _table()
    cols = ["ID", "NAME", "SANDBOX", "STATE", "EXIT", "PID", "STARTED"]
    if agents:
        cols += ["LINEAGE", "LIFECYCLE", "HEARTBEAT", "CTX", "TURNS", "REVIVALS"]
    for col in [*cols, "COMMAND"]:
        t.add_column(col, overflow="fold" if col == "COMMAND" else "ellipsis", no_wrap=True)
    for x in rows:
        code = x.exit_code
        sig = x.signal
        exit_s = str(code) if code is not None else (f"sig{sig}" if sig else "-")
        cells = [x.id, x.name or "-", x.sandbox, x.state, exit_s,
                 str(x.pid or "-"), when(x.started_at)]
        if agents:
            a = x.agent
            if a is None:
                cells += ["-", "-", "-", "-", "-", "-"]
            else:
                pct = a.context_pct
                # A lineage that is not running shows why (e.g. WAITING_LIMIT).
                who = a.lineage if a.status == "ACTIVE" else f"{a.lineage} {a.status}"
                cells += [who or "-", a.lifecycle or "-", a.heartbeat or "-",
                          f"{pct:.0f}%" if pct is not None else "-",
                          str(a.turns), str(a.revivals)]
        t.add_row(*cells, shlex.join(x.spec.argv)[:60])
    _console().print(t)


def lineage_table(rows: Iterable[LineageView]) -> None:
    t = _table()
    for col in ("LINEAGE", "NAME", "PROVIDER", "STATUS", "LIFECYCLE", "HEARTBEAT", "CTX",
                "TURNS", "REVIVALS", "EXEC", "EXIT", "REASON"):
        t.add_column(col, no_wrap=col != "REASON")
    for r in rows:
        pct = r.context_pct
        t.add_row(r.id, r.name or "-", r.provider, r.status, r.lifecycle,
                  r.heartbeat or "-", f"{pct:.0f}%" if pct is not None else "-",
                  str(r.turns), str(r.revivals), r.exec or "-", r.exit_reason or "-",
                  (r.reason or "")[:70])
    _console().print(t)


def sandbox_table(sbs: Iterable[SandboxRecord]) -> None:
    t = _table()
    for col in ("ID", "NAME", "STATE", "RUNTIME", "WORKSPACE", "CREATED"):
        t.add_column(col, no_wrap=True)
    for s in sbs:
        t.add_row(s.id, s.name, s.state, s.spec.runtime, s.spec.workspace or "-",
                  when(s.created_at))
    _console().print(t)


def event_line(ev: Event) -> str:
    parts = [f"{ev.gseq:>6}", f"{ev.sandbox or '(daemon)'}#{ev.seq}", when(ev.time), ev.type]
    if ev.exec:
        parts.append(ev.exec)
    if ev.state:
        parts.append(ev.state)
    data = ev.data or {}
    if ev.type.startswith("daemon."):
        rec = data.get("recovery", data)
        parts += [f"{k}={rec[k]}" for k in ("adopted", "finished", "failed", "ms") if k in rec]
        if "pid" in data:
            parts.append(f"pid={data['pid']}")
    if "exit_code" in data:
        parts.append(f"exit={data['exit_code']}")
    if "signal" in data:
        parts.append(f"signal={data['signal']}")
    if ev.reason:
        parts.append(f"({ev.reason})")
    return "  ".join(parts)
