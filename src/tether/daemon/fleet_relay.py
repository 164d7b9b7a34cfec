"""The host's side of the catch-up relay: its local journal is the fleet's outbox.

Each work pass (while the host holds a lease) reads the local journal past what it
has scanned, keeps the events about fleet work — every ``fleet.*`` event, and the end
of each exec or lineage started for a placement (request key ``fleet-<id>-<gen>``) —
and relays them in batches (``fleet.relay``). At idle it reads only the local store:
PostgreSQL is asked for the cursor once per lease, and written only when there is
something to relay.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.daemon.faults import Faults
from tether.model.records import Event, ExecRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE
from tether.store import Store

if TYPE_CHECKING:
    from tether.fleet.relay import Item

log = logging.getLogger("tether.fleet")

#: ``FleetService._call``: ``fn(conn, *args)`` on a named connection, in a thread.
Call = Callable[..., Awaitable[Any]]
PAGE = 500  # local events read at a time
#: local pages read per step (the event loop's share): a long backlog, or a long local
#: history before the host joined, is relayed over several passes
MAX_PAGES = 20


class Relay:
    def __init__(self, store: Store, host: str, faults: Faults, batch: int = 200) -> None:
        self.store = store
        self.host = host
        self.faults = faults
        self.batch = max(1, batch)
        self.scanned: int | None = None  # None: read the cursor from PostgreSQL first
        self.token: int | None = None  # the lease whose cursor ``scanned`` started from

    async def step(self, call: Call, token: int) -> int:
        """Relay what the local journal holds past the cursor; how many events."""
        from tether.fleet import relay

        if self.scanned is None or token != self.token:
            done, epoch = await call("work", relay.cursor, self.host)
            self.scanned = done if epoch == self.store.epoch else 0
            self.token = token
        total, budget = 0, MAX_PAGES
        while budget > 0:
            items, upto, more, read = self._collect(self.scanned, budget)
            budget -= read
            if items:
                try:
                    got = await call("work", relay.relay, self.host, token,
                                     self.store.epoch, items)
                except BaseException:
                    self.scanned = None  # read the cursor again: the batch may have committed
                    raise
                self.faults.hit("fleet.after_relay")
                total += got.journaled
                for s in got.settled:
                    log.info("fleet: placement %s ended (exit %s)%s", s["id"], s["exit_code"],
                             ", reported late" if s["late"] else "")
            self.scanned = upto
            if not more:
                break
        return total

    def _collect(self, since: int, pages: int) -> tuple[list[Item], int, bool, int]:
        """Up to ``batch`` items after local gseq ``since``, reading at most ``pages``
        pages: (items, the gseq scanned to, whether more may follow, pages read)."""
        items: list[Item] = []
        upto, read = since, 0
        while read < pages:
            page = self.store.events_since(since=upto, limit=PAGE)
            read += 1
            for ev in page:
                item = self._item(ev)
                upto = ev.gseq
                if item is not None:
                    items.append(item)
                    if len(items) >= self.batch:
                        return items, upto, True, read
            if len(page) < PAGE:
                return items, upto, False, read
        return items, upto, True, read

    def _item(self, ev: Event) -> Item | None:
        """The relay item for a local event about fleet work, else None."""
        from tether.fleet.relay import Item

        base: dict[str, Any] = {"reason": ev.reason} if ev.reason else {}
        if ev.type.startswith("fleet."):
            work = ev.data.get("work")
            return Item(local_gseq=ev.gseq, local_at=ev.time, type=ev.type,
                        work=work if isinstance(work, int) else None,
                        data={**base, **ev.data})
        if ev.type == "exec.state" and ev.state in EXEC_TERMINAL and ev.exec:
            x = self.store.get_exec(ev.exec)
            placed = _placement(x.request_key if x else None)
            if x is None or placed is None:
                return None
            return Item(local_gseq=ev.gseq, local_at=ev.time, type=ev.type, work=placed[0],
                        data={**base, "exec": x.id, "state": ev.state,
                              "exit_code": x.exit_code, "generation": placed[1]},
                        end=(placed[1], x.id, exit_status(x), f"exec {x.id} {ev.state}"))
        if ev.type == "lineage.state" and ev.state not in LINEAGE_LIVE:
            ident = ev.data.get("lineage")
            rec = self.store.get_lineage(ident) if isinstance(ident, str) else None
            placed = _placement(rec.request_key if rec else None)
            if rec is None or placed is None:
                return None
            return Item(local_gseq=ev.gseq, local_at=ev.time, type=ev.type, work=placed[0],
                        data={**base, "lineage": rec.id, "state": ev.state,
                              "generation": placed[1]})
        return None


def exit_status(x: ExecRecord) -> int:
    """An ended exec's status as a placement records it: its exit code, 128+N when
    signal N ended it (as a shell, docker and ``tether wait`` say), else 1 for a
    failure without either."""
    if x.exit_code is not None:
        return x.exit_code
    if x.signal:
        return 128 + x.signal
    return 1 if x.state == "FAILED" else 0


def _placement(key: str | None) -> tuple[int, int] | None:
    """(work id, generation) of a local request key ``fleet-<id>-<generation>``."""
    from tether.daemon.fleet import REQUEST_PREFIX

    if not key or not key.startswith(REQUEST_PREFIX):
        return None
    ident, _, gen = key[len(REQUEST_PREFIX):].partition("-")
    return (int(ident), int(gen)) if ident.isdigit() and gen.isdigit() else None
