"""Stand-in agent CLIs for daemon-level tests: ``tests/agents/standin_cli.py``
installed in a test's PATH under a CLI's name (see its docstring for what it does)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tether.client.blocking import Client
from tether.client.replies import LineageView

STANDIN = Path(__file__).resolve().parent / "agents" / "standin_cli.py"


def install(tmp: Path, name: str) -> Path:
    """The stand-in as ``name`` in a bin directory of its own."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
    exe.chmod(0o755)
    return bindir


def start(c: Client, tmp: Path, name: str, plan: dict[str, list[dict[str, Any]]],
          *args: str, **params: Any) -> LineageView:
    """An agent lineage running the stand-in as ``name`` with ``plan``."""
    bindir = install(tmp, name)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "STANDIN_PLAN": json.dumps(plan),
           "STANDIN_LOG": str(tmp / "standin.log")}
    params.setdefault("revival", "revive")
    return c.agent_start([name, *args], env=env, **params)


def log(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "standin.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def starts(tmp: Path) -> list[dict[str, Any]]:
    return [x for x in log(tmp) if "start" in x]
