"""The live side of the journal: publish committed events to subscribers.

The store is the source of truth; a subscriber first catches up from the store
(page by page, from its cursor) and only then switches to live delivery, in the
same synchronous step, so no event falls between the two. Live delivery uses a
bounded queue per subscriber; a subscriber that cannot keep up gets one
``events.overflow`` notification naming its last delivered cursor and is
dropped — it resumes from there with ``since`` and loses nothing.

Memory stays bounded whatever the clients do: a pump writes only while its
connection has at most ``NOTIFY_BUFFER`` bytes queued (``Connection.writable``),
drops the rest of a catch-up page when it has to wait (it re-reads from its cursor
afterwards), and the daemon holds at most ``MAX_TOTAL_SUBSCRIPTIONS``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.model.records import Event, to_builtins
from tether.rpc.server import Connection
from tether.store import Store

QUEUE_LIMIT = 1024
CATCH_UP_PAGE = 100
MAX_TOTAL_SUBSCRIPTIONS = 1024  # per daemon, all connections together


@dataclass(eq=False)
class Subscription:
    id: str
    conn: Connection
    sandbox: str | None
    cursor: int  # per-sandbox seq when ``sandbox`` is set, else global gseq
    queue: asyncio.Queue[Event] = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    live: bool = False
    overflowed: bool = False
    task: asyncio.Task[Any] | None = None

    def key(self, ev: Event) -> int:
        return ev.seq if self.sandbox is not None else ev.gseq

    def wants(self, ev: Event) -> bool:
        return self.sandbox is None or ev.sandbox == self.sandbox


class EventBus:
    def __init__(self, store: Store, queue_limit: int = QUEUE_LIMIT) -> None:
        self.store = store
        self.queue_limit = queue_limit
        self.subs: dict[str, Subscription] = {}
        self._ids = itertools.count(1)
        #: The journal's floor for a stream (None: the global cursor), set by the daemon
        #: once retention exists: a catch-up whose cursor falls below it is ended.
        self.floor: Callable[[str | None], int] = lambda _stream: 0

    def publish(self, ev: Event) -> None:
        for sub in list(self.subs.values()):
            if not sub.live or sub.overflowed or not sub.wants(ev):
                continue
            try:
                sub.queue.put_nowait(ev)
            except asyncio.QueueFull:
                sub.overflowed = True
                sub.queue = asyncio.Queue(1)  # free the backlog; the pump will stop
                sub.queue.put_nowait(ev)

    def subscribe(self, conn: Connection, sandbox: str | None, since: int) -> Subscription:
        sub = Subscription(id=f"sub-{next(self._ids)}", conn=conn, sandbox=sandbox,
                           cursor=since, queue=asyncio.Queue(self.queue_limit))
        self.subs[sub.id] = sub
        sub.task = conn.spawn_long(self._pump(sub))
        return sub

    def unsubscribe(self, sub_id: str, conn: Connection) -> bool:
        sub = self.subs.get(sub_id)
        if sub is None or sub.conn is not conn:
            return False
        self._drop(sub)
        if sub.task is not None:
            sub.task.cancel()
        return True

    def _drop(self, sub: Subscription) -> None:
        self.subs.pop(sub.id, None)

    def _send(self, sub: Subscription, ev: Event) -> None:
        sub.conn.notify("events.event", {"subscription": sub.id, "event": to_builtins(ev)})
        sub.cursor = sub.key(ev)

    def _catch_up(self, sub: Subscription) -> bool:
        """Send one page from the store; True once caught up (and now live).

        Stops at a full buffer and lets the page go, so a waiting pump holds no events.
        Reading a short page and going live happen with no await in between, so
        nothing committed can slip through."""
        if sub.cursor and sub.cursor < self.floor(sub.sandbox):
            raise _Purged  # compacted while this subscriber caught up: never skip silently
        page = self.store.events_since(since=sub.cursor, sandbox=sub.sandbox,
                                       per_sandbox=sub.sandbox is not None,
                                       limit=CATCH_UP_PAGE)
        for ev in page:
            if sub.conn.backlogged():
                return False
            self._send(sub, ev)
        if len(page) < CATCH_UP_PAGE:
            sub.live = True
            return True
        return False

    async def _pump(self, sub: Subscription) -> None:
        try:
            while True:
                await sub.conn.writable()
                try:
                    if self._catch_up(sub):
                        break
                except _Purged:
                    sub.conn.notify("events.overflow", {
                        "subscription": sub.id, "last": sub.cursor,
                        "message": (f"events after cursor {sub.cursor} were compacted "
                                    "(retention) while this subscriber caught up; "
                                    f"resubscribe with since={sub.cursor} to learn the "
                                    "oldest cursor (EVENTS_PURGED)")})
                    return
            while True:
                await sub.conn.writable()
                ev = await sub.queue.get()
                if sub.overflowed:
                    sub.conn.notify("events.overflow", {
                        "subscription": sub.id, "last": sub.cursor,
                        "message": (f"subscriber fell more than {self.queue_limit} events "
                                    f"behind and was dropped; resubscribe with since="
                                    f"{sub.cursor} to continue without loss"),
                    })
                    return
                if sub.key(ev) <= sub.cursor:
                    continue
                self._send(sub, ev)
        finally:
            self._drop(sub)


class _Purged(Exception):
    """A catching-up subscriber's cursor fell below the journal's floor."""
