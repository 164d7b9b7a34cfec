"""Command start-up: the wall time of one CLI command or one agent hook call, beside the
commands people compare it with, measured in the same run.

Against one running daemon (a sleeping exec, a finished one with a line of output, an
agent session), each command runs N times, round-robin so that load on the machine lands
on every command alike: ``tether ps``, ``tether status``, ``tether logs X``, one Claude
``PreToolUse`` hook call (``python -m tether.agent.hook claude PreToolUse``, the program
Claude Code runs on every tool call) beside ``python -c pass`` (the interpreter's own
start), ``tmux ls`` (a private tmux server) and ``docker ps`` (when docker answers).
Each run's output goes to a pipe that is read to the end, as a script would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.harness import BenchResult, Options, RawConn, Row, fmt_ms, fresh_home, summarize_ms

TARGET_CLI_MS = 60.0
TARGET_HOOK_MS = 40.0
TMUX_SOCKET = f"tether-bench-{os.getpid()}"
# The agent: hands its session and token to the bench, then idles.
CREDS_AGENT = 'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > "$0.tmp"; mv "$0.tmp" "$0"; ' \
              "exec sleep 3600"
TOOL_CALL = json.dumps({"session_id": "bench", "hook_event_name": "PreToolUse",
                        "tool_name": "Bash", "tool_input": {"command": "ls"}}).encode()


def _tether() -> list[str]:
    """The installed ``tether`` script beside this interpreter, as people run it."""
    script = Path(sys.executable).with_name("tether")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.cli.fast"]


def _once(argv: list[str], env: dict[str, str], stdin: bytes) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, input=stdin, capture_output=True, env=env)
    return time.perf_counter() - t0, p.returncode


def _answers(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def _tmux() -> Iterator[list[str] | None]:
    """``tmux ls`` against a private server holding one session, if tmux is installed."""
    if shutil.which("tmux") is None:
        yield None
        return
    base = ["tmux", "-L", TMUX_SOCKET]
    ok = _answers([*base, "new-session", "-d", "-s", "bench", "sleep 3600"])
    try:
        yield [*base, "ls"] if ok else None
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True)


def _agent_creds(sock: Path, scratch: Path) -> tuple[str, str]:
    creds = scratch / "creds"
    with RawConn(sock, timeout=30) as c:
        c.result("agent.start", {"argv": ["sh", "-c", CREDS_AGENT, str(creds)],
                                 "cwd": str(scratch), "revival": "reap"})
    deadline = time.monotonic() + 30
    while not creds.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the bench agent never wrote its session and token")
        time.sleep(0.02)
    session, token = creds.read_text().split()
    return session, token


def run(opts: Options) -> BenchResult:
    n = 15 if opts.quick else 40
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    with fresh_home() as d, _tmux() as tmux:
        d.start()
        home = str(d.home)
        with RawConn(d.socket, timeout=30) as c:
            c.result("exec.start", {"argv": ["sleep", "3600"], "name": "sleeper"})
            done = c.result("exec.start", {"argv": ["echo", "hello from tether"]})
            c.result("exec.wait", {"exec": done["id"], "timeout": 30})
        session, token = _agent_creds(d.socket, d.home)
        hook_env = {**env, "TETHER_HOME": home, "TETHER_SESSION": session,
                    "TETHER_TOKEN": token}
        tether = [*_tether(), "--home", home]
        cases: dict[str, tuple[list[str], dict[str, str], bytes]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], env, b""),
            "tether ps": ([*tether, "ps"], env, b""),
            "tether status": ([*tether, "status"], env, b""),
            "tether logs": ([*tether, "logs", done["id"]], env, b""),
            "hook call": ([sys.executable, "-m", "tether.agent.hook", "--home", home, "claude",
                           "PreToolUse"], hook_env, TOOL_CALL),
        }
        if tmux is not None:
            cases["tmux ls"] = (tmux, env, b"")
        if _answers(["docker", "ps"]):
            cases["docker ps"] = (["docker", "ps"], env, b"")
        times: dict[str, list[float]] = {k: [] for k in cases}
        codes: dict[str, set[int]] = {k: set() for k in cases}
        for argv, e, stdin in cases.values():  # warm the page cache, unmeasured
            _once(argv, e, stdin)
        for _ in range(n):
            for name, (argv, e, stdin) in cases.items():
                wall, code = _once(argv, e, stdin)
                times[name].append(wall)
                codes[name].add(code)
    stats = {k: summarize_ms(v) for k, v in times.items()}
    failed = {k: sorted(v) for k, v in codes.items() if v != {0}}
    if failed:
        raise RuntimeError(f"commands exited non-zero: {failed}")

    def cell(name: str) -> str:
        s = stats[name]
        return f"{fmt_ms(s['p50'])} (p90 {fmt_ms(s['p90'])})"

    baseline = ", ".join(f"{k} {fmt_ms(stats[k]['p50'])}"
                         for k in ("python -c pass", "tmux ls", "docker ps") if k in stats)
    rows = [Row("cli start", f"{k} median wall of {n}", cell(k), baseline,
                f"≤ {TARGET_CLI_MS:.0f} ms", stats[k]["p50"] <= TARGET_CLI_MS)
            for k in ("tether ps", "tether status", "tether logs")]
    rows.append(Row("cli start", f"hook call (claude PreToolUse) median wall of {n}",
                    cell("hook call"), baseline, f"≤ {TARGET_HOOK_MS:.0f} ms",
                    stats["hook call"]["p50"] <= TARGET_HOOK_MS))
    rows += [Row("cli start", f"{k} median wall of {n} (baseline)", cell(k), "")
             for k in ("python -c pass", "tmux ls", "docker ps") if k in stats]
    notes = [] if "docker ps" in stats else ["docker ps: docker does not answer here; no row"]
    if "tmux ls" not in stats:
        notes.append("tmux ls: tmux is not installed here; no row")
    return BenchResult(
        name="cli", title="command start-up", rows=rows, notes=notes,
        params={"runs": n, "commands": {k: v[0] for k, v in cases.items()}},
        data={"ms": stats, "seconds": {k: [round(x, 5) for x in v] for k, v in times.items()}},
    )
