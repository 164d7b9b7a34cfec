"""The ``events.*`` methods: read the journal, subscribe to it, with cursors that cannot
silently skip or repeat an event."""

from __future__ import annotations

from typing import Any

from tether.daemon.events.bus import MAX_TOTAL_SUBSCRIPTIONS
from tether.daemon.root import Daemon
from tether.model.errors import RpcCode, TetherError, events_purged
from tether.model.records import to_builtins
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

METHODS: dict[str, type[Any]] = {
    "events.list": m.EventsList,
    "events.subscribe": m.EventsSubscribe,
    "events.unsubscribe": m.EventsUnsubscribe,
}
LONG: frozenset[str] = frozenset()

MAX_SUBSCRIPTIONS = 64  # per connection; each may queue up to QUEUE_LIMIT events


def handlers(d: Daemon) -> dict[str, Handler]:
    store, bus, sandboxes = d.store, d.bus, d.sandboxes

    def _same_epoch(epoch: str | None, since: int) -> None:
        """A cursor from another journal (a store rebuilt by --recover-store) would
        silently skip or repeat events: refuse it."""
        if epoch is not None and epoch != store.epoch:
            raise TetherError(RpcCode.INVALID_STATE, "EPOCH_CHANGED",
                              f"the journal was reset (epoch {epoch} is gone, it is now "
                              f"{store.epoch}): cursor {since} means nothing in it; events "
                              "may have been lost, so re-read the state you need, then "
                              f"resume with since=0 and epoch={store.epoch}",
                              {"epoch": store.epoch, "yours": epoch})

    def _not_purged(sb: str | None, per_sandbox: bool, since: int) -> None:
        """A nonzero cursor below what compaction kept would skip events silently.
        (``since=0`` means "from the oldest event kept".)"""
        if since == 0:
            return
        floor = d.retention.rs.floor_of(sb if per_sandbox else None)
        if since < floor:
            raise events_purged(since, floor, store.epoch)

    def _stream(ref: str | None) -> str | None:
        """A sandbox's event stream: its exact id (even once deleted), name or prefix."""
        if ref is None:
            return None
        exact = store.get_sandbox(ref)
        return exact.id if exact is not None else sandboxes.resolve(ref).id

    async def list_(p: m.EventsList, c: Connection) -> Any:
        _same_epoch(p.epoch, p.since)
        sb = _stream(p.sandbox)
        _not_purged(sb, p.sandbox is not None, p.since)
        since = p.since
        if p.last:
            if p.sandbox is not None:
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                                  "last reads the whole journal's newest events; it does not "
                                  "combine with sandbox")
            # gseq has no gaps above the floor: the newest `limit` are the last numbers.
            since = max(since, store.last_gseq() - p.limit, d.retention.rs.floor_of(None))
        evs = store.events_since(since=since, sandbox=sb, per_sandbox=p.sandbox is not None,
                                 limit=p.limit)
        nxt = (evs[-1].seq if p.sandbox is not None else evs[-1].gseq) if evs else since
        return {"events": to_builtins(evs), "next": nxt, "epoch": store.epoch}

    async def subscribe(p: m.EventsSubscribe, c: Connection) -> Any:
        _same_epoch(p.epoch, p.since)
        sb = _stream(p.sandbox)
        _not_purged(sb, p.sandbox is not None, p.since)
        if sum(1 for s in bus.subs.values() if s.conn is c) >= MAX_SUBSCRIPTIONS:
            raise TetherError(RpcCode.CONFLICT, "TOO_MANY_SUBSCRIPTIONS",
                              f"this connection already has {MAX_SUBSCRIPTIONS} "
                              "subscriptions; unsubscribe or open another connection",
                              {"limit": MAX_SUBSCRIPTIONS, "scope": "connection"})
        if len(bus.subs) >= MAX_TOTAL_SUBSCRIPTIONS:
            raise TetherError(RpcCode.CONFLICT, "TOO_MANY_SUBSCRIPTIONS",
                              f"the daemon already holds {MAX_TOTAL_SUBSCRIPTIONS} "
                              "subscriptions (its limit, all clients together); close "
                              "subscribers you no longer need and retry",
                              {"limit": MAX_TOTAL_SUBSCRIPTIONS, "scope": "daemon"})
        sub = bus.subscribe(c, sb, p.since)
        return {"subscription": sub.id, "since": p.since, "epoch": store.epoch}

    async def unsubscribe(p: m.EventsUnsubscribe, c: Connection) -> Any:
        return {"ok": bus.unsubscribe(p.subscription, c)}

    return {"events.list": list_, "events.subscribe": subscribe,
            "events.unsubscribe": unsubscribe}
