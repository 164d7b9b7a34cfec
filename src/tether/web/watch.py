"""What the dashboard learns from the journal that no list method answers, followed by
one subscription that lives as long as ``tether web``:

* which agents wait for their user (``agent.waiting``, until that lineage's next turn or
  state change): the "needs you" list. Lineages live when ``tether web`` starts are read
  once (their story), so a restarted dashboard forgets no one waiting;
* how many turns were journaled (``turns``): cost and budget answers are kept until it
  changes (``views.Costs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from tether.client.aio import AsyncClient
from tether.client.errors import DaemonUnavailable, TetherError
from tether.model.records import Event

log = logging.getLogger("tether.web")
ENDS_WAITING = frozenset({"agent.turn", "agent.turn_start", "lineage.state"})


class Watch:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.waiting: dict[str, tuple[str, float]] = {}  # lineage -> (reason, since)
        self.turns = 0

    def apply(self, ev: Event) -> None:
        lineage = ev.data.get("lineage") if isinstance(ev.data, dict) else None
        if ev.type == "agent.turn":
            self.turns += 1
        if not isinstance(lineage, str):
            return
        if ev.type == "agent.waiting":
            self.waiting[lineage] = (ev.reason or str(ev.state or "waiting"), ev.time)
        elif ev.type in ENDS_WAITING:
            self.waiting.pop(lineage, None)

    async def run(self) -> None:
        """Follow the journal until cancelled; start over (from now) if it was reset."""
        while True:
            client = AsyncClient(self.home, autostart=False)
            try:
                await self._follow(client)
            except (TetherError, DaemonUnavailable) as e:
                log.warning("the dashboard's journal watch restarts: %s", e)
                await asyncio.sleep(1.0)
            except Exception:  # a bug here must not end the dashboard's "needs you"
                log.exception("the dashboard's journal watch failed; it restarts")
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await client.close()

    async def _follow(self, client: AsyncClient) -> None:
        head = await client.events_list(last=True, limit=1)
        self.waiting.clear()
        self.turns += 1  # whatever was cached may be from another journal
        live = await client.lineage_page(statuses=["ACTIVE"], limit=1000, newest_first=True)
        for lin in live.lineages:
            story = await client.digest_lineage(lin.id)
            for ev in story.events:
                if ev.gseq <= head.next and ev.exec == lin.exec:
                    self.apply(ev)
        async for ev in client.subscribe(since=head.next, epoch=head.epoch):
            self.apply(ev)
