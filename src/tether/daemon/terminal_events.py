"""Terminal events of an exec: attach, detach and resize, as its monitor reports them.

One task per watched exec with a terminal or stdin, owned by the daemon's group. It
resumes after the last event the journal has (the monitor numbers them), so each is
journaled exactly once across daemon restarts, even if the monitor dropped old ones.

The monitor also appends each event to ``run/<exec>.events.jsonl``: when the exec ends,
:func:`catch_up` journals, before its end, what the journal lacks of them — the events
of a client that attached with no daemon watching (``tether attach`` talks to the
monitor directly), or that the watch had not passed on yet.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from tether.daemon.journal import Journal
from tether.model.records import ExecRecord
from tether.store import Store

log = logging.getLogger("tether.execs")

TERMINAL_EVENTS = ("exec.attach", "exec.detach", "exec.resize")


async def watch_terminal(store: Store, journal: Journal, rec: ExecRecord, socket: Path,
                         progress: dict[str, int]) -> None:
    """Journal attach, detach and resize as the monitor reports them; ``progress`` keeps
    the number of the next event the journal lacks, by exec."""
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket))
        # Resume after the last event the journal has (the monitor's own numbering):
        # exactly once across restarts, even if the monitor dropped old events.
        since = store.max_exec_event_n(rec.id, TERMINAL_EVENTS) + 1
        progress[rec.id] = since
        writer.write(json.dumps({"op": "watch", "since": since}).encode() + b"\n")
        await writer.drain()
        await reader.readline()
        while line := await reader.readline():
            ev = json.loads(line)
            kind = ev.pop("event", None)
            if kind == "exit":
                return
            n = int(ev.get("n", since))
            if n < since:
                continue
            since = n + 1
            if kind in ("attach", "detach", "resize"):
                _record(journal, rec, kind, ev)
            progress[rec.id] = since
    except (OSError, ValueError) as e:
        log.debug("terminal watch of %s ended: %s", rec.id, e)
    except Exception:  # never into the daemon's TaskGroup
        log.exception("terminal watch of %s failed", rec.id)
    finally:
        if writer is not None:
            writer.close()


def _record(journal: Journal, rec: ExecRecord, kind: str, ev: dict[str, Any]) -> None:
    reason = ev.pop("reason", None) or {
        "attach": "client attached", "resize": "window resized"}.get(kind)
    journal.record(rec.sandbox, f"exec.{kind}", exec_id=rec.id, reason=reason, data=ev)


def catch_up(store: Store, journal: Journal, rec: ExecRecord, path: Path,
             since: int | None) -> int:
    """Journal the events in the monitor's events file from number ``since`` (None: one
    past the highest the journal has), in order; how many. A line that is not whole
    JSON (torn by a full disk, or by a kill mid-write) is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if since is None:
        since = store.max_exec_event_n(rec.id, TERMINAL_EVENTS) + 1
    done = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
            n = ev.get("n")
            kind = ev.pop("event", None)
        except (ValueError, AttributeError):
            continue
        if type(n) is not int or n < since or kind not in ("attach", "detach", "resize"):
            continue
        _record(journal, rec, kind, ev)
        since = n + 1
        done += 1
    return done
