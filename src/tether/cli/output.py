"""Rendering for the CLI: rich tables for people, JSON for programs, errors on stderr."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

err_console = Console(stderr=True, highlight=False)


def _console() -> Console:
    # Piped output keeps whole ids instead of rich's 80-column default.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=None, sort_keys=False) + "\n")


def fail(message: str, hint: str | None = None) -> None:
    err_console.print(f"[bold red]tether:[/] {message}", markup=True, soft_wrap=True)
    if hint:
        err_console.print(f"  {hint}", soft_wrap=True)


def note(message: str) -> None:
    err_console.print(f"[dim]tether:[/] {message}", markup=True, soft_wrap=True)


def exec_row(x: dict[str, Any]) -> dict[str, Any]:
    """The fields `tether ps --json` promises."""
    return {
        "id": x["id"], "name": x.get("name"), "sandbox": x["sandbox"], "state": x["state"],
        "exit_code": x.get("exit_code"), "signal": x.get("signal"), "pid": x.get("pid"),
        "started_at": x.get("started_at"), "ended_at": x.get("ended_at"),
        "reason": x.get("reason"), "argv": x["spec"]["argv"], "agent": x.get("agent"),
    }


def exec_table(execs: Iterable[dict[str, Any]]) -> None:
    rows = list(execs)
    agents = any(x.get("agent") for x in rows)
    t = Table(box=None, pad_edge=False, header_style="bold")
    cols = ["ID", "NAME", "SANDBOX", "STATE", "EXIT", "PID", "STARTED"]
    if agents:
        cols += ["LINEAGE", "LIFECYCLE", "HEARTBEAT", "CTX", "TURNS", "REVIVALS"]
    for col in [*cols, "COMMAND"]:
        t.add_column(col, overflow="fold" if col == "COMMAND" else "ellipsis", no_wrap=True)
    for x in rows:
        code = x.get("exit_code")
        sig = x.get("signal")
        exit_s = str(code) if code is not None else (f"sig{sig}" if sig else "-")
        cells = [x["id"], x.get("name") or "-", x["sandbox"], x["state"], exit_s,
                 str(x.get("pid") or "-"), when(x.get("started_at"))]
        if agents:
            a = x.get("agent") or {}
            pct = a.get("context_pct")
            cells += [a.get("lineage") or "-", a.get("lifecycle") or "-",
                      a.get("heartbeat") or "-", f"{pct:.0f}%" if pct is not None else "-",
                      str(a.get("turns", "-")), str(a.get("revivals", "-"))]
        t.add_row(*cells, shlex.join(x["spec"]["argv"])[:60])
    _console().print(t)


def lineage_table(rows: Iterable[dict[str, Any]]) -> None:
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("LINEAGE", "NAME", "PROVIDER", "STATUS", "LIFECYCLE", "HEARTBEAT", "CTX",
                "TURNS", "REVIVALS", "EXEC", "REASON"):
        t.add_column(col, no_wrap=col != "REASON")
    for r in rows:
        pct = r.get("context_pct")
        t.add_row(r["id"], r.get("name") or "-", r["provider"], r["status"], r["lifecycle"],
                  r.get("heartbeat") or "-", f"{pct:.0f}%" if pct is not None else "-",
                  str(r["turns"]), str(r["revivals"]), r.get("exec") or "-",
                  (r.get("reason") or "")[:70])
    _console().print(t)


def sandbox_table(sbs: Iterable[dict[str, Any]]) -> None:
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("ID", "NAME", "STATE", "RUNTIME", "WORKSPACE", "CREATED"):
        t.add_column(col, no_wrap=True)
    for s in sbs:
        t.add_row(s["id"], s["name"], s["state"], s["spec"].get("runtime", "process"),
                  s["spec"].get("workspace") or "-", when(s.get("created_at")))
    _console().print(t)


def event_line(ev: dict[str, Any]) -> str:
    parts = [f"{ev['gseq']:>6}", f"{ev.get('sandbox') or '(daemon)'}#{ev['seq']}",
             when(ev["time"]), ev["type"]]
    if ev.get("exec"):
        parts.append(ev["exec"])
    if ev.get("state"):
        parts.append(ev["state"])
    data = ev.get("data") or {}
    if ev["type"].startswith("daemon."):
        rec = data.get("recovery", data)
        parts += [f"{k}={rec[k]}" for k in ("adopted", "finished", "failed", "ms") if k in rec]
        if "pid" in data:
            parts.append(f"pid={data['pid']}")
    if "exit_code" in data:
        parts.append(f"exit={data['exit_code']}")
    if "signal" in data:
        parts.append(f"signal={data['signal']}")
    if ev.get("reason"):
        parts.append(f"({ev['reason']})")
    return "  ".join(parts)
