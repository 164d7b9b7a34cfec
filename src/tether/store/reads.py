"""Heavy reads off the daemon's event loop: worker threads, each with a read connection
of its own to the store's file.

The daemon's one connection writes, on the loop. A report over a year of turns, a page
of 100,000 jobs, a retention plan or a digest pass reads much more than it writes; run
on that connection they would hold the loop for seconds. Here they run in a worker
thread instead: in WAL mode a reader never waits for the writer nor the writer for it,
and each read sees one snapshot (it runs in a transaction of its own), so a page or a
plan is consistent even while the loop commits. What the reads return is data for the
loop to act on (small writes, in batches) or a reply already encoded (``msgspec.Raw``:
the loop only copies its bytes to the socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Worker threads (and connections): a long digest pass does not queue a status page.
WORKERS = 2


class Reads:
    """``await reads(fn, *args)`` runs ``fn(conn, *args)`` in a worker thread, with a
    read-only connection (``PRAGMA query_only``) that thread keeps, in one read
    transaction (one snapshot). ``fn`` must touch nothing the loop owns."""

    def __init__(self, path: Path, workers: int = WORKERS) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="store-read")
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(str(self.path), isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA query_only=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            with self._lock:
                if self._closed:
                    conn.close()
                    raise RuntimeError("the store is closed")
                self._conns.append(conn)
            self._local.conn = conn
        return conn

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in this thread, in one read transaction."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            return fn(conn, *args)
        finally:
            if conn.in_transaction:  # a read transaction: nothing to keep
                conn.execute("ROLLBACK")

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.call, fn,
                                                                *args)

    def close(self) -> None:
        """At shutdown: no new reads; the connections closed (a read still running in a
        worker finishes first: ``shutdown`` waits for it)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
