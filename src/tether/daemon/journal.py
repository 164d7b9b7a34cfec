"""The one way a state change leaves the daemon: committed, then published.

The store writes a change and its journal event in one transaction (and refuses
an illegal transition there); the journal then hands the event to the live
subscribers. Every service commits through :class:`Journal`, so no change is
ever published that was not committed, and none committed goes unpublished.

The journal also owns the hooks' matcher: installed as the store's ``on_append``, it
runs inside the transaction of every event and writes one outbox row per matching
hook there, so an event and its deliveries commit together (at-least-once delivery
starts at the commit; ``daemon/outbox/`` makes the deliveries).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from tether.daemon.events.bus import EventBus
from tether.model.hooks import UNMATCHED_PREFIX, HookRecord, event_names, wants_subject, wants_type
from tether.model.records import Event, to_builtins
from tether.store import Store
from tether.store.outbox import Outbox

R = TypeVar("R")


class HookMatcher:
    """Which hooks want an event; their deliveries, written in the event's transaction.

    The hooks are cached (reloaded by :meth:`reload` whenever one is added or removed),
    so an event no hook wants costs one loop over a short list and no query.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.hooks: list[HookRecord] = outbox.hooks()
        #: Called after a delivery was enqueued (the worker's wake-up; it runs once the
        #: transaction is committed, since it shares the event loop's thread).
        self.on_enqueued: Callable[[], None] = lambda: None

    def reload(self) -> None:
        self.hooks = self.outbox.hooks()

    def __call__(self, db: sqlite3.Connection, ev: Event) -> None:
        if not self.hooks or ev.type.startswith(UNMATCHED_PREFIX):
            return
        names = event_names(ev.type, ev.state)
        wanted = [h for h in self.hooks if wants_type(h, names)]
        if not wanted:
            return
        ids, x, lineage = self.outbox.subject(db, ev)
        subject = x if x is not None else lineage
        body: dict[str, Any] = {"event": to_builtins(ev), "exec": x, "lineage": lineage}
        enqueued = False
        for h in wanted:
            if wants_subject(h, ids, subject):
                body["hook"] = h.name
                self.outbox.enqueue(db, h.name, ev, _enc.encode(body))
                enqueued = True
        if enqueued:
            self.on_enqueued()


_enc = msgspec.json.Encoder()


class Journal:
    def __init__(self, store: Store, bus: EventBus) -> None:
        self.store = store
        self.bus = bus
        self.hooks = HookMatcher(Outbox(store))
        store.on_append = self.hooks

    def commit(self, result: tuple[R, Event | None]) -> R:
        """Publish what a store write returned (record, event); return the record."""
        rec, ev = result
        if ev is not None:
            self.bus.publish(ev)
        return rec

    def commit_all(self, events: list[Event]) -> None:
        """Publish the events of one store write that journaled several."""
        for ev in events:
            self.bus.publish(ev)

    def record(self, sandbox: str | None, type_: str, *, exec_id: str | None = None,
               state: str | None = None, reason: str | None = None,
               data: dict[str, Any] | None = None) -> Event:
        """Journal an event that changes no record (attach, docker connected, …)."""
        ev = self.store.append_event(sandbox, type_, exec_id=exec_id, state=state,
                                     reason=reason, data=data)
        self.bus.publish(ev)
        return ev
