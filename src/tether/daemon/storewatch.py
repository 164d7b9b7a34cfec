"""The store's file while the daemon serves: still ours, and its WAL bounded.

One task (``store-watch``), once a second:

* **identity** — the file at ``tether.db`` must still be the one the store opened
  (same device and inode; :meth:`Store.check_file`, which every transaction runs too).
  A store deleted or replaced under the daemon is *lost*: every write is refused with
  ``STORE_LOST`` from then on (the store does that), ``daemon.health`` answers
  NOT_SERVING with the reason, the services that only act through commits (scheduler,
  webhooks, agent tick, digest, retention) are stopped, and nothing ever opens the path
  again — a checkpoint would create an empty ``tether.db`` there, which the next daemon
  start could not tell from a store. Running execs keep running under their monitors.
* **WAL** — a checkpoint in a worker thread every ``every`` seconds (the sweep's
  cadence) and as soon as the WAL passes the store's ``wal_limit`` (64 MiB,
  ``$TETHER_WAL_LIMIT``), when the checkpoint also truncates it. No commit ever
  checkpoints: its fsyncs stay off the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tether.store import Store, StoreLost

log = logging.getLogger("tether.daemon")

WATCH_INTERVAL = 1.0  # seconds between looks at the store file


class StoreWatch:
    def __init__(self, store: Store, every: float,
                 on_lost: Callable[[StoreLost], None]) -> None:
        self.store = store
        self.every = every  # seconds between checkpoints while the WAL stays small
        self.on_lost = on_lost
        self.truncations = 0  # for daemon.metrics and tests: WALs truncated

    async def loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            try:
                self.store.check_file()
                if (time.monotonic() - last >= self.every
                        or self.store.wal_size() > self.store.wal_limit):
                    last = time.monotonic()
                    await self.checkpoint()
            except StoreLost as e:
                self.on_lost(e)
                return  # the path is not ours any more: never touch it again
            except Exception:
                log.exception("checkpoint of the store failed; trying again in %.0f s",
                              self.every)

    async def checkpoint(self) -> None:
        t0 = time.monotonic()
        done = await asyncio.get_running_loop().run_in_executor(None, self.store.checkpoint)
        if done["truncated"]:
            self.truncations += 1
            log.info("the store's WAL passed %d bytes: checkpointed and truncated in %.0f ms "
                     "(%d bytes now)", self.store.wal_limit, (time.monotonic() - t0) * 1000,
                     done["wal_bytes"])
        elif done["over"]:
            log.warning("the store's WAL passed %d bytes but could not be truncated (a "
                        "reader's snapshot or the writer held it %.0f ms): %d bytes; trying "
                        "again in %.0f s", self.store.wal_limit,
                        (time.monotonic() - t0) * 1000, done["wal_bytes"], WATCH_INTERVAL)
