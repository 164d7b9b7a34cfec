"""The printed table and the JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.harness import BenchResult


def _met(value: bool | None) -> str:
    if value is None:
        return ""
    return "[green]yes[/green]" if value else "[red]NO[/red]"


def table(results: list[BenchResult], machine: dict[str, Any]) -> Table:
    t = Table(title=f"tether benchmarks — {machine['nproc']} CPUs, "
                    f"{machine['mem_total_mib'] // 1024} GiB, Python {machine['python']}, "
                    f"Linux {machine['kernel']}",
              show_lines=False, header_style="bold")
    t.add_column("benchmark", style="cyan", no_wrap=True)
    t.add_column("metric")
    t.add_column("tether", justify="right", style="bold")
    t.add_column("baseline (same run)", justify="right")
    t.add_column("target", justify="right")
    t.add_column("met", justify="center")
    for i, res in enumerate(results):
        for row in res.rows:
            t.add_row(row.bench, row.metric, row.tether, row.baseline, row.target, _met(row.met))
        if i < len(results) - 1:
            t.add_section()
    return t


def print_report(console: Console, results: list[BenchResult], machine: dict[str, Any]) -> None:
    console.print(table(results, machine))
    for res in results:
        for note in res.notes:
            console.print(f"[dim]{res.name}: {note}[/dim]")


def write_json(results: list[BenchResult], machine: dict[str, Any], out_dir: Path,
               params: dict[str, Any], errors: dict[str, str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for res in results:
        path = out_dir / f"{res.name}.json"
        path.write_text(json.dumps(res.to_json(machine), indent=2, default=str) + "\n")
        written.append(path)
    targets = [{"benchmark": res.name, "bench": r.bench, "metric": r.metric, "tether": r.tether,
                "baseline": r.baseline, "target": r.target, "met": r.met}
               for res in results for r in res.rows if r.met is not None]
    summary = {
        "machine": machine, "options": params,
        "benchmarks": [res.name for res in results],
        "seconds": {res.name: round(res.seconds, 2) for res in results},
        "targets": targets,
        "all_targets_met": all(t["met"] for t in targets) if targets else None,
        "errors": errors,
        "rows": [{"benchmark": res.name, **vars(r)} for res in results for r in res.rows],
    }
    path = out_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    written.append(path)
    return written
