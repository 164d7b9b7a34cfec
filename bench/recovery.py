"""Recovery: start N execs, ``kill -9`` the daemon, start a new one, and time the
new daemon from spawn to ``daemon.health == SERVING`` — which it only answers
once recovery is over — then check that ``daemon.status`` reports all N
re-adopted.

Baseline, same home, same run: the identical kill -9 / restart cycle with no
running exec (the daemon's fixed cost: interpreter start, imports, store, bind).

The populated home is also where the memory benchmark measures the daemon and
the monitors, so the readings are kept in the shared context.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

from bench.harness import (
    BenchResult,
    Daemon,
    Options,
    RawConn,
    Row,
    fmt_ms,
    fresh_home,
    memory_of,
    read_handles,
)
from tether.hostio.proc import is_same_process

COMMAND = ["sleep", "600"]
BASELINE_RESTARTS = 3
MONITOR_SAMPLES = 25
TARGET_MS = 1000.0


def start_many(d: Daemon, n: int, threads: int) -> tuple[int, list[str]]:
    """Start ``n`` execs from ``threads`` client connections in parallel.
    Returns how many came back RUNNING and the errors seen."""
    counter = itertools.count()
    errors: list[str] = []
    ok = [0] * threads

    def worker(k: int) -> None:
        try:
            with RawConn(d.socket, timeout=120) as c:
                while next(counter) < n:
                    reply = c.call("exec.start", {"argv": COMMAND})
                    res = reply.get("result")
                    if isinstance(res, dict) and res.get("state") == "RUNNING":
                        ok[k] += 1
                    else:
                        errors.append(str(reply.get("error", reply))[:300])
        except (OSError, ValueError) as e:
            errors.append(f"client {k}: {e!r}")

    workers = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(ok), errors


def sample_monitors(d: Daemon, limit: int = MONITOR_SAMPLES) -> list[dict[str, Any]]:
    """VmRSS/RssAnon/Pss of up to ``limit`` live monitors, spread over the execs."""
    mons = []
    for h in read_handles(d.home):
        m = h.get("monitor") or {}
        if isinstance(m.get("pid"), int) and isinstance(m.get("start_time"), int):
            mons.append((m["pid"], m["start_time"]))
    mons.sort()
    step = max(1, len(mons) // limit)
    out: list[dict[str, Any]] = []
    for pid, st in mons[::step][:limit]:
        mem = memory_of(pid)
        if mem is not None and is_same_process(pid, st):
            out.append({"pid": pid, **mem})
    return out


def live_monitors(d: Daemon) -> int:
    n = 0
    for h in read_handles(d.home):
        m = h.get("monitor") or {}
        if isinstance(m.get("pid"), int) and isinstance(m.get("start_time"), int) \
                and is_same_process(m["pid"], m["start_time"]):
            n += 1
    return n


def run_one(n: int, opts: Options) -> dict[str, Any]:
    """One full cycle for ``n`` execs. Everything is killed and removed afterwards."""
    with fresh_home() as d:
        d.start()
        baseline_s: list[float] = []
        baseline_rec_ms: list[float] = []
        for _ in range(BASELINE_RESTARTS):
            d.kill9()
            baseline_s.append(d.start())
            with RawConn(d.socket, timeout=30.0) as c:
                baseline_rec_ms.append(float(c.result("daemon.status")["recovery"]["ms"]))
        idle_daemon = memory_of(d.pid)

        t0 = time.perf_counter()
        started, errors = start_many(d, n, opts.threads)
        start_s = time.perf_counter() - t0
        with RawConn(d.socket, timeout=30.0) as c:
            before = c.result("daemon.status")
        daemon_before = memory_of(d.pid)
        monitors = sample_monitors(d)
        alive_before = live_monitors(d)

        d.kill9()
        serving_s = d.start()
        with RawConn(d.socket, timeout=30.0) as c:
            after = c.result("daemon.status")
        daemon_after = memory_of(d.pid)
        alive_after = live_monitors(d)

    rec = after.get("recovery") or {}
    return {
        "n": n, "threads": opts.threads, "started": started, "start_errors": errors[:10],
        "start_seconds": round(start_s, 3),
        "starts_per_second": round(started / start_s, 1) if start_s else None,
        "live_monitors_before_kill": alive_before, "live_monitors_after_recovery": alive_after,
        "recovery_serving_ms": round(serving_s * 1000, 2),
        "recovery": rec,
        "all_adopted": rec.get("adopted") == n and started == n,
        "watched_after": (after.get("counts") or {}).get("watched"),
        "baseline_restart_ms": [round(s * 1000, 2) for s in baseline_s],
        "baseline_restart_ms_median": round(statistics.median(baseline_s) * 1000, 2),
        "baseline_recovery_step_ms": baseline_rec_ms,
        "memory": {"daemon_idle": idle_daemon, "daemon_before_kill": daemon_before,
                   "daemon_after_recovery": daemon_after, "monitors": monitors,
                   "execs_before_kill": (before.get("counts") or {}).get("watched")},
    }


def run(opts: Options, ctx: dict[str, Any]) -> BenchResult:
    runs: list[dict[str, Any]] = []
    rows: list[Row] = []
    notes: list[str] = []
    for n in opts.sizes:
        r = run_one(n, opts)
        runs.append(r)
        ctx.setdefault("populations", {})[n] = r
        rec = r["recovery"]
        serving = r["recovery_serving_ms"]
        adopted = f"{rec.get('adopted', '?')}/{n} adopted"
        if rec.get("failed") or rec.get("finished"):
            adopted += f", {rec.get('finished', 0)} finished, {rec.get('failed', 0)} failed"
        rows.append(Row(f"recovery, {n} execs", "kill -9 → SERVING, all re-adopted",
                        f"{fmt_ms(serving)} ({adopted})",
                        f"0 execs: {fmt_ms(r['baseline_restart_ms_median'])}",
                        f"< {TARGET_MS / 1000:g} s", serving < TARGET_MS and r["all_adopted"]))
        rows.append(Row(f"recovery, {n} execs", "recovery step (status.recovery.ms)",
                        f"{rec.get('ms', '?')} ms",
                        f"0 execs: {statistics.median(r['baseline_recovery_step_ms']):g} ms"))
        notes.append(f"{n} execs: starting them took {r['start_seconds']:.1f} s "
                     f"({r['starts_per_second']}/s from {r['threads']} client threads); "
                     f"{r['started']} RUNNING, {len(r['start_errors'])} errors")
    return BenchResult(
        name="recovery", title="recovery after kill -9", rows=rows, notes=notes,
        params={"sizes": opts.sizes, "threads": opts.threads, "command": COMMAND,
                "baseline_restarts": BASELINE_RESTARTS},
        data={"runs": runs},
    )
