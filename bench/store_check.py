"""Store check: what ``PRAGMA quick_check`` at every daemon start costs as the store grows.

The daemon refuses a corrupt store at start (``daemon/lost_store.py``), so ``Store()``
reads the whole file once. Seeded stores of N journal events (~400 bytes each, as in
``floods``); per size: the median time of ``Store(db)`` (quick_check, pragmas, migrations
check), of ``PRAGMA quick_check`` alone, and the file's size. Baseline: opening the same
file and setting the pragmas without the check.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, Options, Row, fmt_ms
from tether.store import Store

REPS = 5
TARGET_MS = 1000.0  # at the largest size: a start stays well under a second


def _seed(db: Path, n: int) -> None:
    Store(db).close()  # the schema, the default sandbox
    con = sqlite3.connect(db)
    with con:
        start = int(con.execute("SELECT COALESCE(MAX(gseq), 0) FROM events").fetchone()[0])
        con.executemany("INSERT INTO events (stream, seq, body) VALUES ('bench', ?, ?)", (
            (i + 1, json.dumps({"gseq": start + i + 1, "seq": i + 1, "type": "bench.filler",
                                "time": 0.0, "sandbox": "bench", "exec": f"{i:012x}",
                                "state": "RUNNING", "reason": "filler " + "x" * 200,
                                "data": {"i": i, "pad": "y" * 100}}).encode())
            for i in range(n)))
    con.close()


def _median_ms(fn: Any) -> float:
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _check_only(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("PRAGMA quick_check").fetchall()
    con.close()


def _open_unchecked(db: Path) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        con.execute(f"PRAGMA {pragma}")
    con.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    con.close()


def run(opts: Options) -> BenchResult:
    sizes = [10_000, 50_000] if opts.quick else [10_000, 100_000, 300_000]
    t_start = time.perf_counter()
    rows: list[Row] = []
    data: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-store-") as tmp:
        for n in sizes:
            db = Path(tmp) / f"s{n}.db"
            _seed(db, n)
            opened = _median_ms(lambda db=db: Store(db).close())
            check = _median_ms(lambda db=db: _check_only(db))
            base = _median_ms(lambda db=db: _open_unchecked(db))
            mib = db.stat().st_size / 2**20
            data[str(n)] = {"open_ms": opened, "quick_check_ms": check,
                            "unchecked_open_ms": base, "file_mib": mib}
            last = n == sizes[-1]
            rows.append(Row("store_check", f"Store() with {n} events ({mib:.0f} MiB)",
                            fmt_ms(opened), fmt_ms(base), f"< {TARGET_MS:.0f} ms" if last else "",
                            opened < TARGET_MS if last else None))
            rows.append(Row("store_check", "  of which quick_check", fmt_ms(check), ""))
    return BenchResult("store_check", "Store check at start (PRAGMA quick_check)",
                       {"sizes": sizes, "reps": REPS}, data, rows,
                       seconds=time.perf_counter() - t_start,
                       notes=["baseline: the same file opened with the pragmas set and no "
                              "check; the file is in the page cache (a cold start reads it "
                              "from disk once more)"])
