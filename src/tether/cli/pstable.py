"""``tether ps``'s table as cells, and as the plain text rich prints for it on a pipe.

Standard library only: the console entry's fast path (``cli/fast.py``) prints ``ps``
without importing rich, msgspec or click, and must print the bytes the rich table would.
The cells are made here once, from the reply as JSON values, for both renderings.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex

TYPE_CHECKING = False  # not ``typing``'s: this module is on the fast path
if TYPE_CHECKING:
    from typing import Any

#: The width a piped rich console lays tables out in (``output._console``).
PIPE_WIDTH = 240
AGENT_COLS = ["LINEAGE", "LIFECYCLE", "HEARTBEAT", "CTX", "TURNS", "REVIVALS"]
# rich's emoji codes (``rich._emoji_replace``), and the names one could be: a name made of
# the characters rich's emoji names use, but for numbers, of which only 100 and 1234 are.
_EMOJI_CODE = re.compile(r":(\S*?)(?:-(?:emoji|text))?:")
_EMOJI_NAME = re.compile(r"[\w!#&()*+.\-]+")


def _rich_would_rewrite(cell: str) -> bool:
    """Whether rich prints ``cell`` other than as it is: not printable ASCII, markup
    (any ``[``, to be safe) or what may be an emoji code (``:smile:``)."""
    if not (cell.isascii() and cell.isprintable()) or "[" in cell:
        return True
    for m in _EMOJI_CODE.finditer(cell):
        name = m.group(1)
        if _EMOJI_NAME.fullmatch(name) and not (name.isdigit() and name not in {"100", "1234"}):
            return True
    return False


#: The lineage statuses of an agent that still runs or will again (``LINEAGE_LIVE``).
LIVE = frozenset({"ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT"})


def lifecycle_cell(status: str | None, lifecycle: str | None) -> str:
    """The lifecycle as shown: a context lifecycle belongs to a live agent; one that has
    ended shows none ("-"), unless its context ended it (DEAD) — a FAILED lineage is not
    "HEALTHY" (issue 23 item 11: one coherent status per agent)."""
    if not lifecycle or (status not in LIVE and status is not None and lifecycle != "DEAD"):
        return "-"
    return lifecycle


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def exec_row(x: dict[str, Any]) -> dict[str, Any]:
    """The fields `tether ps --json` promises, from an exec as JSON values."""
    return {"id": x["id"], "name": x.get("name"), "sandbox": x["sandbox"],
            "state": x["state"], "exit_code": x.get("exit_code"), "signal": x.get("signal"),
            "pid": x.get("pid"), "started_at": x.get("started_at"),
            "ended_at": x.get("ended_at"), "reason": x.get("reason"),
            "argv": x["spec"]["argv"], "agent": x.get("agent")}


def named_sandboxes(execs: list[dict[str, Any]]) -> bool:
    """Whether a sandbox other than ``default`` (whose id is its name) is shown: only then
    is ``sandbox.list`` asked for the names."""
    return any(x["sandbox"] != "default" for x in execs)


def sandbox_names(sandboxes: list[dict[str, Any]]) -> dict[str, str]:
    """Sandbox id -> name, from ``sandbox.list`` (``all``) as JSON values."""
    return {s["id"]: s["name"] for s in sandboxes if s.get("name")}


def exec_cells(execs: list[dict[str, Any]], names: dict[str, str] | None = None,
               ) -> tuple[list[str], list[list[str]]]:
    """The columns and each exec's cells (``exec.list``'s ``execs`` as JSON values); the
    agent columns only when an exec is an agent's. ``names``: a sandbox is shown by its
    name, else its id."""
    names = names or {}
    agents = any(x.get("agent") for x in execs)
    cols = ["ID", "NAME", "SANDBOX", "STATE", "EXIT", "PID", "STARTED"]
    if agents:
        cols += AGENT_COLS
    rows = []
    for x in execs:
        code, sig = x.get("exit_code"), x.get("signal")
        exit_s = str(code) if code is not None else (f"sig{sig}" if sig else "-")
        cells = [x["id"], x.get("name") or "-", names.get(x["sandbox"], x["sandbox"]),
                 x["state"], exit_s,
                 str(x.get("pid") or "-"), when(x.get("started_at"))]
        if agents:
            a = x.get("agent")
            if a is None:
                cells += ["-"] * len(AGENT_COLS)
            else:
                pct = a.get("context_pct")
                # A lineage that is not running shows why (e.g. WAITING_LIMIT).
                who = a.get("lineage") or "-"
                if a.get("status", "ACTIVE") != "ACTIVE":
                    who = f"{who} {a.get('status')}"
                cells += [who, lifecycle_cell(a.get("status", "ACTIVE"), a.get("lifecycle")),
                          a.get("heartbeat") or "-",
                          f"{pct:.0f}%" if pct is not None else "-",
                          str(a.get("turns", 0)), str(a.get("revivals", 0))]
        rows.append([*cells, shlex.join(x["spec"]["argv"])[:60]])
    return [*cols, "COMMAND"], rows


def plain(cols: list[str], rows: list[list[str]], width: int = PIPE_WIDTH) -> str | None:
    """The table as a colourless rich console ``width`` wide prints it (no box, columns
    two spaces apart, each padded to its widest cell), or ``None`` when rich would do
    more than that: a row wider than ``width`` (rich shrinks columns), or a cell that is
    not printable ASCII or holds markup or an emoji code."""
    if any(_rich_would_rewrite(cell) for row in rows for cell in row):
        return None
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
    if sum(widths) + 2 * (len(cols) - 1) > width:
        return None
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                   + "\n" for line in [cols, *rows])
