"""Retention: what a pass costs the daemon's event loop as the home grows.

The pass runs inline on the daemon's loop (``daemon/retention.py``), so its time is time
no request is served. A seeded home of N settled execs (records written straight into a
real store, each with a 1 KiB stdout log, an empty stderr log and two run files) and as
many journal events; measured with a real :class:`RetentionService`:

* the **steady pass**: nothing is due (every exec ended 30 minutes ago), the hourly cost;
* the **pruning pass**: every exec due (``older_than=0``): marks, unlinks (in a worker
  thread, so only part of it holds the loop), journal compaction of N events;
* baseline: ``os.walk`` + ``stat`` of every file under ``logs/`` and ``run/`` (what any
  size accounting must do at least).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.harness import BenchResult, Options, Row, fmt_ms
from tether.daemon.clock import Clock
from tether.daemon.events import EventBus
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.retention import RetentionService
from tether.model.layout import HomeLayout
from tether.model.records import ExecRecord, ExecSpec
from tether.model.retention import RetentionPolicy
from tether.store import Store

STALL_TARGET_MS = 500.0  # at the largest size, no request waits half a second on a pass


def _seed(home: Path, n: int) -> RetentionService:
    layout = HomeLayout(home)
    (layout.logs / "default").mkdir(parents=True)
    layout.run.mkdir()
    store = Store(layout.db)
    ended = time.time() - 1800  # inside every default limit: nothing is due
    enc = msgspec.json.Encoder()
    db = store._db  # seeding only: the store's API commits one exec per transaction
    db.execute("BEGIN")
    for i in range(n):
        ident = f"{i:012x}"
        rec = ExecRecord(id=ident, sandbox="default", state="FINISHED",
                         spec=ExecSpec(argv=["true"]), created_at=ended - 1,
                         started_at=ended - 1, ended_at=ended, exit_code=0)
        db.execute("INSERT INTO execs VALUES (?, ?, ?, ?, ?, ?)",
                   (ident, "default", None, "FINISHED", None, enc.encode(rec)))
        db.execute("INSERT INTO events (stream, seq, body) VALUES ('default', ?, ?)",
                   (i + 2, enc.encode({"gseq": i + 2, "seq": i + 2, "type": "exec.state",
                                       "time": ended, "sandbox": "default", "exec": ident,
                                       "state": "FINISHED", "reason": "exited with code 0",
                                       "data": {}})))
        paths = layout.exec_paths("default", ident)
        paths.stdout.write_bytes(b"x" * 1024)
        paths.stderr.write_bytes(b"")
        paths.claim.write_bytes(b"monitor 1")
        paths.monitor_log.write_bytes(b"")
    db.execute("COMMIT")
    journal = Journal(store, EventBus(store))
    return RetentionService(store, layout, journal, Clock(), RetentionPolicy(), Faults(None))


def _walk(root: Path) -> int:
    total = 0
    for sub in ("logs", "run"):
        for dirpath, _d, files in os.walk(root / sub):
            total += sum(os.stat(os.path.join(dirpath, f)).st_size for f in files)
    return total


async def _with_stall(coro: Any) -> tuple[Any, float]:
    """Run ``coro`` beside a 1 ms ticker; return its result and the longest time the
    loop could not run the ticker (what a request would have waited)."""
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.001)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        out = await coro
    finally:
        done = True
        await ticker
    return out, worst * 1000


def _ms(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def run(opts: Options) -> BenchResult:
    sizes = [2_000, 10_000] if opts.quick else [10_000, 50_000]
    t_start = time.perf_counter()
    rows: list[Row] = []
    data: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-retention-") as tmp:
        for n in sizes:
            home = Path(tmp) / f"h{n}"
            svc = _seed(home, n)
            walk_ms, _ = _ms(lambda home=home: _walk(home))
            steady_ms, (steady, steady_stall) = _ms(lambda svc=svc: asyncio.run(
                _with_stall(svc.prune(None, dry_run=False))))
            assert not steady.logs and not steady.events, steady
            prune_ms, (pruned, prune_stall) = _ms(lambda svc=svc: asyncio.run(
                _with_stall(svc.prune(0.0, dry_run=False))))
            assert len(pruned.logs) == n, len(pruned.logs)
            df_ms, _ = _ms(lambda svc=svc: asyncio.run(svc.df()))
            data[str(n)] = {"steady_ms": steady_ms, "steady_stall_ms": steady_stall,
                            "prune_ms": prune_ms, "prune_stall_ms": prune_stall,
                            "walk_ms": walk_ms, "df_ms": df_ms,
                            "events_compacted": pruned.events}
            last = n == sizes[-1]
            rows.append(Row("retention", f"steady pass, {n} settled execs, nothing due",
                            fmt_ms(steady_ms), f"walk+stat logs/ run/ {fmt_ms(walk_ms)}"))
            rows.append(Row("retention", "  longest loop stall in it", fmt_ms(steady_stall), "",
                            f"< {STALL_TARGET_MS:.0f} ms" if last else "",
                            steady_stall < STALL_TARGET_MS if last else None))
            rows.append(Row("retention", f"  pruning pass: {n} execs' logs and run files, "
                            f"{pruned.events} events",
                            f"{fmt_ms(prune_ms)} ({prune_ms * 1000 / n:.0f} µs/exec)", ""))
            rows.append(Row("retention", "  longest loop stall in it", fmt_ms(prune_stall), "",
                            f"< {STALL_TARGET_MS:.0f} ms" if last else "",
                            prune_stall < STALL_TARGET_MS if last else None))
            rows.append(Row("retention", "  tether df after it", fmt_ms(df_ms), ""))
    return BenchResult("retention", "Retention pass on the daemon's loop",
                       {"sizes": sizes}, data, rows, seconds=time.perf_counter() - t_start,
                       notes=["a pass runs inline on the event loop every hour (and on "
                              "`tether prune`): the steady pass is what the hourly check "
                              "costs when nothing is due"])
