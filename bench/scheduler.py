"""Scheduler overhead: an idle daemon holding 10,000 jobs, and how late fire times are met.

1. Idle CPU: the daemon's CPU over a window, with no job (baseline), then with N jobs
   (``--every 1h``, none due in the window), scaled to seconds of CPU per minute.
2. Lateness: M more jobs, added evenly over E seconds with ``every`` E (counted from
   each job's creation), so their first fire times are spread evenly over the next E
   seconds (M/E fires a second), each running ``true``. Per run: the commit of its fire
   time (``RunRecord.created_at``) and its exec's start, minus the nominal fire time;
   p50/p99. Baseline: an asyncio task in
   this process sleeping until each of the same instants (the machine's own timer lateness,
   same run).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    Row,
    cpu_seconds,
    fmt_ms,
    fresh_home,
    percentile,
)
from tests.rawrpc import RawConn

JOBS = 10_000
LATE_JOBS = 500
EVERY = 20.0  # seconds: the lateness jobs fire once within the window


def _add(conn: RawConn, n: int, prefix: str, every: float,
         pace: float = 0.0) -> list[dict[str, Any]]:
    """``n`` jobs; with ``pace``, one every ``pace`` seconds (their fire times as spread)."""
    out = []
    t0 = time.perf_counter()
    for i in range(n):
        if pace:
            time.sleep(max(0.0, t0 + i * pace - time.perf_counter()))
        out.append(conn.result("schedule.add", {"name": f"{prefix}{i}", "argv": ["true"],
                                                "every": every}))
    return out


def _idle(pid: int, seconds: float) -> float:
    """CPU seconds per minute the daemon used over ``seconds`` of idling."""
    c0, w0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.perf_counter() - w0) * 60.0


def _timer_baseline(instants: list[float]) -> list[float]:
    async def sleeper() -> list[float]:
        late = []
        for t in sorted(instants):
            await asyncio.sleep(max(0.0, t - time.time()))
            late.append(time.time() - t)
        return late
    return asyncio.run(sleeper())


def _burst(n: int) -> dict[str, Any]:
    """``n`` jobs made due at one instant by moving a test clock past all their fire times
    (``TETHER_TEST_CLOCK``; within the 60 s grace, so none is *missed*): when each fire
    time is committed and its exec started, after the move."""
    with fresh_home() as d:
        clock = d.home / "bench-clock"
        clock.write_text("0")
        old = os.environ.get("TETHER_TEST_CLOCK")
        os.environ["TETHER_TEST_CLOCK"] = str(clock)
        try:
            d.start()
        finally:
            if old is None:
                os.environ.pop("TETHER_TEST_CLOCK", None)
            else:
                os.environ["TETHER_TEST_CLOCK"] = old
        with RawConn(d.socket, 60.0) as conn:
            added = _add(conn, n, "burst", 3600.0)
            last = max(j["next_fire"] for j in added)
            t_move = time.time()
            clock.write_text(repr(last + 1.0 - t_move))
            runs = _settled(conn, added)
    return {"runs": len(runs),
            "commit_s": [r["created_at"] - t_move for r in runs],
            "start_s": [r["started_at"] - t_move for r in runs if r.get("started_at")]}


def _settled(conn: RawConn, added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    deadline = time.time() + 120
    runs: list[dict[str, Any]] = []
    while time.time() < deadline:
        runs = [r for j in added for r in conn.result(
            "schedule.show", {"job": j["id"], "limit": 1})["recent"]]
        if len(runs) >= len(added) and all(r["state"] in ("SUCCESS", "FAILED")
                                           for r in runs):
            break
        time.sleep(0.5)
    return runs


def run(opts: Options) -> BenchResult:
    jobs = 2_000 if opts.quick else JOBS
    late_n = 100 if opts.quick else LATE_JOBS
    window = 10.0 if opts.quick else 30.0
    t_start = time.perf_counter()
    data: dict[str, Any] = {"jobs": jobs, "late_jobs": late_n, "window_s": window}
    with fresh_home() as d:
        d.start()
        with RawConn(d.socket, 60.0) as conn:
            data["idle_cpu_s_per_min_no_jobs"] = _idle(d.pid, window)
            t0 = time.perf_counter()
            _add(conn, jobs, "idle", 3600.0)
            data["add_ms_per_job"] = (time.perf_counter() - t0) / jobs * 1000
            time.sleep(1.0)
            data["idle_cpu_s_per_min"] = _idle(d.pid, window)
            added = _add(conn, late_n, "late", EVERY, pace=EVERY / late_n)
            fires = [j["next_fire"] for j in added]
            baseline = _timer_baseline(fires)  # runs while the daemon fires the same times
            runs = _settled(conn, added)
    burst = _burst(late_n)
    commit = [r["created_at"] - r["fire_at"] for r in runs]
    started = [r["started_at"] - r["fire_at"] for r in runs if r.get("started_at")]
    data.update({
        "runs": len(runs), "failed": sum(1 for r in runs if r["state"] != "SUCCESS"),
        "commit_late_ms": {p: percentile(commit, p) * 1000 for p in (50, 99)},
        "start_late_ms": {p: percentile(started, p) * 1000 for p in (50, 99)},
        "timer_late_ms": {p: percentile(baseline, p) * 1000 for p in (50, 99)},
        "burst": {"runs": burst["runs"],
                  "commit_ms": {p: percentile(burst["commit_s"], p) * 1000
                                for p in (50, 99, 100)},
                  "start_ms": {p: percentile(burst["start_s"], p) * 1000
                               for p in (50, 99, 100)}},
    })
    rows = [
        Row("scheduler", f"idle daemon CPU per minute, {jobs} jobs",
            f"{data['idle_cpu_s_per_min'] * 1000:.0f} ms",
            f"{data['idle_cpu_s_per_min_no_jobs'] * 1000:.0f} ms (no job)"),
        Row("scheduler", "schedule.add per job", fmt_ms(data["add_ms_per_job"]), ""),
    ]
    for p in (50, 99):
        rows.append(Row("scheduler", f"fire time committed, lateness p{p} ({len(runs)} runs)",
                        fmt_ms(data["commit_late_ms"][p]),
                        f"{fmt_ms(data['timer_late_ms'][p])} (asyncio timer)"))
        rows.append(Row("scheduler", f"  its exec started, lateness p{p}",
                        fmt_ms(data["start_late_ms"][p]), ""))
    b = data["burst"]
    rows.append(Row("scheduler", f"{b['runs']} fire times due at once: last committed",
                    fmt_ms(b["commit_ms"][100]),
                    f"p50 {fmt_ms(b['commit_ms'][50])}"))
    rows.append(Row("scheduler", "  their execs started: last",
                    fmt_ms(b["start_ms"][100]), f"p50 {fmt_ms(b['start_ms'][50])}"))
    return BenchResult("scheduler", "Scheduler: idle cost with many jobs, fire-time lateness",
                       {"jobs": jobs, "late_jobs": late_n, "every_s": EVERY,
                        "window_s": window}, data, rows,
                       seconds=time.perf_counter() - t_start,
                       notes=["CPU is read from /proc in clock ticks (10 ms): over the "
                              f"{window:.0f} s windows an idle figure is within ±20 ms/min",
                              "lateness: the run's commit (and its exec's start) minus the "
                              "nominal fire time, jitter 0; the late jobs' fire times are "
                              f"spread evenly, {late_n / EVERY:.0f} a second",
                              "burst: a test clock moved past every fire time at once "
                              "(the daemon polls it every 50 ms); times after the move",
                              "baseline: an asyncio task in the bench process sleeping until "
                              "the same instants, during the same run"])
