"""The soak (``make soak``): ten minutes of mixed load on one daemon, to show that what
it holds stays bounded and flat (issue 22).

Load, all at once, for ``--soak-seconds`` (600; ``SOAK_SECONDS`` for ``make soak``):

* agents reporting turns at full speed **from inside bwrap sandboxes** (the default
  sandbox under ``auto``; the process runtime where bwrap cannot run, said in a note):
  ``AGENTS`` generic agents speaking to ``agent.sock`` by hand — two well-behaved (they
  wait ``retry_after`` when rate-limited), one hostile (it never waits), one sending a
  256 KiB turn every tenth turn (the per-turn cap and the snapshot's). Each lives
  ``AGENT_LIFE`` seconds and exits 0, and a new one takes its place: a RUNNING exec pins
  the journal's compaction, and agents come and go in real life too;
* execs started and ended: ``EXECS_PER_S`` a second, each ``echo`` and a short sleep;
* schedules firing: ``JOBS`` jobs every second;
* webhooks delivering: a hook on every ``exec.finished`` to a real HTTP receiver on
  127.0.0.1 (``tests/receiver.py``);
* a subscriber flood: ``READERS`` connections subscribed from ``since=0`` and read,
  and ``STALLED`` subscribed that never read, replaced every ``CHURN`` seconds.

Retention runs at a minute (``TETHER_KEEP_EVENTS`` / ``_LOGS`` / ``_RUN_FILES``), so
the journal reaches its steady state within the soak: at the 30-day default it would
grow for 30 days at this load, as it is meant to.

Measured every ``SAMPLE`` seconds: the daemon's RSS, ``tether.db`` and its WAL,
``drain/``; and ``daemon.health`` on one connection every 50 ms, its p99 per
``WINDOW`` seconds. Printed: each at the start (the first minute), its peak and at
the end (the last minute); the closing note says whether they are bounded and flat.
Written: ``bench/results/soak.json`` with every sample. Reports, never asserts
(``tests/e2e/test_soak.py`` runs a short one with generous sanity bounds).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    RawConn,
    Row,
    fresh_home,
    memory_of,
    percentile,
)
from tests.receiver import Receiver
from tether.client.blocking import Client
from tether.runtime import bwrap

SECONDS = 600.0
AGENTS = 4
AGENT_LIFE = 90.0
EXECS_PER_S = 4.0
JOBS = 3
READERS = 24
STALLED = 24
CHURN = 15.0
SAMPLE = 5.0
WINDOW = 60.0
HEALTH_EVERY = 0.05
SOAK_ENV = {
    "TETHER_DEFAULT_RUNTIME": "auto",
    "TETHER_KEEP_EVENTS": "60s",
    "TETHER_KEEP_LOGS": "60s",
    "TETHER_KEEP_RUN_FILES": "60s",
    "TETHER_RETENTION_INTERVAL": "30s",
    "TETHER_RETENTION_FIRST_PASS": "30s",
    "TETHER_LOG_LEVEL": "WARNING",
}

# A generic agent: turns as fast as it can on its socket (agent.sock in bwrap), by hand.
# argv: kind (polite, hostile, big), seconds to live. Its counts go to stats.json.
AGENT = r'''
import json, os, socket, sys, time
kind, life = sys.argv[1], float(sys.argv[2])
auth = {"session": os.environ["TETHER_SESSION"], "token": os.environ["TETHER_TOKEN"]}
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_SOCKET"])
f = s.makefile("rwb")
stats = {"ok": 0, "limited": 0, "other": 0, "big": 0}
small = [{"role": "user", "content": "next step"}, {"role": "assistant", "content": "done " * 200}]
big = [{"role": "assistant", "content": "b" * (250 * 1024)}]
t0 = last = time.monotonic()
n = 0
while time.monotonic() - t0 < life:
    n += 1
    msgs = big if kind == "big" and n % 10 == 0 else small
    f.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": "agent.turn", "params": {
        **auth, "context_pct": 20, "usage": {"input_tokens": 1000, "output_tokens": 200},
        "messages": msgs}}).encode() + b"\n")
    f.flush()
    r = json.loads(f.readline())
    err = r.get("error")
    if err is None:
        stats["ok"] += 1
        stats["big"] += msgs is big
    elif err["data"].get("code") == "RATE_LIMITED":
        stats["limited"] += 1
        if kind != "hostile":
            time.sleep(err["data"]["retry_after"])
    else:
        stats["other"] += 1
        time.sleep(0.05)
    if time.monotonic() - last > 2:
        last = time.monotonic()
        with open("stats.tmp", "w") as out:
            json.dump(stats, out)
        os.replace("stats.tmp", "stats.json")
with open("stats.tmp", "w") as out:
    json.dump(stats, out)
os.replace("stats.tmp", "stats.json")
'''


class _Load:
    """The load's threads, their counts and their errors; ``stop`` ends them all."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counts: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def error(self, key: str) -> None:
        with self.lock:
            self.errors[key] = self.errors.get(key, 0) + 1

    def spawn(self, name: str, fn: Callable[[], None]) -> None:
        def run() -> None:
            while not self.stop.is_set():
                try:
                    fn()
                except Exception as e:  # counted and retried: a soak does not stop
                    self.error(f"{name}: {type(e).__name__}: {str(e)[:80]}")
                    self.stop.wait(0.5)
        t = threading.Thread(target=run, name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)


def run(opts: Options, seconds: float | None = None) -> BenchResult:
    seconds = float(seconds or getattr(opts, "soak_seconds", None) or SECONDS)
    saved = {k: os.environ.get(k) for k in SOAK_ENV}
    os.environ.update(SOAK_ENV)
    sandboxed = bwrap.probe().available
    try:
        with fresh_home() as d:
            d.start()
            return _soak(d.home, d.pid, seconds, sandboxed)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _soak(home: Path, pid: int, seconds: float, sandboxed: bool) -> BenchResult:
    c = Client(home, autostart=False)
    c.sandbox_create("plain", runtime="process")
    load = _Load()
    samples: list[dict[str, Any]] = []
    pings: list[tuple[float, float]] = []  # (time since start, latency s)
    work = home.parent / f"{home.name}-agents"
    work.mkdir()
    t0 = time.monotonic()
    with Receiver() as rx:
        c.hook_add("soak", ["exec.finished"], url=rx.url)
        for j in range(JOBS):
            c.schedule_add(f"tick{j}", ["true"], every=1.0, sandbox="plain")
        _agents(load, home, work, sandboxed)
        _execs(load, home)
        _subscribers(load, home)
        _health(load, home, pings, t0)
        while time.monotonic() - t0 < seconds:
            samples.append(_sample(home, pid, time.monotonic() - t0))
            time.sleep(max(0.0, SAMPLE - (time.monotonic() - t0) % SAMPLE))
        samples.append(_sample(home, pid, time.monotonic() - t0))
        load.join()
        delivered = len(rx.received)
    agents = _agent_totals(work)
    st = c.status()
    c.close()
    return _report(seconds, sandboxed, samples, pings, load, agents, delivered,
                   st.counts.execs if st.counts else {})


# ---------------------------------------------------------------------- the load
def _agents(load: _Load, home: Path, work: Path, sandboxed: bool) -> None:
    kinds = ["polite", "polite", "hostile", "big"][:AGENTS]
    for i, kind in enumerate(kinds):
        slot = work / f"a{i}"
        slot.mkdir()
        c = Client(home, autostart=False)  # one per thread: a client is not shared

        def keep_one_running(kind: str = kind, slot: Path = slot, c: Client = c) -> None:
            gen = load.counts.get(f"agents.{kind}.started", 0)
            where = slot / f"g{gen}"
            where.mkdir()
            (where / "agent.py").write_text(AGENT)
            lin = c.agent_start([sys.executable, "agent.py", kind, str(AGENT_LIFE)],
                                provider="generic", cwd=str(where),
                                sandbox="default" if sandboxed else "plain")
            load.count(f"agents.{kind}.started")
            deadline = time.monotonic() + AGENT_LIFE + 60
            while not load.stop.is_set() and time.monotonic() < deadline:
                rec = c.lineage_get(lin.id)
                if rec.status not in ("ACTIVE", "REVIVING", "ORPHANED"):
                    break
                load.stop.wait(2.0)

        load.spawn(f"agent-{i}", keep_one_running)


def _execs(load: _Load, home: Path) -> None:
    c = Client(home, autostart=False)
    last: list[str] = []

    def one() -> None:
        x = c.exec_start(["sh", "-c", "echo soak; sleep 0.3"], sandbox="plain")
        load.count("execs.started")
        last.append(x.id)
        if len(last) > 8:  # the ends are real: wait for an older one now and then
            done = c.exec_wait(last.pop(0), timeout=30)
            load.count("execs.ended" if done.state == "FINISHED" else "execs.other")
        load.stop.wait(1.0 / EXECS_PER_S)

    load.spawn("execs", one)


def _subscribers(load: _Load, home: Path) -> None:
    sock = str(home / "tether.sock")
    sub = b'{"jsonrpc":"2.0","id":1,"method":"events.subscribe","params":{"since":0}}\n'

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        s.sendall(sub)
        return s

    def readers() -> None:
        sel = selectors.DefaultSelector()
        conns = [connect() for _ in range(READERS)]
        for s in conns:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        try:
            while not load.stop.is_set():
                for key, _ in sel.select(0.5):
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    try:
                        data = conn.recv(1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:  # dropped (an overflow): subscribe again
                        sel.unregister(conn)
                        conn.close()
                        fresh = connect()
                        fresh.setblocking(False)
                        sel.register(fresh, selectors.EVENT_READ)
                        load.count("subscribers.resubscribed")
                        continue
                    load.count("subscribers.bytes_read", len(data))
        finally:
            for key in list(sel.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]

    def stalled() -> None:
        conns = [connect() for _ in range(STALLED)]  # never read
        load.count("subscribers.stalled", len(conns))
        load.stop.wait(CHURN)
        for s in conns:
            s.close()

    load.spawn("readers", readers)
    load.spawn("stalled", stalled)


def _health(load: _Load, home: Path, pings: list[tuple[float, float]], t0: float) -> None:
    def ping() -> None:
        with RawConn(home / "tether.sock", timeout=10) as conn:
            while not load.stop.is_set():
                a = time.perf_counter()
                conn.result("daemon.health")
                pings.append((time.monotonic() - t0, time.perf_counter() - a))
                load.stop.wait(HEALTH_EVERY)

    load.spawn("health", ping)


# ---------------------------------------------------------------------- measuring
def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tree(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            total += _size(Path(dirpath) / f)
    return total


def _sample(home: Path, pid: int, at: float) -> dict[str, Any]:
    mem = memory_of(pid) or {}
    return {"t": round(at, 1), "rss_mib": mem.get("VmRSS"),
            "db_mib": round(_size(home / "tether.db") / 2**20, 2),
            "wal_mib": round(_size(home / "tether.db-wal") / 2**20, 2),
            "drain_mib": round(_tree(home / "drain") / 2**20, 2),
            "logs_mib": round(_tree(home / "logs") / 2**20, 2)}


def _agent_totals(work: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for stats in sorted(work.glob("a*/g*/stats.json")):
        kind = ("polite", "polite", "hostile", "big")[int(stats.parent.parent.name[1:])]
        with contextlib.suppress(OSError, ValueError):
            for k, v in json.loads(stats.read_text()).items():
                out.setdefault(kind, {})[k] = out.get(kind, {}).get(k, 0) + int(v)
    return out


def _p99(pings: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    xs = [lat for t, lat in pings if lo <= t < hi]
    return percentile(xs, 99) * 1000 if xs else None


def _report(seconds: float, sandboxed: bool, samples: list[dict[str, Any]],
            pings: list[tuple[float, float]], load: _Load,
            agents: dict[str, dict[str, int]], delivered: int,
            execs: dict[str, int]) -> BenchResult:
    first = [s for s in samples if s["t"] <= min(WINDOW, seconds / 4) + 0.1] or samples[:1]
    last = [s for s in samples if s["t"] >= seconds - min(WINDOW, seconds / 4) - 0.1]
    windows = [_p99(pings, lo, lo + WINDOW) for lo in range(0, int(seconds), int(WINDOW))]
    p99s = [w for w in windows if w is not None]

    def figure(key: str) -> tuple[float, float, float]:
        start = max(s[key] or 0 for s in first)
        return (start, max(s[key] or 0 for s in samples), max(s[key] or 0 for s in last))

    rss, db, wal = figure("rss_mib"), figure("db_mib"), figure("wal_mib")
    store = (db[0] + wal[0], db[1] + wal[1], db[2] + wal[2])
    span = min(WINDOW, seconds / 4)
    health = (_p99(pings, 0, span) or 0.0, max(p99s) if p99s else 0.0,
              _p99(pings, seconds - span, seconds + 1) or 0.0)
    flat = {"rss": rss[2] <= rss[0] * 1.25 + 16, "store": store[2] <= store[0] * 1.5 + 32,
            "wal": wal[1] <= 64 + 64, "health": health[2] <= max(health[0] * 3, 50.0)}

    def row(metric: str, v: tuple[float, float, float], unit: str, ok: bool) -> Row:
        return Row("soak", metric, f"{v[0]:.1f} → peak {v[1]:.1f} → end {v[2]:.1f} {unit}",
                   f"{seconds:.0f} s of mixed load", "bounded, flat", ok)

    rows = [row("daemon RSS (start → peak → end)", rss, "MiB", flat["rss"]),
            row("tether.db + WAL", store, "MiB", flat["store"]),
            row("WAL alone", wal, "MiB", flat["wal"]),
            row("daemon.health p99 (per minute)", health, "ms", flat["health"])]
    where = "bwrap sandboxes" if sandboxed else "process runtime: bwrap unavailable"
    notes = [
        f"load: {AGENTS} agents ({where}; "
        f"two polite, one hostile, one with 256 KiB turns; each lives {AGENT_LIFE:.0f} s), "
        f"{EXECS_PER_S:g} execs a second, {JOBS} jobs every second, a webhook on every "
        f"exec.finished, {READERS} reading and {STALLED} stalled subscribers "
        f"(replaced every {CHURN:.0f} s); retention at one minute",
        f"agents: {json.dumps(agents)}; execs: {json.dumps(execs)}; webhooks delivered: "
        f"{delivered}; load counts: {json.dumps(load.counts)}",
        "bounded and flat: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in flat.items())
        + f"; drain/ {samples[-1]['drain_mib']} MiB at the end (not pruned by retention: "
          "the ended lineages' snapshots, each at most about 4.3 MiB)",
    ]
    if load.errors:
        notes.append(f"load errors (counted, retried): {json.dumps(load.errors)}")
    return BenchResult(
        name="soak", title=f"Soak: {seconds:.0f} s of mixed load",
        params={"seconds": seconds, "agents": AGENTS, "agent_life": AGENT_LIFE,
                "execs_per_s": EXECS_PER_S, "jobs": JOBS, "readers": READERS,
                "stalled": STALLED, "churn_s": CHURN, "sample_s": SAMPLE,
                "window_s": WINDOW, "sandboxed": sandboxed, "env": SOAK_ENV},
        data={"samples": samples, "health_p99_ms_per_window": windows,
              "start": {"rss_mib": rss[0], "store_mib": store[0], "wal_mib": wal[0],
                        "health_p99_ms": health[0]},
              "peak": {"rss_mib": rss[1], "store_mib": store[1], "wal_mib": wal[1],
                       "health_p99_ms": health[1]},
              "end": {"rss_mib": rss[2], "store_mib": store[2], "wal_mib": wal[2],
                      "health_p99_ms": health[2]},
              "flat": flat, "agents": agents, "execs": execs,
              "webhooks_delivered": delivered, "counts": load.counts,
              "errors": load.errors, "health_pings": len(pings)},
        rows=rows, notes=notes)
