"""Store backends: the core store (``CoreStore``) on SQLite and on PostgreSQL, side by side.

Per backend: the latency of an exec's life as the daemon writes it (``create_exec``, then
RUNNING, then FINISHED: three transactions, each with its journal event), the rate of
``append_event`` from one writer and from four writers on their own connections (each
append serialises on the journal's counter row, so more writers add little: they queue),
and reading 1,000 events by cursor. PostgreSQL is a throw-away local cluster
(``tests/pg.py``, Unix socket, ``fsync=off``), so its figures are the protocol's and
locking's cost, not a disk's; SQLite runs with the store's own pragmas (WAL,
``synchronous=NORMAL``) in a temp dir.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, Options, Row, percentile
from tests.pg import PgCluster
from tether.model.records import ExecRecord, ExecSpec
from tether.model.states import ExecState
from tether.store import Store
from tether.store.base import CoreStore

WRITERS = 4


def _exec_life(s: CoreStore) -> float:
    t0 = time.perf_counter()
    rec = ExecRecord(id=s.reserve_id("exec"), sandbox="default", state="PENDING",
                     spec=ExecSpec(argv=["true"]))
    s.create_exec(rec)
    s.transition_exec(rec.id, ExecState.RUNNING)
    s.transition_exec(rec.id, ExecState.FINISHED, exit_code=0)
    return time.perf_counter() - t0


def _appends_per_s(stores: list[CoreStore], each: int) -> float:
    def write(s: CoreStore) -> None:
        for i in range(each):
            s.append_event("default", "bench.tick", data={"i": i})

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(stores) * each / (time.perf_counter() - t0)


def _measure(open_store: Callable[[], CoreStore], lives: int, appends: int) -> dict[str, Any]:
    s = open_store()
    times = [_exec_life(s) for _ in range(lives)]
    one = _appends_per_s([s], appends)
    rivals = [open_store() for _ in range(WRITERS)]
    many = _appends_per_s(rivals, appends // WRITERS)
    t0 = time.perf_counter()
    got = s.events_since(since=0, limit=1000)
    read = time.perf_counter() - t0
    for r in [s, *rivals]:
        r.close()
    return {"exec_life_ms": {"p50": percentile(times, 50) * 1e3,
                             "p99": percentile(times, 99) * 1e3},
            "appends_per_s_1": one, f"appends_per_s_{WRITERS}": many,
            "read_1000_ms": read * 1e3, "read_n": len(got)}


def run(opts: Options) -> BenchResult:
    from tether.store.postgres import PgStore

    t_start = time.perf_counter()
    lives, appends = (100, 400) if opts.quick else (400, 2000)
    data: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-stores-") as tmp:
        data["sqlite"] = _measure(lambda: Store(Path(tmp) / "t.db"), lives, appends)
    pg = PgCluster()
    try:
        pg.start()
        url = pg.url
        data["postgres"] = _measure(lambda: PgStore(url), lives, appends)
    finally:
        pg.destroy()
    sq, pq = data["sqlite"], data["postgres"]
    rows = [
        Row("store_backends", "exec life: create + RUNNING + FINISHED, 3 commits (p50 / p99)",
            f"PG {pq['exec_life_ms']['p50']:.2f} / {pq['exec_life_ms']['p99']:.2f} ms",
            f"SQLite {sq['exec_life_ms']['p50']:.2f} / {sq['exec_life_ms']['p99']:.2f} ms"),
        Row("store_backends", "append_event, one writer",
            f"PG {pq['appends_per_s_1']:.0f}/s", f"SQLite {sq['appends_per_s_1']:.0f}/s"),
        Row("store_backends", f"append_event, {WRITERS} writers (own connections)",
            f"PG {pq[f'appends_per_s_{WRITERS}']:.0f}/s",
            f"SQLite {sq[f'appends_per_s_{WRITERS}']:.0f}/s"),
        Row("store_backends", "events_since: 1,000 events",
            f"PG {pq['read_1000_ms']:.1f} ms", f"SQLite {sq['read_1000_ms']:.1f} ms"),
    ]
    return BenchResult("store_backends", "Core store: SQLite and PostgreSQL backends",
                       {"exec_lives": lives, "appends": appends, "writers": WRITERS}, data,
                       rows, seconds=time.perf_counter() - t_start,
                       notes=["PostgreSQL: a local throw-away cluster over a Unix socket "
                              "with fsync=off (tests/pg.py); a networked, durable server "
                              "adds a round trip per statement and an fsync per commit"])
