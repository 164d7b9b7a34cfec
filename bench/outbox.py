"""Outbox: webhook delivery throughput to a local receiver, beside the journal's own rate.

In one run, on one home: (1) the journal's commit rate — ``N`` events appended through
the store, one transaction each, no hook (the baseline); (2) the same with a hook that
matches every event, so each transaction also writes its outbox row (the matcher's
cost); (3) a daemon started on that home delivers the ``N`` pending rows to a real
``http.server`` on 127.0.0.1 (``tests/receiver.py``): deliveries per second from
SERVING to the last one received, with the worker's concurrency (16 tries in flight);
(4) its ceiling: the same number of bare ``httpx`` POSTs, 16 at a time, from the bench
process to the same receiver (no store, no daemon).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from bench.harness import BenchResult, Options, Row, fresh_home
from tests.receiver import Receiver
from tether.daemon.journal import HookMatcher
from tether.model.hooks import HookRecord
from tether.store import Store
from tether.store.outbox import Outbox


def _append(store: Store, n: int) -> float:
    """Events per second through the store, one transaction each."""
    t0 = time.perf_counter()
    for i in range(n):
        store.append_event(None, "bench.tick", state="RUNNING", reason=f"tick {i}",
                           data={"i": i, "pad": "y" * 100})
    return n / (time.perf_counter() - t0)


def _bare_posts(url: str, n: int, concurrency: int = 16) -> float:
    """POSTs per second of a bare ``httpx.AsyncClient`` to the receiver."""
    async def main() -> float:
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=10.0) as c:
            async def one() -> None:
                async with sem:
                    (await c.post(url, content=b"x" * 800)).raise_for_status()
            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - t0)
    return asyncio.run(main())


def run(opts: Options) -> BenchResult:
    n = 500 if opts.quick else 3000
    t_start = time.perf_counter()
    data: dict[str, Any] = {"events": n}
    with fresh_home() as d, Receiver() as rx:
        d.home.mkdir(parents=True, exist_ok=True)
        store = Store(d.home / "tether.db")
        try:
            data["journal_events_per_s"] = _append(store, n)
            outbox = Outbox(store)
            outbox.add_hook(HookRecord(name="bench", on=["bench.*"], url=rx.url))
            store.on_append = HookMatcher(outbox)
            data["journal_with_outbox_events_per_s"] = _append(store, n)
        finally:
            store.close()
        d.start()
        serving = time.perf_counter()
        deadline = serving + 120
        while len(rx.received) < n and time.perf_counter() < deadline:
            time.sleep(0.005)
        took = time.perf_counter() - serving
        data["delivered"] = len(rx.received)
        data["deliveries_per_s"] = len(rx.received) / took
        data["distinct_keys"] = len(set(rx.keys()))
        d.kill9()
        data["bare_posts_per_s"] = _bare_posts(rx.url, n)
    rows = [
        Row("outbox", f"webhook deliveries/s ({n} pending, local http.server)",
            f"{data['deliveries_per_s']:.0f}/s",
            f"bare httpx {data['bare_posts_per_s']:.0f}/s; journal "
            f"{data['journal_events_per_s']:.0f} commits/s",
            "all delivered", data["delivered"] == n == data["distinct_keys"]),
        Row("outbox", "journal commits/s with a matching hook (outbox row in the same tx)",
            f"{data['journal_with_outbox_events_per_s']:.0f}/s",
            f"no hook {data['journal_events_per_s']:.0f}/s"),
    ]
    return BenchResult("outbox", "Outbox: webhook delivery throughput and the journal's rate",
                       {"events": n}, data, rows, seconds=time.perf_counter() - t_start)
