"""Digest rollup: the time of one full pass over N ended execs (hours, days, weeks,
months), in-process against a real store, beside the floor of the same work done as
one SQL ``GROUP BY`` (counts per hour, nothing written).

The execs (a third of them agent attempts, one in ten failed) are spread over the
last 60 days; each agent attempt has two ``agent.turn`` events. A second pass with
nothing changed measures what the periodic pass costs on an idle home.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.harness import BenchResult, Options, Row
from tether.daemon.clock import Clock
from tether.daemon.digest.service import DigestService
from tether.daemon.events.bus import EventBus
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.digest import periods
from tether.model.layout import HomeLayout
from tether.model.records import Event, ExecRecord, ExecSpec
from tether.store import Store
from tether.store.digest import DigestTables

DAYS = 60
COMMANDS = ["pytest", "make", "npm", "cargo", "claude", "git", "ruff", "go"]


def _seed(db: Path, n: int) -> None:
    Store(db).close()
    rng = random.Random(7)
    now = time.time()
    enc = msgspec.json.Encoder()
    execs, events = [], []
    for i in range(n):
        ended = now - rng.uniform(0.1, DAYS) * 86400
        agent = i % 3 == 0
        ok = i % 10 != 0
        rec = ExecRecord(id=f"{i:012x}", sandbox="default",
                         state="FINISHED" if ok else "FAILED",
                         spec=ExecSpec(argv=[rng.choice(COMMANDS), "-x"]),
                         created_at=ended - 60, started_at=ended - 59, ended_at=ended,
                         exit_code=0 if ok else 1, lineage=f"L{i % 500}" if agent else None)
        execs.append((rec.id, rec.state, enc.encode(rec)))
        if agent:
            for turn in (1, 2):
                events.append(enc.encode(Event(
                    gseq=0, seq=0, type="agent.turn", time=ended - 30, sandbox="default",
                    exec=rec.id, state="HEALTHY", data={"turn": turn, "context_pct": 10.0 * turn,
                                                        "usage": {"input_tokens": 1000}})))
    con = sqlite3.connect(db)
    with con:
        con.executemany("INSERT INTO execs (id, sandbox_id, state, record) VALUES "
                        "(?, 'default', ?, ?)", execs)
        con.executemany("INSERT INTO events (stream, seq, body) VALUES ('bench', ?, ?)",
                        ((k + 1, body) for k, body in enumerate(events)))
    con.close()


def _floor(db: Path) -> float:
    con = sqlite3.connect(db)
    t0 = time.perf_counter()
    con.execute("SELECT CAST(json_extract(record, '$.ended_at') / 3600 AS INTEGER) AS h, "
                "COUNT(*), SUM(json_extract(record, '$.exit_code') != 0) FROM execs "
                "WHERE json_extract(record, '$.ended_at') IS NOT NULL GROUP BY h").fetchall()
    took = time.perf_counter() - t0
    con.close()
    return took


async def _pass(home: Path) -> tuple[float, Any, float]:
    store = Store(home / "tether.db")
    journal = Journal(store, EventBus(store))
    svc = DigestService(DigestTables(store), HomeLayout(home), journal, Clock(), Faults(None),
                        tz=periods.zone("UTC"))
    t0 = time.perf_counter()
    report = await svc.build()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    await svc.build()
    idle = time.perf_counter() - t0
    store.close()
    return first, report, idle


def run(opts: Options) -> BenchResult:
    n = 20_000 if opts.quick else 100_000
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tether-bench-digest-") as tmp:
        home = Path(tmp)
        _seed(home / "tether.db", n)
        floor = _floor(home / "tether.db")
        first, report, idle = asyncio.run(_pass(home))
    data = {"execs": n, "days": DAYS, "pass_s": first, "idle_pass_s": idle, "floor_s": floor,
            "built": report.built, "drafts": report.drafts}
    rows = [
        Row("digest", f"first pass, {n} execs over {DAYS} days ({report.built} nodes)",
            f"{first:.2f} s", f"{floor:.2f} s (GROUP BY floor)"),
        Row("digest", "  per exec", f"{first / n * 1e6:.0f} µs", f"{floor / n * 1e6:.1f} µs"),
        Row("digest", "a pass with nothing new (the periodic cost)", f"{idle * 1000:.0f} ms", ""),
    ]
    return BenchResult("digest", "Digest rollup (hours, days, weeks, months)", {"execs": n},
                       data, rows, seconds=time.perf_counter() - t_start,
                       notes=["floor: counts per hour in one SQL GROUP BY, nothing written; "
                              "a pass also reads each agent attempt's turns, writes each "
                              "node with its event and checkpoint, and adds up four levels"])
