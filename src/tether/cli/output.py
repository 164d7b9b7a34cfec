"""Rendering for the CLI: rich tables for people, JSON for programs, errors on stderr.

rich is imported only when something is rendered with it (a table, an error): it costs
more than the rest of a command's start-up, and ``status``, ``logs`` or ``--json`` never
need it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.cli import pstable
from tether.cli.pstable import when as when  # re-exported: commands use out.when

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tether.cli.terminal import EscapeStripper
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


def emit_json(obj: Any) -> None:
    """``obj``'s JSON on one line; a reply struct as the daemon sent it (its fields in
    order, none left out: the reply structs round-trip)."""
    sys.stdout.write(json.dumps(msgspec.to_builtins(obj), indent=None, sort_keys=False) + "\n")


def fail(message: str, hint: str | None = None) -> None:
    from rich.markup import escape  # a message's brackets (`[[price]]`) are its own

    err_console().print(f"[bold red]tether:[/] {escape(message)}", markup=True, soft_wrap=True)
    if hint:
        err_console().print(f"  {hint}", markup=False, soft_wrap=True)


def note(message: str) -> None:
    from rich.markup import escape

    err_console().print(f"[dim]tether:[/] {escape(message)}", markup=True, soft_wrap=True)


def exec_row(x: ExecView) -> dict[str, Any]:
    """The fields `tether ps --json` promises (``pstable.exec_row``)."""
    return pstable.exec_row(msgspec.to_builtins(x))


def exec_table(execs: Iterable[ExecView], names: dict[str, str] | None = None) -> None:
    """``names``: sandbox id -> name (:func:`pstable.sandbox_names`), shown for the id."""
    cols, rows = pstable.exec_cells([msgspec.to_builtins(x) for x in execs], names)
    t = _table()
    for col in cols:
        t.add_column(col, overflow="fold" if col == "COMMAND" else "ellipsis", no_wrap=True)
    for cells in rows:
        t.add_row(*cells)
    _console().print(t)


def lineage_table(rows: Iterable[LineageView]) -> None:
    t = _table()
    for col in ("LINEAGE", "NAME", "PROVIDER", "STATUS", "LIFECYCLE", "HEARTBEAT", "CTX",
                "TURNS", "REVIVALS", "EXEC", "EXIT", "REASON"):
        t.add_column(col, no_wrap=col != "REASON")
    for r in rows:
        pct = r.context_pct
        t.add_row(r.id, r.name or "-", r.provider, r.status,
                  pstable.lifecycle_cell(r.status, r.lifecycle),
                  r.heartbeat or "-", f"{pct:.0f}%" if pct is not None else "-",
                  str(r.turns), str(r.revivals), r.exec or "-", r.exit_reason or "-",
                  (r.reason or "")[:70])
    _console().print(t)


def lineage_detail(r: dict[str, Any]) -> None:
    """``lineage inspect`` for people: one fact a line, as ``systemctl status`` does
    (``--json`` prints the record itself)."""
    def line(label: str, *parts: Any) -> None:
        text = ", ".join(str(p) for p in parts if p is not None and p != "")
        if text:
            sys.stdout.write(f"{label:<10}{text}\n")

    def count(n: int | None, noun: str) -> str | None:
        return f"{n} {noun}{'' if n == 1 else 's'}" if n else None

    def opt(prefix: str, value: Any) -> str | None:
        return f"{prefix}{value}" if value not in (None, "", False) else None

    pct = r.get("context_pct")
    usage = r.get("usage") or {}
    line("lineage", r["id"] + (f" ({r['name']})" if r.get("name") else ""))
    line("provider", r.get("provider"), opt("revival ", r.get("revival")),
         opt("model ", r.get("model")))
    line("status", r.get("status"), opt("lifecycle ", r.get("lifecycle")),
         opt("heartbeat ", r.get("heartbeat")))
    line("attempt", f"{r.get('attempt', 0)}" + (f" (exec {r['exec']})" if r.get("exec")
                                                  else ""),
         count(r.get("revivals"), "revival") or "0 revivals",
         count(r.get("limit_waits"), "usage-limit wait"),
         count(r.get("fenced_exits"), "fenced exit"))
    line("turns", r.get("turns", 0), f"context {pct:.0f}%" if pct is not None else None)
    if usage:
        short = {"input_tokens": "in", "output_tokens": "out",
                 "cache_read_tokens": "cache read", "cache_creation_tokens": "cache write"}
        line("tokens", "  ".join(f"{short.get(k, k)} {v:,}" for k, v in usage.items()))
    line("last end", r.get("exit_reason"))
    line("reason", r.get("reason"))
    if r.get("revive_at"):
        line("revives", when(r["revive_at"]))
    line("worktree", r.get("worktree"), opt("TETHER_PORT_BASE ", r.get("port_base")),
         opt("hand-off ", r.get("handed_off")))
    line("session", r.get("provider_session_id"))
    line("snapshot", r.get("snapshot"), "has a handoff" if r.get("has_handoff") else None)
    line("successor of", r.get("predecessor"))
    if r.get("created_at"):
        line("created", when(r["created_at"]))


def sandbox_table(sbs: Iterable[SandboxRecord]) -> None:
    t = _table()
    for col in ("ID", "NAME", "STATE", "RUNTIME", "WORKSPACE", "CREATED"):
        t.add_column(col, no_wrap=True)
    for s in sbs:
        t.add_row(s.id, s.name, s.state, s.spec.runtime, s.spec.workspace or "-",
                  when(s.created_at))
    _console().print(t)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
            if c != 0x09}


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with its control characters (but tab) shown as ``\\xNN``: agent-written
    strings (a reason, a waiting agent's message, a git output tail) must not reach the
    user's terminal as escape sequences (an OSC 52 clipboard write, a cleared screen).
    ``lines``: newlines are kept (a multi-line output tail)."""
    if lines:
        return "\n".join(part.translate(_CONTROL) for part in text.split("\n"))
    return text.translate(_CONTROL)


def event_line(ev: Event) -> str:
    """One journal event on one line; the agent may have written any of it."""
    return printable(_event_line(ev))


def _event_line(ev: Event) -> str:
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


def write_output(parts: Iterable[tuple[str, bytes]], plain: bool) -> None:
    """Each part to this process's stdout or stderr (``stderr``'s), in order; ``plain``:
    less a terminal's escape sequences. A closed pipe or Ctrl-C ends it quietly."""
    sinks = {"stderr": sys.stderr.buffer}
    strips: dict[str, EscapeStripper] = {}
    if plain:  # the terminal module (termios, the attach client) only when asked
        from tether.cli.terminal import EscapeStripper
    try:
        for stream, data in parts:
            sink = sinks.get(stream, sys.stdout.buffer)
            if plain:
                data = strips.setdefault(stream, EscapeStripper()).feed(data)
            sink.write(data)
            sink.flush()
        for stream, strip in strips.items():
            sinks.get(stream, sys.stdout.buffer).write(strip.flush())
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
