"""Log throughput: a child writing N bytes to stdout.

* tether: ``exec.start`` of ``head -c N /dev/zero`` → ``exec.wait`` returning
  FINISHED (the monitor hands the child its log file as stdout, so the figure
  includes start, the write, the fsynced exit file and the daemon noticing);
* direct: ``sh -c 'head -c N /dev/zero > FILE'`` in the same file system,
  timed from spawn to exit.

Repetitions alternate (direct, tether, direct, ...); each file is deleted and
the page cache written back (``sync``) between runs, outside the timing. The
median of the repetitions is reported.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from bench.harness import BenchResult, Options, RawConn, Row, fresh_home

TARGET_RATIO = 0.90


def _cmd(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


def direct(size: int, path: Path) -> float:
    shell = " ".join(_cmd(size)) + f" > {path}"
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", shell], check=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    written = path.stat().st_size
    path.unlink()
    if written != size:
        raise RuntimeError(f"direct run wrote {written} bytes, expected {size}")
    return elapsed


def under_tether(size: int, sock: Path) -> tuple[float, float]:
    """Seconds from exec.start sent to exec.wait's FINISHED reply, and the child's own
    run time as the monitor recorded it (ended_at - started_at)."""
    with RawConn(sock, timeout=3600) as c:
        t0 = time.perf_counter()
        started = c.result("exec.start", {"argv": _cmd(size)})
        done = c.result("exec.wait", {"exec": started["id"]})
        elapsed = time.perf_counter() - t0
    log = Path(done["stdout_path"])
    written = log.stat().st_size
    log.unlink()
    if done["state"] != "FINISHED" or done.get("exit_code") != 0 or written != size:
        raise RuntimeError(f"tether run ended {done['state']} exit {done.get('exit_code')} "
                           f"with {written} bytes, expected {size}")
    return elapsed, float(done["ended_at"]) - float(done["started_at"])


def run(opts: Options) -> BenchResult:
    size, reps = opts.log_bytes, opts.log_reps
    times: dict[str, list[float]] = {"direct": [], "tether": []}
    child: list[float] = []
    with fresh_home() as d:
        d.start()
        target = d.home / "direct.out"
        for _ in range(reps):
            os.sync()
            times["direct"].append(direct(size, target))
            os.sync()
            total, own = under_tether(size, d.socket)
            times["tether"].append(total)
            child.append(own)
        os.sync()

    med = {k: statistics.median(v) for k, v in times.items()}
    mbs = {k: size / 1e6 / v for k, v in med.items()}
    ratio = mbs["tether"] / mbs["direct"]
    label = f"{size / 2**30:g} GiB" if size >= 2**30 else f"{size / 2**20:g} MiB"
    rows = [
        Row("log throughput", f"{label} to stdout (median of {reps})",
            f"{mbs['tether']:,.0f} MB/s ({med['tether']:.2f} s)",
            f"cmd > file {mbs['direct']:,.0f} MB/s ({med['direct']:.2f} s)",
            f"≥ {TARGET_RATIO:.0%} of direct", ratio >= TARGET_RATIO),
        Row("log throughput", "tether / direct", f"{ratio:.1%}", "100%"),
    ]
    overhead = statistics.median(t - c for t, c in zip(times["tether"], child, strict=True))
    notes = [f"tether's fixed cost around the child (start, exit file, notice): "
             f"{overhead * 1000:.1f} ms of {med['tether'] * 1000:.0f} ms (median)"]
    return BenchResult(
        name="logs", notes=notes, title="log throughput", rows=rows,
        params={"bytes": size, "reps": reps, "command": _cmd(size),
                "filesystem_dir": "/tmp (tether home)"},
        data={"seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
              "median_seconds": {k: round(v, 4) for k, v in med.items()},
              "mb_per_s": {k: round(v, 1) for k, v in mbs.items()},
              "ratio": round(ratio, 4),
              "tether_child_run_seconds": [round(x, 4) for x in child],
              "tether_overhead_seconds": [round(t - c, 4) for t, c in zip(times["tether"], child,
                                                                            strict=True)]},
    )
