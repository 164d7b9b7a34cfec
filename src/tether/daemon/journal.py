"""The one way a state change leaves the daemon: committed, then published.

The store writes a change and its journal event in one transaction (and refuses
an illegal transition there); the journal then hands the event to the live
subscribers. Every service commits through :class:`Journal`, so no change is
ever published that was not committed, and none committed goes unpublished.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tether.daemon.events import EventBus
from tether.model.records import Event
from tether.store import Store

R = TypeVar("R")


class Journal:
    def __init__(self, store: Store, bus: EventBus) -> None:
        self.store = store
        self.bus = bus

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
