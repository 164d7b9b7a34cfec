"""``python -m bench [--quick] [--only start,rpc] ...``: run, print, write JSON."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import (
    agents,
    burst,
    cli,
    cost,
    digest,
    egress,
    fleet,
    floods,
    foreground,
    logs,
    maintenance,
    memory,
    outbox,
    recovery,
    retention,
    rpc,
    sandboxes,
    scheduler,
    soak,
    start_latency,
    store_backends,
    store_check,
    terminal,
    web,
    web_scale,
)
from bench.harness import (
    BenchResult,
    Options,
    become_subreaper,
    machine_info,
    reap_orphans,
)
from bench.report import print_report, write_json

RESULTS = Path(__file__).resolve().parent / "results"

Runner = Callable[[Options, dict[str, Any]], BenchResult]

BENCHMARKS: dict[str, Runner] = {
    "start": lambda o, c: start_latency.run(o),
    "burst": lambda o, c: burst.run(o),
    "recovery": recovery.run,
    "rpc": lambda o, c: rpc.run(o),
    "logs": lambda o, c: logs.run(o),
    "memory": memory.run,
    "terminal": lambda o, c: terminal.run(o),
    "agents": lambda o, c: agents.run(o),
    "sandboxes": lambda o, c: sandboxes.run(o),
    "floods": lambda o, c: floods.run(o),
    "store_check": lambda o, c: store_check.run(o),
    "cli": lambda o, c: cli.run(o),
    "foreground": lambda o, c: foreground.run(o),
    "digest": lambda o, c: digest.run(o),
    "cost": lambda o, c: cost.run(o),
    "outbox": lambda o, c: outbox.run(o),
    "web": lambda o, c: web.run(o),
    "web_scale": lambda o, c: web_scale.run(o),
    "scheduler": lambda o, c: scheduler.run(o),
    "retention": lambda o, c: retention.run(o),
    "maintenance": lambda o, c: maintenance.run(o),
    "fleet": lambda o, c: fleet.run(o),
    "store_backends": lambda o, c: store_backends.run(o),
    "egress": lambda o, c: egress.run(o),
    "soak": lambda o, c: soak.run(o),
}
#: Run only when asked by name (``--only soak``, ``make soak``): ten minutes on its own.
NOT_BY_DEFAULT = {"soak"}
ALIASES = {"start_latency": "start", "latency": "start", "bursts": "burst", "log": "logs",
           "rss": "memory", "mem": "memory", "tty": "terminal", "pty": "terminal",
           "agent": "agents",
           "sandbox": "sandboxes", "docker": "sandboxes", "flood": "floods",
           "quick_check": "store_check", "store": "store_check",
           "startup": "cli", "run_cli": "foreground", "attach": "foreground",
           "fg": "foreground", "hook": "cli", "rollup": "digest", "webhooks": "outbox",
           "webhook": "outbox", "dashboard": "web", "dashboard_scale": "web_scale",
           "schedule": "scheduler",
           "cron": "scheduler", "prune": "retention",
           "lag": "maintenance", "loop_lag": "maintenance", "pgstore": "store_backends",
           "postgres": "store_backends", "proxy": "egress"}


def _names(value: str) -> list[str]:
    names = []
    for raw in value.split(","):
        name = ALIASES.get(raw.strip(), raw.strip())
        if not name:
            continue
        if name not in BENCHMARKS:
            raise argparse.ArgumentTypeError(
                f"unknown benchmark {raw!r}; choose from {', '.join(BENCHMARKS)}")
        names.append(name)
    return names


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a list of integers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return sizes


def parse(argv: list[str] | None) -> tuple[Options, list[str]]:
    p = argparse.ArgumentParser(prog="python -m bench", description=(
        "tether benchmarks: each tether figure beside its baseline, measured in the same "
        "run. Prints a table and writes bench/results/<name>.json and summary.json."))
    p.add_argument("--quick", action="store_true",
                   help="a short run (under about a minute): fewer samples, 100 execs, 256 MiB")
    p.add_argument("--only", type=_names, default=None, metavar="LIST",
                   help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    p.add_argument("--samples", type=int, default=None,
                   help="start-latency samples per method (default 200, quick 50)")
    p.add_argument("--gap", type=float, default=0.05,
                   help="pause between paced start samples, seconds (default 0.05)")
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="recovery sizes (default 100,1000, quick 100)")
    p.add_argument("--threads", type=int, default=8,
                   help="client threads starting the recovery execs (default 8)")
    p.add_argument("--log-mib", type=int, default=None,
                   help="bytes the log child writes, MiB (default 1024, quick 256)")
    p.add_argument("--log-reps", type=int, default=None,
                   help="log throughput repetitions (default 3)")
    p.add_argument("--rpc-seconds", type=float, default=None,
                   help="length of each RPC series, seconds (default 3, quick 1)")
    p.add_argument("--sandbox-samples", type=int, default=None,
                   help="sandbox samples per docker row (default 10, quick 4); process and "
                        "bwrap rows take 3x (create) and 5x (exec) as many")
    p.add_argument("--soak-seconds", type=float, default=None,
                   help="length of the soak (--only soak), seconds (default 600)")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="directory for the JSON files (default bench/results)")
    a = p.parse_args(argv)
    q = a.quick
    opts = Options(
        quick=q,
        samples=a.samples or (50 if q else 200),
        gap=a.gap,
        sizes=a.sizes or ([100] if q else [100, 1000]),
        threads=max(1, a.threads),
        log_bytes=(a.log_mib or (256 if q else 1024)) * 2**20,
        log_reps=a.log_reps or 3,
        rpc_seconds=a.rpc_seconds or (1.0 if q else 3.0),
        results=a.results,
        sandbox_samples=max(1, a.sandbox_samples) if a.sandbox_samples else None,
        soak_seconds=a.soak_seconds,
    )
    return opts, a.only or [n for n in BENCHMARKS if n not in NOT_BY_DEFAULT]


def main(argv: list[str] | None = None) -> int:
    opts, names = parse(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)  # piped or captured (make, CI): do not wrap at 80
    subreaper = become_subreaper()
    machine = machine_info()
    machine["subreaper"] = subreaper
    ctx: dict[str, Any] = {}
    results: list[BenchResult] = []
    errors: dict[str, str] = {}
    t_all = time.perf_counter()
    for name in names:
        console.print(f"[bold]running {name}[/bold] …")
        t0 = time.perf_counter()
        load0 = [round(x, 2) for x in os.getloadavg()]
        try:
            res = BENCHMARKS[name](opts, ctx)
        except KeyboardInterrupt:
            errors[name] = "interrupted"
            console.print("[red]interrupted[/red]")
            break
        except Exception as e:
            errors[name] = "".join(traceback.format_exception(e))
            console.print(f"[red]{name} failed:[/red] {e!r}")
            console.print(errors[name], markup=False, highlight=False)
            continue
        finally:
            reap_orphans()
        res.seconds = time.perf_counter() - t0
        res.load = {"before": load0, "after": [round(x, 2) for x in os.getloadavg()]}
        results.append(res)
        console.print(f"  done in {res.seconds:.1f} s (load average {load0[0]:.2f} → "
                      f"{res.load['after'][0]:.2f})")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(opts).items()}
    params["only"] = names
    if results:
        print_report(console, results, machine)
        written = write_json(results, machine, opts.results, params, errors)
        console.print(f"wrote {', '.join(str(p) for p in written)}")
    console.print(f"total {time.perf_counter() - t_all:.1f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
