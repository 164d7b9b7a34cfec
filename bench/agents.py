"""Agent sessions: turn report latency, revival time, and the daemon's CPU with
hundreds of sessions heart-beating.

* Turn report latency: ``agent.turn`` sent → reply received, from one session on
  one open connection. The daemon replies only once the turn's drain snapshot
  is durable (tmp + fsync + rename + fsync dir) and the lineage record is
  committed. Baselines, interleaved call by call on the same connection and the
  same filesystem: a ``daemon.health`` round trip (the RPC floor) and a bare
  loop in this process that builds the same snapshot (the conversation grows
  by the same two messages per turn) and writes it atomically with fsync (the
  disk floor) — so the cost splits into RPC, fsync and tether's own work.
* Revival time: ``kill -9`` of an agent process → its revived attempt running,
  measured by the agent itself: its first statement writes a timestamp, which
  is compared with the kill time (same wall clock). The daemon runs with
  ``TETHER_AGENT_TICK=0.2``; the first revival's backoff (0.5 s) is part of the
  policy, so the figure minus the backoff is shown too, with the daemon's own
  milestones (death noticed, revival begun) from its journal. Baseline, same
  run, same script: ``exec.start`` sent → a fresh process running. A few more
  revivals with the default tick show what a stock daemon does.
* Daemon CPU: N agent sessions (a tiny Python agent: ``Session.heartbeat()``
  once a second, on drift-free deadlines), the daemon's utime + stime from
  /proc over a fixed window, as % of one core and µs per heartbeat (heartbeats
  counted by the agents). Baselines, same daemon: idle with no session over the
  same window; ``daemon.health`` at the same rate from as many connections (the
  cost of the wake-ups alone); ``agent.heartbeat`` and ``daemon.health`` back to
  back on one connection (the handlers alone). The same sessions kept alive but
  silent give the agent tick loop's own cost.

Every process is killed afterwards (the daemon first, so that nothing is
revived, then every command and monitor the handles files name).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Daemon,
    Options,
    RawConn,
    Row,
    cpu_seconds,
    fmt_ms,
    fmt_us,
    fresh_home,
    kill_strays,
    memory_of,
    percentile,
    read_handles,
    reap_orphans,
    summarize_ms,
)
from tether.agent import snapshot
from tether.daemon.agents import backoff
from tether.hostio.proc import is_same_process

FAST_TICK = 0.2
TURN_WARMUP = 10


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
USER_MSG = "please " + "refactor the parser " * 5  # ~100 bytes
ASSISTANT_MSG = "done: " + "changed lexer.py and parser.py, tests pass; " * 7  # ~300 bytes
HEALTH_CALLS = 10_000
SETTLE_S = 3.0

# The turn benchmark's agent: hands its session and token to the bench (which then
# speaks for it over its own connection) and idles.
TOKEN_AGENT = """\
import json, os, sys, time
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    json.dump({"session": os.environ["TETHER_SESSION"], "token": os.environ["TETHER_TOKEN"],
               "pid": os.getpid()}, f)
os.rename(tmp, sys.argv[1])
time.sleep(3600)
"""

# The revival benchmark's agent: its first statement notes when it started running.
STAMP_AGENT = """\
import time
T = time.time()
import os, sys
with open(sys.argv[1], "a") as f:
    f.write("%s %d %r\\n" % (os.environ.get("TETHER_ATTEMPT", "0"), os.getpid(), T))
time.sleep(3600)
"""

# The CPU benchmark's agent: one heartbeat a second (none while the pause file exists)
# until the stop file appears, then exit 0 (the lineage FINISHES: nothing to revive).
# Its client never autostarts a daemon: at cleanup the daemon goes before the agents.
HEARTBEAT_AGENT = """\
import dataclasses, os, sys, time
from tether.agent.session import Session
from tether.client.blocking import Client
count_path, stop_path, pause_path = sys.argv[1], sys.argv[2], sys.argv[3]
s = Session.from_env()
s = dataclasses.replace(s, _client=Client(s.home, autostart=False, reconnect=5.0))
fd = os.open(count_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
ok = err = 0
deadline = time.monotonic()
while not os.path.exists(stop_path):
    if not os.path.exists(pause_path):
        try:
            s.heartbeat()
            ok += 1
        except Exception:
            err += 1
        os.pwrite(fd, b"%d %d\\n" % (ok, err), 0)
    deadline += 1.0
    time.sleep(max(0.0, deadline - time.monotonic()))
sys.exit(0)
"""


# ---------------------------------------------------------------------- plumbing
@contextlib.contextmanager
def env_var(key: str, value: str | None) -> Iterator[None]:
    """Set (or unset) an environment variable for a daemon spawned in the block."""
    old = os.environ.get(key)
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


@contextlib.contextmanager
def agent_home(tick: float | None) -> Iterator[Daemon]:
    """A fresh home and a SERVING daemon with the given agent tick (None: default).
    Afterwards the daemon is killed first (so that no agent is revived), then every
    agent and monitor; the home is removed."""
    with fresh_home() as d:
        with env_var("TETHER_AGENT_TICK", None if tick is None else str(tick)):
            d.start()
        try:
            yield d
        finally:
            d.kill9()
            kill_strays(d.home)
            reap_orphans()


def write_script(d: Daemon, name: str, text: str) -> Path:
    path = d.home / name
    path.write_text(text)
    return path


def start_agent(c: RawConn, argv: list[str], **params: Any) -> dict[str, Any]:
    lin: dict[str, Any] = c.result("agent.start", {
        "argv": argv, "provider": "generic", "env": {"PATH": os.environ.get("PATH", "")},
        "revival": "revive", **params})
    if lin.get("status") != "ACTIVE" or not lin.get("exec_view"):
        raise RuntimeError(f"agent did not start: {lin.get('status')} {lin.get('reason')}")
    return lin


def wait_for(pred: Any, timeout: float, what: str, interval: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def fsync_write(directory: Path, name: str, data: bytes) -> None:
    """The disk floor: tmp + write + fsync + rename + fsync dir, nothing else."""
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, directory / name)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ---------------------------------------------------------------------- turn latency
def bench_turns(d: Daemon, turns: int) -> dict[str, Any]:
    token_file = d.home / "token.json"
    script = write_script(d, "token_agent.py", TOKEN_AGENT)
    bare_dir = d.home / "bare-drain"
    bare_dir.mkdir()
    argv = [sys.executable, str(script), str(token_file)]
    with RawConn(d.socket, timeout=60) as c:
        lin = start_agent(c, argv)
        wait_for(token_file.exists, 30, "the turn agent's token", 0.005)
        ident = json.loads(token_file.read_text())
        convo: list[dict[str, Any]] = []  # the bare loop's copy of the conversation
        usage = {"input_tokens": 0, "output_tokens": 0}
        lat: dict[str, list[float]] = {"turn": [], "health": [], "bare": []}
        bad: list[str] = []
        clock = time.perf_counter
        size = 0
        for n in range(1, TURN_WARMUP + turns + 1):
            msgs = [{"role": "user", "content": f"{USER_MSG} #{n}"},
                    {"role": "assistant", "content": f"{ASSISTANT_MSG} #{n}"}]
            pct = 1.0 + 60.0 * n / (TURN_WARMUP + turns)  # stays HEALTHY
            params = {"session": ident["session"], "token": ident["token"],
                      "context_pct": pct, "model": "bench-1", "messages": msgs,
                      "usage": {"input_tokens": 1000, "output_tokens": 100}}
            t0 = clock()
            reply = c.call("agent.turn", params)
            t1 = clock()
            c.result("daemon.health")
            t2 = clock()
            convo.extend(msgs)
            usage = {"input_tokens": usage["input_tokens"] + 1000,
                     "output_tokens": usage["output_tokens"] + 100}
            snap = snapshot.build(
                lineage=lin["id"], instance="bench", provider="generic", model="bench-1",
                usage=usage, messages=convo, turn=n, provider_session_id=None,
                loop_config={"argv": argv, "revival": "revive"})
            data = json.dumps(snap, separators=(",", ":")).encode()
            fsync_write(bare_dir, f"{lin['id']}.json", data)
            t3 = clock()
            res = reply.get("result")
            if not (isinstance(res, dict) and res.get("turn") == n):
                bad.append(str(reply)[:300])
            if n > TURN_WARMUP:
                lat["turn"].append(t1 - t0)
                lat["health"].append(t2 - t1)
                lat["bare"].append(t3 - t2)
                size = len(data)
        snap_path = d.home / "drain" / f"{lin['id']}.json"
        daemon_snap = snapshot.read(snap_path)
        final = c.result("lineage.get", {"lineage": lin["id"]})
    tail = max(1, turns // 10)
    return {
        "turns": turns, "warmup": TURN_WARMUP,
        "ms": {k: summarize_ms(v) for k, v in lat.items()},
        "last_tenth_ms": {k: summarize_ms(v[-tail:]) for k, v in lat.items()},
        "first_tenth_ms": {k: summarize_ms(v[:tail]) for k, v in lat.items()},
        "snapshot_bytes_final": snap_path.stat().st_size + _size(snapshot.turns_path(snap_path)),
        "bare_bytes_final": size,
        "snapshot_messages_final": len(daemon_snap["messages"]),
        "lineage_turns": final["turns"], "lineage_lifecycle": final["lifecycle"],
        "bad_replies": bad[:10], "bad_count": len(bad),
        "raw": lat,
    }


# ---------------------------------------------------------------------- revival
def _stamps(path: Path) -> list[tuple[int, int, float]]:
    """(attempt, pid, wall time at its first statement) per line of a stamp file."""
    out: list[tuple[int, int, float]] = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((int(parts[0]), int(parts[1]), float(parts[2])))
    return out


def _events_since(c: RawConn, since: int) -> tuple[list[dict[str, Any]], int]:
    res = c.result("events.list", {"since": since, "limit": 10000})
    evs: list[dict[str, Any]] = res["events"]
    return evs, int(res.get("next") or since)


def bench_revivals(d: Daemon, rounds: int, tag: str) -> dict[str, Any]:
    """``rounds`` times: a fresh lineage, kill -9 its agent, wait for attempt 2 to run.
    Interleaved with the baseline: exec.start of the same script."""
    script = write_script(d, "stamp_agent.py", STAMP_AGENT)
    samples: list[dict[str, float]] = []
    fresh: list[dict[str, float]] = []
    with RawConn(d.socket, timeout=60) as c:
        _, gseq = _events_since(c, 0)
        for i in range(rounds):
            # Baseline: a fresh exec of the same script.
            stamp = d.home / f"fresh-{tag}-{i}.stamps"
            t0 = time.time()
            x = c.result("exec.start", {"argv": [sys.executable, str(script), str(stamp)]})
            t1 = time.time()
            wait_for(lambda s=stamp: bool(_stamps(s)), 30, "a fresh exec's stamp")
            fresh.append({"rpc": t1 - t0, "running": _stamps(stamp)[0][2] - t0})
            c.result("exec.cancel", {"exec": x["id"], "signal": "KILL"})

            # A lineage: wait for attempt 1, kill it, wait for attempt 2.
            stamp = d.home / f"agent-{tag}-{i}.stamps"
            lin = start_agent(c, [sys.executable, str(script), str(stamp)])
            wait_for(lambda s=stamp: bool(_stamps(s)), 30, "the agent's first stamp")
            attempt1, pid, _ = _stamps(stamp)[0]
            if attempt1 != 1 or pid != lin["exec_view"]["pid"]:
                raise RuntimeError(f"unexpected first attempt {attempt1} pid {pid}, "
                                   f"exec pid {lin['exec_view']['pid']}")
            _, gseq = _events_since(c, gseq)
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda s=stamp: len(_stamps(s)) >= 2, 60, "the revived attempt's stamp")
            attempt2, pid2, t_run = _stamps(stamp)[1]
            wait_for(lambda lid=lin["id"]: _revived(c, lid), 30, "lineage ACTIVE, attempt 2",
                     0.005)
            evs, gseq = _events_since(c, gseq)
            mine = [e for e in evs if e["type"] == "lineage.state"
                    and (e.get("data") or {}).get("lineage") == lin["id"]]
            when = {e["state"]: e["time"] for e in mine}
            samples.append({
                "running": t_run - t_kill,
                "noticed": when.get("ORPHANED", float("nan")) - t_kill,
                "reviving": when.get("REVIVING", float("nan")) - t_kill,
                "active": when.get("ACTIVE", float("nan")) - t_kill,
                "attempt": float(attempt2), "pid_changed": float(pid2 != pid),
            })
            c.result("exec.cancel", {"exec": _lineage_exec(c, lin["id"]), "signal": "KILL"})
            time.sleep(0.1)
    return {"samples": samples, "fresh": fresh}


def _revived(c: RawConn, lineage: str) -> bool:
    rec = c.result("lineage.get", {"lineage": lineage})
    return bool(rec["attempt"] == 2 and rec["status"] == "ACTIVE")


def _lineage_exec(c: RawConn, lineage: str) -> str:
    rec = c.result("lineage.get", {"lineage": lineage})
    return str(rec["exec"])


def _median(values: list[float]) -> float:
    vals = [v for v in values if v == v]
    return statistics.median(vals) if vals else float("nan")


# ---------------------------------------------------------------------- CPU
def _count_files(d: Daemon) -> list[Path]:
    return sorted((d.home / "counts").glob("*.count"))


def _counts(paths: list[Path]) -> tuple[int, int, int]:
    """(heartbeats ok, errors, agents that reported) summed over the count files."""
    ok = err = seen = 0
    for p in paths:
        try:
            parts = p.read_bytes().split()
        except OSError:
            continue
        if len(parts) >= 2:
            ok += int(parts[0])
            err += int(parts[1])
            seen += 1
    return ok, err, seen


def _monitor_cpu(d: Daemon) -> float:
    total = 0.0
    for h in read_handles(d.home):
        m = h.get("monitor") or {}
        pid, st = m.get("pid"), m.get("start_time")
        if isinstance(pid, int) and isinstance(st, int) and is_same_process(pid, st):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += cpu_seconds(pid)
    return total


def _window(d: Daemon, seconds: float) -> tuple[float, float]:
    """(daemon CPU seconds, wall seconds) over a window of ``seconds``."""
    c0, w0 = cpu_seconds(d.pid), time.perf_counter()
    time.sleep(seconds)
    return cpu_seconds(d.pid) - c0, time.perf_counter() - w0


def paced_health(d: Daemon, conns: int, seconds: float) -> dict[str, float]:
    """The connection pattern of the heartbeats without their handler: ``conns``
    connections, each sending one daemon.health a second, spread evenly over the
    second. Returns the daemon's CPU and the calls made."""
    socks: list[RawConn] = []
    try:
        for _ in range(conns):  # one at a time: a burst would overflow the listen backlog
            socks.append(RawConn(d.socket, timeout=60))
            socks[-1].result("daemon.health")
        gap = 1.0 / conns
        calls = 0
        c0, w0 = cpu_seconds(d.pid), time.perf_counter()
        nxt = time.monotonic()
        end = nxt + seconds
        while nxt < end:
            socks[calls % conns].result("daemon.health")
            calls += 1
            nxt += gap
            time.sleep(max(0.0, nxt - time.monotonic()))
        cpu, wall = cpu_seconds(d.pid) - c0, time.perf_counter() - w0
    finally:
        for c in socks:
            c.close()
    return {"cpu_s": cpu, "wall_s": wall, "calls": calls, "connections": conns,
            "cpu_us_per_call": cpu / calls * 1e6 if calls else float("nan")}


def bench_cpu(d: Daemon, sessions: int, window: float, threads: int) -> dict[str, Any]:
    script = write_script(d, "heartbeat_agent.py", HEARTBEAT_AGENT)
    counts_dir = d.home / "counts"
    counts_dir.mkdir()
    stop, pause = d.home / "stop", d.home / "pause"
    out: dict[str, Any] = {"sessions": sessions, "window_s": window, "threads": threads,
                           "pause_window_s": window / 3}

    # Baselines on the same daemon, before any session exists.
    time.sleep(SETTLE_S)
    idle_cpu, idle_wall = _window(d, window)
    out["idle"] = {"cpu_s": idle_cpu, "wall_s": idle_wall}
    with RawConn(d.socket, timeout=60) as c:
        for _ in range(200):
            c.result("daemon.health")
        c0 = cpu_seconds(d.pid)
        for _ in range(HEALTH_CALLS):
            c.result("daemon.health")
        out["health_cpu_us"] = (cpu_seconds(d.pid) - c0) / HEALTH_CALLS * 1e6
        # The heartbeat handler alone: agent.heartbeat back to back on one connection.
        token_file = d.home / "token.json"
        token_agent = write_script(d, "token_agent.py", TOKEN_AGENT)
        lin = start_agent(c, [sys.executable, str(token_agent), str(token_file)])
        wait_for(token_file.exists, 30, "the token agent's token", 0.005)
        ident = json.loads(token_file.read_text())
        auth = {"session": ident["session"], "token": ident["token"]}
        for _ in range(200):
            c.result("agent.heartbeat", auth)
        c0 = cpu_seconds(d.pid)
        for _ in range(HEALTH_CALLS):
            c.result("agent.heartbeat", auth)
        out["hot_heartbeat_cpu_us"] = (cpu_seconds(d.pid) - c0) / HEALTH_CALLS * 1e6
        c.result("exec.cancel", {"exec": lin["exec"], "signal": "KILL"})
    out["daemon_idle_mem"] = memory_of(d.pid)
    out["paced_health"] = paced_health(d, sessions, window / 3)

    # N sessions, started from several client threads.
    counter = itertools.count()
    errors: list[str] = []
    started = [0] * threads

    def worker(k: int) -> None:
        try:
            with RawConn(d.socket, timeout=300) as c:
                while (i := next(counter)) < sessions:
                    try:
                        start_agent(c, [sys.executable, str(script),
                                        str(counts_dir / f"{i:05d}.count"), str(stop),
                                        str(pause)])
                        started[k] += 1
                    except Exception as e:
                        errors.append(repr(e)[:300])
        except (OSError, ValueError) as e:
            errors.append(f"client {k}: {e!r}")

    t0 = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out["start_s"] = time.perf_counter() - t0
    out["started"] = sum(started)
    out["start_errors"] = errors[:10]
    paths: list[Path] = []

    def all_beating() -> bool:
        nonlocal paths
        paths = _count_files(d)
        n = int(out["started"])
        return len(paths) >= n and _counts(paths)[2] >= n

    wait_for(all_beating, 300, "every agent's first heartbeat", 0.25)
    out["all_beating_s"] = time.perf_counter() - t0
    time.sleep(SETTLE_S)

    ok0, err0, _ = _counts(paths)
    mon0 = _monitor_cpu(d)
    busy_cpu, busy_wall = _window(d, window)
    ok1, err1, seen = _counts(paths)
    mon1 = _monitor_cpu(d)
    out["busy"] = {"cpu_s": busy_cpu, "wall_s": busy_wall, "heartbeats": ok1 - ok0,
                   "heartbeat_errors": err1 - err0, "agents_reporting": seen,
                   "monitors_cpu_s": mon1 - mon0}
    out["daemon_busy_mem"] = memory_of(d.pid)
    with RawConn(d.socket, timeout=60) as c:
        live = c.result("lineage.list", {})["lineages"]
    out["live_lineages"] = len(live)
    out["heartbeat_classes"] = dict(sorted(
        {k: sum(1 for r in live if r.get("heartbeat") == k)
         for k in {r.get("heartbeat") or "-" for r in live}}.items()))
    out["revivals"] = sum(int(r.get("revivals") or 0) for r in live)

    # The same sessions alive but silent: what the tick loop costs on its own.
    pause.touch()
    time.sleep(1.5)  # heartbeats in flight land
    ok2, _, _ = _counts(paths)
    paused_cpu, paused_wall = _window(d, out["pause_window_s"])
    ok3, _, _ = _counts(paths)
    out["paused"] = {"cpu_s": paused_cpu, "wall_s": paused_wall, "heartbeats": ok3 - ok2}

    # Let the agents exit 0 (lineages FINISHED, nothing revived) before the kill -9s.
    stop.touch()
    t_stop = time.perf_counter()
    with RawConn(d.socket, timeout=60) as c, contextlib.suppress(RuntimeError):
        wait_for(lambda: not c.result("lineage.list", {})["lineages"], 30,
                 "every agent to exit", 0.25)
    out["stop_s"] = time.perf_counter() - t_stop
    return out


# ---------------------------------------------------------------------- run
def run(opts: Options) -> BenchResult:
    q = opts.quick
    turns = 100 if q else 500
    rounds = 5 if q else 10
    stock_rounds = 1 if q else 3
    sessions = 100 if q else 500
    window = 10.0 if q else 30.0
    first_backoff = backoff(1)

    with agent_home(FAST_TICK) as d:
        turn = bench_turns(d, turns)
        rev = bench_revivals(d, rounds, "fast")
    with agent_home(None) as d:
        stock = bench_revivals(d, stock_rounds, "stock")
    with agent_home(None) as d:
        cpu = bench_cpu(d, sessions, window, opts.threads)

    rows: list[Row] = []
    notes: list[str] = []
    # Turn latency.
    ms = turn["ms"]
    last = turn["last_tenth_ms"]
    kib = turn["snapshot_bytes_final"] / 1024
    rows += [
        Row("agent turn", f"p50, agent.turn → reply (n={turns})", fmt_ms(ms["turn"]["p50"]),
            f"health {fmt_ms(ms['health']['p50'])} · bare fsync write "
            f"{fmt_ms(ms['bare']['p50'])}"),
        Row("agent turn", "p99", fmt_ms(ms["turn"]["p99"]),
            f"health {fmt_ms(ms['health']['p99'])} · bare fsync write "
            f"{fmt_ms(ms['bare']['p99'])}"),
        Row("agent turn", f"p50 of the last {len(turn['raw']['turn'][-max(1, turns // 10):])} "
            f"turns (snapshot {kib:.0f} KiB)", fmt_ms(last["turn"]["p50"]),
            f"health {fmt_ms(last['health']['p50'])} · bare fsync write "
            f"{fmt_ms(last['bare']['p50'])}"),
    ]
    if turn["bad_count"]:
        notes.append(f"{turn['bad_count']} agent.turn replies were not the expected turn: "
                     f"{turn['bad_replies'][:2]}")

    # Revival.
    running = [s["running"] * 1000 for s in rev["samples"]]
    fresh_run = [f["running"] * 1000 for f in rev["fresh"]]
    fresh_rpc = [f["rpc"] * 1000 for f in rev["fresh"]]
    noticed = [s["noticed"] * 1000 for s in rev["samples"]]
    reviving = [s["reviving"] * 1000 for s in rev["samples"]]
    stock_running = [s["running"] * 1000 for s in stock["samples"]]
    b_ms = first_backoff * 1000
    med = _median(running)
    rows += [
        Row("revival", f"median kill -9 → revived agent running (n={rounds}, tick "
            f"{FAST_TICK:g} s)", fmt_ms(med),
            f"fresh exec.start → running {fmt_ms(_median(fresh_run))}"),
        Row("revival", f"  minus the {first_backoff:g} s backoff", fmt_ms(med - b_ms),
            f"(exec.start reply {fmt_ms(_median(fresh_rpc))})"),
        Row("revival", "  death noticed · revival begun (median)",
            f"{fmt_ms(_median(noticed))} · {fmt_ms(_median(reviving))}", ""),
        Row("revival", f"  min / max (n={rounds})",
            f"{fmt_ms(min(running))} / {fmt_ms(max(running))}",
            f"{fmt_ms(min(fresh_run))} / {fmt_ms(max(fresh_run))}"),
        Row("revival", f"median, default tick (n={stock_rounds})", fmt_ms(_median(stock_running)),
            f"backoff {fmt_ms(b_ms)}"),
    ]

    # CPU.
    busy, idle = cpu["busy"], cpu["idle"]
    busy_pct = busy["cpu_s"] / busy["wall_s"] * 100
    idle_pct = idle["cpu_s"] / idle["wall_s"] * 100
    paused = cpu["paused"]
    paused_pct = paused["cpu_s"] / paused["wall_s"] * 100
    beats = busy["heartbeats"]
    per_beat = (busy["cpu_s"] - idle["cpu_s"] * busy["wall_s"] / idle["wall_s"]) / beats * 1e6 \
        if beats else float("nan")
    gross = busy["cpu_s"] / beats * 1e6 if beats else float("nan")
    rows += [
        Row("agent CPU", f"daemon, {cpu['started']} sessions, 1 heartbeat/s each "
            f"({window:g} s)", f"{busy_pct:.1f} % of a core",
            f"idle, no session: {idle_pct:.2f} %"),
        Row("agent CPU", f"per heartbeat, net of idle ({beats / busy['wall_s']:.0f}/s)",
            fmt_us(per_beat / 1000),
            f"daemon.health, same rate and conns "
            f"{fmt_us(cpu['paced_health']['cpu_us_per_call'] / 1000)}"),
        Row("agent CPU", "handler alone: back to back on one connection",
            f"heartbeat {fmt_us(cpu['hot_heartbeat_cpu_us'] / 1000)}",
            f"daemon.health {fmt_us(cpu['health_cpu_us'] / 1000)}"),
        Row("agent CPU", f"daemon, the same sessions silent ({paused['wall_s']:.0f} s): tick "
            "loop only", f"{paused_pct:.1f} % of a core", f"idle, no session: {idle_pct:.2f} %"),
    ]
    if cpu["started"] < sessions or cpu["start_errors"]:
        notes.append(f"only {cpu['started']} of {sessions} sessions started: "
                     f"{cpu['start_errors'][:2]}")
    if busy["heartbeat_errors"]:
        notes.append(f"{busy['heartbeat_errors']} heartbeats failed during the window")
    if cpu["revivals"]:
        notes.append(f"{cpu['revivals']} sessions were revived during the CPU run")
    notes.append(
        f"CPU run: {cpu['started']} sessions started in {cpu['start_s']:.1f} s; their monitors "
        f"used {busy['monitors_cpu_s'] / busy['wall_s'] * 100:.1f} % of a core together; "
        f"heartbeat classes {cpu['heartbeat_classes']}")
    notes.append(
        f"turn: the daemon's snapshot after {turns + TURN_WARMUP} turns holds "
        f"{turn['snapshot_messages_final']} messages ({kib:.0f} KiB, base and appended turns); "
        "a turn appends its own messages (the base is rewritten when the lines outgrow "
        "it), while the baseline rewrites the whole conversation every turn")

    raw_turn = turn.pop("raw")
    return BenchResult(
        name="agents", title="agent sessions: turns, revival, heartbeat CPU", rows=rows,
        notes=notes,
        params={"turns": turns, "turn_warmup": TURN_WARMUP, "revivals": rounds,
                "revivals_default_tick": stock_rounds, "tick_s": FAST_TICK,
                "first_backoff_s": first_backoff, "sessions": sessions, "window_s": window,
                "threads": opts.threads, "message_bytes": [len(USER_MSG), len(ASSISTANT_MSG)]},
        data={"turn": {**turn, "p50_by_tenth_ms": _tenths(raw_turn["turn"])},
              "revival": {"fast_tick": _rev_ms(rev), "default_tick": _rev_ms(stock)},
              "cpu": {**cpu, "busy_pct_core": round(busy_pct, 3),
                      "idle_pct_core": round(idle_pct, 3),
                      "us_per_heartbeat_net": round(per_beat, 2),
                      "us_per_heartbeat_gross": round(gross, 2)}},
    )


def _tenths(lat: list[float]) -> list[float]:
    step = max(1, len(lat) // 10)
    return [round(percentile(lat[i:i + step], 50) * 1000, 4) for i in range(0, len(lat), step)]


def _rev_ms(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "samples_ms": [{k: round(v * 1000, 2) if k not in ("attempt", "pid_changed") else v
                        for k, v in s.items()} for s in r["samples"]],
        "fresh_ms": [{k: round(v * 1000, 2) for k, v in f.items()} for f in r["fresh"]],
        "median_running_ms": round(_median([s["running"] * 1000 for s in r["samples"]]), 2),
        "median_fresh_running_ms": round(_median([f["running"] * 1000 for f in r["fresh"]]), 2),
    }


__all__ = ["run"]
