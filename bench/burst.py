"""Bursts of starts: many starts at once, against tmux starting as many sessions.

1. **Back to back**: ``N`` (100) ``exec.start`` of ``sleep 600`` in the ``default``
   sandbox on one connection, each sent when the last one's reply came (a script
   starting sessions one after the other), the default sandbox's runtime ``auto`` (bwrap
   where it works, as for a user: its cwd a project directory in ``/tmp``); against ``N``
   ``tmux new-session -d sleep 600`` on a private tmux server, in alternating rounds of
   the same run. The figure is the round's wall time, start of the first to reply of
   the last (median of the rounds, and each round's ratio to the tmux round after it).
2. **At once**: the same ``N`` starts sent by 10 clients together (10 each, as a
   fleet placement or a script with ``&`` does), against ``N`` tmux sessions made by 10
   threads together.
3. What a burst cost: the daemon's CPU per start and the monitors' (each exec's
   monitor, from its handles: everything it used from its spawn to its child running),
   and an idle zygote's memory before the bursts and after them (the pool is back to
   its idle size once the bursts are over).
4. **Scheduled runs due at once**: ``M`` (500) jobs made due at one instant by moving the
   daemon's test clock (``bench/scheduler.py``'s burst, the process runtime): when the
   last run's exec started, after the move; against ``M`` ``Popen(["true"])`` from one
   thread (the floor of making that many processes here).

Between rounds every exec is SIGKILLed (``exec.cancel``) and the tmux server restarted,
so each round starts from the same idle pool and an equal number of processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    RawConn,
    Row,
    cpu_seconds,
    fmt_ms,
    fresh_home,
    kill_strays,
    percentile,
    reap_orphans,
)
from bench.scheduler import _burst as scheduled_burst
from bench.start_latency import _Tmux, _zygote_memory

COMMAND = ["sleep", "600"]
CLIENTS = 10


@contextlib.contextmanager
def _default_runtime(value: str) -> Iterator[None]:
    old = os.environ.get("TETHER_DEFAULT_RUNTIME")
    os.environ["TETHER_DEFAULT_RUNTIME"] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TETHER_DEFAULT_RUNTIME", None)
        else:
            os.environ["TETHER_DEFAULT_RUNTIME"] = old


def _proc_cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return 0.0


def _zygotes(ws: str) -> int:
    """Zygotes set up for ``ws`` (their bwrap's argv ends in the stub's name)."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if (argv and os.path.basename(argv[0]) == b"bwrap" and argv[-1] == b"tether-zygote"
                and os.fsencode(ws) in argv and not _is_bwrap(_ppid(int(d)))):
            n += 1  # the outer bwrap only: the sandbox's init is a bwrap too
    return n


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _is_bwrap(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0]) == b"bwrap"
    except OSError:
        return False


def _fresh_tmux(old: _Tmux) -> _Tmux:
    """A new tmux server (another socket name) in place of ``old``, killed."""
    old.kill_server()
    new = _Tmux()
    new.name = f"tb{os.getpid()}r{time.monotonic_ns()}"
    new.base[2] = new.name
    new.start_server()
    return new


def _parallel(n: int, clients: int, fn: Callable[[int], None]) -> None:
    """``fn(i)`` for i in range(n), spread over ``clients`` threads started together."""
    go = threading.Barrier(clients)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        go.wait()
        try:
            for i in range(k, n, clients):
                fn(i)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run(opts: Options) -> BenchResult:
    t_all = time.perf_counter()
    n = 50 if opts.quick else 100
    rounds = 2 if opts.quick else 3
    sched_n = 100 if opts.quick else 500
    ws = tempfile.mkdtemp(prefix="tbbu", dir="/tmp")
    tmux = _Tmux()
    data: dict[str, Any] = {"n": n, "rounds": rounds, "clients": CLIENTS}
    seq: dict[str, list[float]] = {"tether": [], "tmux": []}
    par: dict[str, list[float]] = {"tether": [], "tmux": []}
    per_start: list[float] = []
    cpu: dict[str, list[float]] = {"daemon_ms": [], "monitor_ms": []}
    bad: list[str] = []
    try:
        with _default_runtime("auto"), fresh_home() as d:
            d.start()
            with RawConn(d.socket, timeout=60) as conn:
                runtime = conn.result("sandbox.get", {"sandbox": "default"})["spec"]["runtime"]
                data["default_runtime"] = runtime
                started: list[str] = []
                lock = threading.Lock()

                def start(c: RawConn) -> None:
                    reply = c.call("exec.start", {"argv": COMMAND, "cwd": ws})
                    res = reply.get("result")
                    if isinstance(res, dict) and res.get("state") == "RUNNING":
                        with lock:
                            started.append(res["id"])
                    else:
                        bad.append(str(reply)[:300])

                def end_all() -> None:
                    for x in started:
                        conn.call("exec.cancel", {"exec": x, "signal": "KILL", "grace": 0})
                    deadline = time.time() + 60
                    while started and time.time() < deadline:
                        if conn.result("exec.get", {"exec": started[-1]})["state"] != "RUNNING":
                            break
                        time.sleep(0.05)
                    started.clear()
                    time.sleep(1.0)  # the pool back to idle

                def monitors_cpu(ids: list[str]) -> float:
                    total = 0.0
                    for x in ids:
                        with contextlib.suppress(OSError, ValueError, KeyError):
                            h = json.loads((d.home / "run" / f"{x}.handles.json").read_text())
                            total += _proc_cpu(int(h["monitor"]["pid"]))
                    return total

                for _ in range(5):  # the pool, the zygote, caches; then idle again
                    start(conn)
                    time.sleep(0.2)
                end_all()
                bad.clear()
                data["idle_zygotes_before"] = _zygotes(ws)
                zyg_before = _zygote_memory(ws)
                tmux.start_server()
                for _ in range(rounds):
                    c0 = _proc_cpu(d.pid)
                    t0 = time.perf_counter()
                    for _i in range(n):
                        a = time.perf_counter()
                        start(conn)
                        per_start.append(time.perf_counter() - a)
                    seq["tether"].append(time.perf_counter() - t0)
                    cpu["daemon_ms"].append((_proc_cpu(d.pid) - c0) / n * 1000)
                    cpu["monitor_ms"].append(monitors_cpu(started) / n * 1000)
                    end_all()
                    t0 = time.perf_counter()
                    for _i in range(n):
                        tmux.new_session()
                    seq["tmux"].append(time.perf_counter() - t0)
                    tmux = _fresh_tmux(tmux)
                    time.sleep(1.0)
                for _ in range(rounds):
                    conns = [RawConn(d.socket, timeout=60) for _ in range(CLIENTS)]
                    try:
                        t0 = time.perf_counter()
                        _parallel(n, CLIENTS, lambda i, cs=conns: start(cs[i % CLIENTS]))
                        par["tether"].append(time.perf_counter() - t0)
                    finally:
                        for c in conns:
                            c.close()
                    end_all()
                    t0 = time.perf_counter()
                    _parallel(n, CLIENTS, lambda i, t=tmux: t.new_session())
                    par["tmux"].append(time.perf_counter() - t0)
                    tmux = _fresh_tmux(tmux)
                    time.sleep(1.0)
                time.sleep(2.0)
                data["idle_zygotes_after"] = _zygotes(ws)
                zyg_after = _zygote_memory(ws)
            kill_strays(d.home)
            d.stop()
    finally:
        tmux.kill_server()
        shutil.rmtree(ws, ignore_errors=True)
        reap_orphans()

    sched = scheduled_burst(sched_n)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["true"]) for _ in range(sched_n)]
    popen_s = time.perf_counter() - t0
    for p in procs:
        p.wait()
    sched_last = max(sched["start_s"]) if sched["start_s"] else float("nan")

    med = {k: {m: statistics.median(v) for m, v in d_.items()}
           for k, d_ in (("seq", seq), ("par", par))}
    ratios = {k: [a / b for a, b in zip(d_["tether"], d_["tmux"], strict=True)]
              for k, d_ in (("seq", seq), ("par", par))}
    data.update({
        "back_to_back_s": seq, "at_once_s": par, "ratio_per_round": ratios,
        "per_start_ms": {p: percentile(per_start, p) * 1000 for p in (50, 90, 99)},
        "cpu_per_start_ms": cpu, "bad_starts": bad[:10],
        "idle_zygote_mib": {"before": zyg_before, "after": zyg_after},
        "scheduled": {"runs": sched["runs"], "started": len(sched["start_s"]),
                      "last_started_s": sched_last,
                      "start_ms": {p: percentile(sched["start_s"], p) * 1000
                                   for p in (50, 99, 100)},
                      "last_committed_s": max(sched["commit_s"]) if sched["commit_s"]
                      else float("nan"),
                      "popen_true_s": popen_s},
    })
    t_seq, x_seq = med["seq"]["tether"] * 1000, med["seq"]["tmux"] * 1000
    t_par, x_par = med["par"]["tether"] * 1000, med["par"]["tmux"] * 1000
    rt = data.get("default_runtime", "?")
    rows = [
        Row("burst", f"{n} starts back to back ({rt} default sandbox)", fmt_ms(t_seq),
            f"tmux {fmt_ms(x_seq)} ({t_seq / x_seq:.2f}x; rounds "
            f"{', '.join(f'{r:.2f}' for r in ratios['seq'])})", "<= tmux",
            t_seq <= x_seq and not bad),
        Row("burst", f"  one start in them, p50 / p99 (n={len(per_start)})",
            f"{fmt_ms(data['per_start_ms'][50])} / {fmt_ms(data['per_start_ms'][99])}",
            f"tmux {fmt_ms(x_seq / n)} per session (mean)"),
        Row("burst", f"{n} starts from {CLIENTS} clients at once", fmt_ms(t_par),
            f"tmux {fmt_ms(x_par)} ({t_par / x_par:.2f}x), {CLIENTS} threads", "<= tmux",
            t_par <= x_par and not bad),
        Row("burst", "  CPU per start: daemon / monitor",
            f"{statistics.median(cpu['daemon_ms']):.1f} / "
            f"{statistics.median(cpu['monitor_ms']):.1f} ms", ""),
    ]
    if zyg_before is not None:
        after = (f"{zyg_after['sandbox_rss']:.1f} MiB + monitor "
                 f"{zyg_after['monitor_rss']:.1f} MiB RSS" if zyg_after else "none found")
        rows.append(Row(
            "burst", "  one idle zygote: sandbox + its monitor, RSS",
            f"{zyg_before['sandbox_rss']:.1f} + {zyg_before['monitor_rss']:.1f} MiB",
            f"after the bursts: {after}; zygotes idle before/after "
            f"{data['idle_zygotes_before']}/{data['idle_zygotes_after']}"))
    s = data["scheduled"]
    rows.append(Row("burst", f"{sched_n} scheduled runs due at once: last exec started",
                    fmt_ms(sched_last * 1000),
                    f"{sched_n} x Popen(true) {fmt_ms(popen_s * 1000)}; p50 "
                    f"{fmt_ms(s['start_ms'][50])}, last committed "
                    f"{fmt_ms(s['last_committed_s'] * 1000)}"))
    notes = [f"starts that did not come back RUNNING: {len(bad)}"] if bad else []
    if rt != "bwrap":
        notes.append(f"the default sandbox ran {rt} here (bubblewrap unavailable): "
                     "these are not sandboxed starts")
    return BenchResult(
        name="burst", title="bursts of starts", rows=rows, notes=notes,
        params={"n": n, "rounds": rounds, "clients": CLIENTS, "command": COMMAND,
                "scheduled": sched_n},
        data=data, seconds=time.perf_counter() - t_all)
