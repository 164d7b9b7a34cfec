"""Terminal events of an exec: attach, detach and resize, as its monitor reports them.

One task per watched exec with a terminal or stdin, owned by the daemon's group. It
resumes after the last event the journal has (the monitor numbers them), so each is
journaled exactly once across daemon restarts, even if the monitor dropped old ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from tether.daemon.journal import Journal
from tether.model.records import ExecRecord
from tether.store import Store

log = logging.getLogger("tether.execs")

TERMINAL_EVENTS = ("exec.attach", "exec.detach", "exec.resize")


async def watch_terminal(store: Store, journal: Journal, rec: ExecRecord, socket: Path,
                         ) -> None:
    """Journal attach, detach and resize as the monitor reports them."""
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket))
        # Resume after the last event the journal has (the monitor's own numbering):
        # exactly once across restarts, even if the monitor dropped old events.
        since = store.max_exec_event_n(rec.id, TERMINAL_EVENTS) + 1
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
                reason = ev.pop("reason", None) or {
                    "attach": "client attached", "resize": "window resized"}.get(kind)
                journal.record(rec.sandbox, f"exec.{kind}", exec_id=rec.id,
                                    reason=reason, data=ev)
    except (OSError, ValueError) as e:
        log.debug("terminal watch of %s ended: %s", rec.id, e)
    except Exception:  # never into the daemon's TaskGroup
        log.exception("terminal watch of %s failed", rec.id)
    finally:
        if writer is not None:
            writer.close()
