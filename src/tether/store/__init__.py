"""Durable intent (category A): the SQLite store. Only the daemon writes it."""

from tether.store.sqlite import SchemaTooNew, Store, StoreCorrupt

__all__ = ["SchemaTooNew", "Store", "StoreCorrupt"]
