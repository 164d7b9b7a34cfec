"""Cost report and budget checks: ``cost.report`` over N ``agent.turn`` events of a real
store (summed in SQL, priced per model and day, grouped by lineage and by day), and what a
budget check costs: the first after a start sums a lineage's turns and the day's from the
journal; later ones are kept current by each turn's end.

The turns (four models, one unpriced) belong to 200 lineages and are spread over the
last 30 days; the lineage checked has N/200 turns, the day about N/30.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import msgspec

from bench.harness import BenchResult, Options, Row
from tether.daemon.clock import Clock
from tether.daemon.cost import CostService
from tether.daemon.events import EventBus
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.tasks import Tasks
from tether.digest import periods
from tether.model.records import AgentConfig, Event, ExecRecord, ExecSpec, LineageRecord
from tether.store import Store

DAYS = 30
LINEAGES = 200
MODELS = ["claude-sonnet-4-5-20250929", "claude-opus-4-5", "gpt-5-codex", "local-llama"]


def _seed(db: Path, n: int) -> None:
    Store(db).close()
    rng = random.Random(11)
    now = time.time()
    enc = msgspec.json.Encoder()
    execs = []
    for k in range(LINEAGES):
        rec = ExecRecord(id=f"x{k:08d}", sandbox="default", state="RUNNING",
                         spec=ExecSpec(argv=["claude"]), created_at=now, lineage=f"L{k}")
        execs.append((rec.id, rec.state, enc.encode(rec)))
    events = []
    for i in range(n):
        k = i % LINEAGES
        events.append(enc.encode(Event(
            gseq=0, seq=0, type="agent.turn", time=now - rng.uniform(0, DAYS) * 86400,
            sandbox="default", exec=f"x{k:08d}", state="HEALTHY",
            data={"turn": i // LINEAGES + 1, "lineage": f"L{k}", "model": rng.choice(MODELS),
                  "usage": {"input_tokens": rng.randint(1, 50_000),
                            "output_tokens": rng.randint(1, 5_000),
                            "cache_read_tokens": rng.randint(0, 200_000)}})))
    con = sqlite3.connect(db)
    with con:
        con.executemany("INSERT INTO execs (id, sandbox_id, state, record) VALUES "
                        "(?, 'default', ?, ?)", execs)
        con.executemany("INSERT INTO events (stream, seq, body) VALUES ('bench', ?, ?)",
                        ((j + 1, body) for j, body in enumerate(events)))
    con.close()


def _measure(home: Path) -> dict[str, Any]:
    store = Store(home / "tether.db")
    journal = Journal(store, EventBus(store))
    svc = CostService(store, home, journal, cast(Any, None), Tasks(), Clock(), Faults(None),
                      tz=periods.zone("UTC"), daily_usd=1e6, daily_policy="pause")
    out: dict[str, Any] = {}
    for by in ("lineage", "day"):
        t0 = time.perf_counter()
        rep = asyncio.run(svc.report(by, None))
        out[f"report_{by}_s"] = time.perf_counter() - t0
        out[f"rows_{by}"] = len(rep["rows"])
    rec = LineageRecord(id="L7", config=AgentConfig(argv=["claude"], budget_usd=1e6))
    table = svc.prices()
    t0 = time.perf_counter()
    svc.lineage_spent(rec, table)
    out["lineage_cold_ms"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    svc.day_spent(dt.datetime.now(dt.UTC).date(), table)
    out["day_cold_ms"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    for _ in range(100):
        svc.over(rec)
    out["check_cached_us"] = (time.perf_counter() - t0) / 100 * 1e6
    store.close()
    return out


def run(opts: Options) -> BenchResult:
    n = 20_000 if opts.quick else 100_000
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tether-bench-cost-") as tmp:
        home = Path(tmp)
        _seed(home / "tether.db", n)
        r = _measure(home)
    per = n // LINEAGES
    rows = [
        Row("cost", f"cost.report --by lineage, {n} turns", f"{r['report_lineage_s']:.2f} s",
            f"{r['report_lineage_s'] / n * 1e6:.0f} µs/turn"),
        Row("cost", f"cost.report --by day, {n} turns", f"{r['report_day_s']:.2f} s", ""),
        Row("cost", f"first budget check after a start: a lineage's {per} turns",
            f"{r['lineage_cold_ms']:.1f} ms", ""),
        Row("cost", f"first budget check after a start: the day's ~{n // DAYS} turns",
            f"{r['day_cold_ms']:.1f} ms", ""),
        Row("cost", "budget check at a turn or tool call (kept current)",
            f"{r['check_cached_us']:.0f} µs", ""),
    ]
    return BenchResult("cost", "Cost report and budget checks", {"turns": n}, {"turns": n, **r},
                       rows, seconds=time.perf_counter() - t_start)
