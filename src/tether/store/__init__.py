"""Durable intent (category A): the SQLite store. Only the daemon writes it."""

from tether.store.sqlite import WAL_LIMIT, SchemaTooNew, Store, StoreCorrupt, StoreLost

__all__ = ["WAL_LIMIT", "SchemaTooNew", "Store", "StoreCorrupt", "StoreLost"]
