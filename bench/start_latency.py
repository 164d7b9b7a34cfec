"""Exec start latency: ``exec.start`` sent → child running, against the two ways
people start a background command without tether.

* tether: the JSON-RPC round trip of ``exec.start`` on an open connection. The
  daemon replies only after the monitor has reported the child's pid, i.e. once
  ``posix_spawn`` returned and the child runs.
* tether, bwrap: the same in a ``bwrap`` sandbox (the runtime of the ``default``
  sandbox where bubblewrap works), when bubblewrap can create a sandbox here.
* ``subprocess.Popen``: the time for ``Popen()`` to return (fork/exec done).
* ``tmux new-session -d``: the time for the tmux command to return, with a tmux
  server already running on a private socket (``-L``).

Samples are interleaved (tether, Popen, tmux, tether, ...) and paced by ``gap``
seconds so that each method finds an idle machine; a shorter back-to-back series
shows what happens when starts arrive faster than tether refills its pool of
idle monitors.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

from bench.harness import (
    BenchResult,
    Daemon,
    Options,
    RawConn,
    Row,
    fmt_ms,
    fresh_home,
    kill_strays,
    memory_of,
    percentile,
    reap_orphans,
    summarize_ms,
)
from tether.runtime import bwrap as bwrap_runtime

COMMAND = ["sleep", "600"]
WARMUP = 5


class _Tmux:
    """A private tmux server (``-L``), started before measuring and killed after."""

    def __init__(self) -> None:
        self.name = f"tb{os.getpid()}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.base = ["tmux", "-L", self.name, "-f", "/dev/null"]

    def start_server(self) -> None:
        subprocess.run([*self.base, "new-session", "-d", "-s", "keepalive", *COMMAND],
                       env=self.env, check=True, capture_output=True, timeout=30)

    def new_session(self) -> None:
        subprocess.run([*self.base, "new-session", "-d", *COMMAND], env=self.env,
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)

    def kill_server(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True,
                           timeout=30)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _zygote_memory(ws: str) -> dict[str, float] | None:
    """What one idle zygote of the bwrap sandbox on ``ws`` costs: its monitor, and the
    sandbox's processes below it (bwrap, the sandbox's init, the stub), RSS and Pss in MiB."""
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if not (argv and argv[-1] == b"tether-zygote" and os.fsencode(ws) in argv):
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        sandbox = [int(d)] + [p for c in _children(int(d)) for p in [c, *_children(c)]]
        mon, rest = memory_of(ppid), [memory_of(p) for p in sandbox]
        if mon is None or any(m is None for m in rest):
            continue
        return {"processes": 1 + len(sandbox),
                "monitor_rss": mon["VmRSS"], "monitor_pss": mon.get("Pss", 0.0),
                "sandbox_rss": round(sum(m["VmRSS"] for m in rest if m), 3),
                "sandbox_pss": round(sum(m.get("Pss", 0.0) for m in rest if m), 3)}
    return None


def _time(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(opts: Options) -> BenchResult:
    samples, gap = opts.samples, opts.gap
    burst = max(10, samples // 4)
    popens: list[subprocess.Popen[bytes]] = []
    tmux = _Tmux()
    bw = bwrap_runtime.probe()
    names = ["tether", *(["bwrap"] if bw.available else []), "popen", "tmux"]
    lat: dict[str, list[float]] = {k: [] for k in names}
    burst_lat: dict[str, list[float]] = {k: [] for k in names}
    bad: list[str] = []
    ws = tempfile.mkdtemp(prefix="tbst", dir="/tmp")
    zygote: dict[str, float] | None = None

    with fresh_home() as d:
        d.start()
        conn = RawConn(d.socket, timeout=60)

        def tether_start(params: dict[str, str] | None = None) -> None:
            reply = conn.call("exec.start", {"argv": COMMAND, **(params or {})})
            res = reply.get("result")
            if not (isinstance(res, dict) and res.get("state") == "RUNNING" and res.get("pid")):
                bad.append(str(reply)[:300])

        def popen_start() -> None:
            popens.append(subprocess.Popen(COMMAND, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))

        methods: dict[str, Callable[[], None]] = {"tether": tether_start}
        try:
            if bw.available:
                sb = conn.result("sandbox.create", {"name": "bw", "runtime": "bwrap",
                                                    "workspace": ws})
                methods["bwrap"] = lambda: tether_start({"sandbox": sb["id"]})
            methods |= {"popen": popen_start, "tmux": tmux.new_session}
            tmux.start_server()
            for fn in methods.values():  # warm caches, the pool and the tmux server
                for _ in range(WARMUP):
                    fn()
                    time.sleep(gap)
            bad.clear()
            for _ in range(samples):
                for name, fn in methods.items():
                    lat[name].append(_time(fn))
                    time.sleep(gap)
            time.sleep(0.5)
            if bw.available:
                zygote = _zygote_memory(ws)
            for name, fn in methods.items():
                time.sleep(0.5)
                for _ in range(burst):
                    burst_lat[name].append(_time(fn))
            status = conn.result("daemon.status")
        finally:
            conn.close()
            tmux.kill_server()
            for p in popens:
                p.kill()
                p.wait()
            _stop(d)
            shutil.rmtree(ws, ignore_errors=True)

    stats = {k: summarize_ms(v) for k, v in lat.items()}
    bstats = {k: summarize_ms(v) for k, v in burst_lat.items()}
    t50, x50, p50 = (percentile(lat[k], 50) * 1000 for k in ("tether", "tmux", "popen"))
    t99, x99, p99 = (percentile(lat[k], 99) * 1000 for k in ("tether", "tmux", "popen"))
    b50 = {k: percentile(v, 50) * 1000 for k, v in burst_lat.items()}
    met = t50 < x50 and not bad
    rows = [
        Row("exec start", f"p50 (paced, n={samples})", fmt_ms(t50),
            f"tmux {fmt_ms(x50)} · Popen {fmt_ms(p50)}", "< tmux p50", met),
        Row("exec start", "p99 (paced)", fmt_ms(t99),
            f"tmux {fmt_ms(x99)} · Popen {fmt_ms(p99)}"),
        Row("exec start", f"p50 (back-to-back, n={burst})", fmt_ms(b50["tether"]),
            f"tmux {fmt_ms(b50['tmux'])} · Popen {fmt_ms(b50['popen'])}"),
    ]
    if "bwrap" in lat:
        w50, w99 = (percentile(lat["bwrap"], q) * 1000 for q in (50, 99))
        rows += [
            Row("exec start, bwrap sandbox", f"p50 (paced, n={samples})", fmt_ms(w50),
                f"tmux {fmt_ms(x50)} ({w50 / x50:.2f}x)", "<= 0.5x tmux p50",
                w50 <= 0.5 * x50 and not bad),
            Row("exec start, bwrap sandbox", "p99 (paced)", fmt_ms(w99),
                f"tmux {fmt_ms(x99)} ({w99 / x99:.2f}x)", "<= tmux p99",
                w99 <= x99 and not bad),
            Row("exec start, bwrap sandbox", f"p50 (back-to-back, n={burst})",
                fmt_ms(b50["bwrap"]), f"tmux {fmt_ms(b50['tmux'])}"),
        ]
        if zygote is not None:
            rows.append(Row(
                "exec start, bwrap sandbox", "one idle zygote",
                f"{zygote['sandbox_rss']:.1f} MiB RSS",
                f"{int(zygote['processes']) - 1} sandbox processes (Pss "
                f"{zygote['sandbox_pss']:.1f} MiB) + an idle monitor "
                f"({zygote['monitor_rss']:.1f} MiB RSS)"))
    notes = [f"tether starts that did not come back RUNNING with a pid: {len(bad)}"] if bad else []
    return BenchResult(
        name="start_latency", title="exec start latency", rows=rows, notes=notes,
        params={"samples": samples, "gap_s": gap, "burst": burst, "warmup": WARMUP,
                "command": COMMAND, "pool": "daemon default"},
        data={"paced_ms": stats, "back_to_back_ms": bstats,
              "tether_p50_below_tmux_p50": t50 < x50, "bad_starts": bad[:10],
              "idle_zygote_mib": zygote,
              "daemon_counts": status.get("counts")},
    )


def _stop(d: Daemon) -> None:
    kill_strays(d.home)
    d.stop()
    reap_orphans()
