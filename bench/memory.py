"""Memory: RSS of the daemon with N running execs and of one monitor.

Readings come from the recovery setup (the largest size run): the daemon that
started the N execs (just before its kill -9), the daemon that re-adopted them,
and a spread of live monitors. VmRSS and RssAnon from /proc/PID/status; Pss from
/proc/PID/smaps_rollup (RSS with shared pages divided among their sharers,
which is what N monitors really cost together).

Baselines, same run: the same daemon idle with no exec, and a bare interpreter
started the way a monitor is (``python -I -S``) doing nothing.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from bench import recovery
from bench.harness import BenchResult, Options, Row, finish, memory_of, popen

TARGET_MONITOR_MIB = 12.0


def bare_interpreter() -> dict[str, float]:
    proc = popen([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"],
                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        mem = memory_of(proc.pid) or {}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)
    return mem


def _med(samples: list[dict[str, Any]], key: str) -> float:
    vals = [float(s[key]) for s in samples if key in s]
    return statistics.median(vals) if vals else float("nan")


def _max(samples: list[dict[str, Any]], key: str) -> float:
    vals = [float(s[key]) for s in samples if key in s]
    return max(vals) if vals else float("nan")


def _mib(mem: dict[str, Any] | None, key: str = "VmRSS") -> str:
    if not mem or key not in mem:
        return "n/a"
    return f"{float(mem[key]):.1f} MiB"


def run(opts: Options, ctx: dict[str, Any]) -> BenchResult:
    n = max(opts.sizes)
    pops: dict[int, dict[str, Any]] = ctx.get("populations", {})
    pop = pops.get(n)
    source = "recovery benchmark run"
    if pop is None:
        source = "own run of the recovery setup"
        pop = recovery.run_one(n, opts)
        pops[n] = pop
        ctx["populations"] = pops
    mem = pop["memory"]
    bare = bare_interpreter()
    mons: list[dict[str, Any]] = mem["monitors"]
    idle, before = mem["daemon_idle"], mem["daemon_before_kill"]
    after = mem["daemon_after_recovery"]
    mon_rss, mon_max = _med(mons, "VmRSS"), _max(mons, "VmRSS")
    per_exec_kib = ((before or {}).get("VmRSS", 0) - (idle or {}).get("VmRSS", 0)) * 1024 / n
    rows = [
        Row("memory", f"daemon VmRSS, {n} execs (started / re-adopted)",
            f"{_mib(before)} / {_mib(after)}", f"idle daemon {_mib(idle)}"),
        Row("memory", f"daemon RssAnon, {n} execs (started / re-adopted)",
            f"{_mib(before, 'RssAnon')} / {_mib(after, 'RssAnon')}",
            f"idle daemon {_mib(idle, 'RssAnon')}"),
        Row("memory", f"monitor VmRSS (median / max of {len(mons)})",
            f"{mon_rss:.1f} / {mon_max:.1f} MiB",
            f"bare python -I -S {_mib(bare)}", f"< {TARGET_MONITOR_MIB:g} MiB",
            mon_max < TARGET_MONITOR_MIB if mons else False),
        Row("memory", "monitor RssAnon / Pss (median)",
            f"{_med(mons, 'RssAnon'):.1f} / {_med(mons, 'Pss'):.1f} MiB",
            f"bare python {_mib(bare, 'RssAnon')} / {_mib(bare, 'Pss')}"),
    ]
    notes = [f"daemon growth with {n} execs it started: {per_exec_kib:.1f} KiB VmRSS per exec"]
    return BenchResult(
        name="memory", title="memory", rows=rows, notes=notes,
        params={"execs": n, "monitor_samples": len(mons), "unit": "MiB (from /proc kB = KiB)",
                "source": source},
        data={"daemon_idle": idle, "daemon_with_execs_started": before,
              "daemon_with_execs_readopted": after,
              "daemon_growth_per_exec_kib": round(per_exec_kib, 2),
              "monitors": mons,
              "monitor_median": {k: _med(mons, k) for k in ("VmRSS", "RssAnon", "RssFile", "Pss")},
              "monitor_max_vmrss": mon_max, "bare_interpreter": bare},
    )
