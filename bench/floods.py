"""Floods: the daemon's memory and ``daemon.health`` latency under abusive clients.

(a) ``SUB_CONNS`` connections, each sending 64 ``events.subscribe since=0`` and
never reading, over a journal of ``EVENTS`` events (seeded through the store
before the daemon starts); (b) ``IDLE_CONNS`` connections that each send half a
line and then sit; (c) a churn of connections that each send half a line and
disconnect. During each, a prober opens a fresh connection per ``daemon.health``
call. Reported: daemon RSS growth (peak during the flood, and after the clients
closed) and health p50/p99. Baseline, same run: health and RSS of the same daemon
idle. Every loop is bounded by count and by time; Unix sockets only.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    Row,
    fmt_ms,
    fresh_home,
    memory_of,
    summarize_ms,
)
from tether.store import Store

HEALTH = b'{"jsonrpc":"2.0","id":1,"method":"daemon.health"}\n'
HALF = b'{"jsonrpc":"2.0","id":1,"method":"daemon.hea'
TARGET_P99_MS = 100.0
RSS_BUDGET_MIB = 64.0  # growth allowed at this scale (docs/PROTOCOL.md, "Limits")


def _seed(db: Path, n: int) -> None:
    """``n`` events of a realistic size (~400 bytes each), written before the daemon runs."""
    store = Store(db)
    try:
        for i in range(n):
            store.append_event(None, "bench.filler", state="RUNNING",
                               reason=f"filler event {i} " + "x" * 200,
                               data={"i": i, "pad": "y" * 100})
    finally:
        store.close()


def _probe_once(sock: Path, timeout: float) -> tuple[float, str | None]:
    t0 = time.perf_counter()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            while True:  # a full listen backlog: retry, as the SDK does (the wait counts)
                try:
                    s.connect(str(sock))
                    break
                except BlockingIOError:
                    if time.perf_counter() - t0 > timeout:
                        raise
                    time.sleep(0.001)
            s.sendall(HEALTH)
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf or b"{}")
        err = None if "result" in reply else f"reply {reply!r:.200}"
    except (OSError, ValueError) as e:
        err = repr(e)
    return time.perf_counter() - t0, err


class Prober:
    """Health on a fresh connection every ``gap`` s, plus the daemon's peak RSS."""

    def __init__(self, sock: Path, pid: int) -> None:
        self.sock = sock
        self.pid = pid

    def run(self, seconds: float, max_n: int = 400, gap: float = 0.01,
            stop: threading.Event | None = None) -> dict[str, Any]:
        lat: list[float] = []
        failed: list[str] = []
        peak = 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(lat) < max_n and not (stop and stop.is_set()):
            dt, err = _probe_once(self.sock, 10.0)
            lat.append(dt)
            if err is not None:
                failed.append(err)
            peak = max(peak, _rss(self.pid))
            time.sleep(gap)
        return {"health_ms": summarize_ms(lat), "failed": len(failed), "errors": failed[:5],
                "rss_peak_mib": peak}


def _rss(pid: int) -> float:
    mem = memory_of(pid)
    return mem["VmRSS"] if mem else 0.0


def _open(sock: Path, payload: bytes) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(True)
    s.settimeout(5.0)
    try:
        s.connect(str(sock))
        s.sendall(payload)
    except OSError:
        s.close()
        return None
    return s


def _subscribers(sock: Path, conns: int) -> list[socket.socket]:
    payload = b"".join(
        b'{"jsonrpc":"2.0","id":%d,"method":"events.subscribe","params":{"since":0}}\n' % i
        for i in range(64))
    return [s for s in (_open(sock, payload) for _ in range(conns)) if s is not None]


def _closed_by_daemon(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the daemon closed (refused or evicted)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass
            n += 1  # EOF
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def _churn(sock: Path, max_n: int, seconds: float, stop: threading.Event,
           out: dict[str, int]) -> None:
    end = time.monotonic() + seconds
    n = 0
    while n < max_n and time.monotonic() < end and not stop.is_set():
        s = _open(sock, HALF)
        if s is not None:
            s.close()
        n += 1
    out["sent"] = n


def run(opts: Options) -> BenchResult:
    q = opts.quick
    events = 2000 if q else 3000
    sub_conns = 8 if q else 16
    idle_conns = 1000 if q else 2000
    churn_max, churn_s = (5000, 4.0) if q else (20000, 8.0)
    probe_s = 2.0 if q else 3.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, idle_conns + 256)), hard))
    t_start = time.perf_counter()
    data: dict[str, Any] = {}
    with fresh_home() as d:
        d.home.mkdir(parents=True, exist_ok=True)
        _seed(d.home / "tether.db", events)
        d.start()
        pr = Prober(d.socket, d.pid)
        time.sleep(0.5)
        idle = pr.run(probe_s)
        idle["rss_mib"] = _rss(d.pid)
        data["idle"] = idle

        subs = _subscribers(d.socket, sub_conns)
        a = pr.run(probe_s)  # from the first moment: the catch-ups run now
        a["connections"] = len(subs)
        a["rss_with_subs_mib"] = _rss(d.pid)
        for s in subs:
            s.close()
        time.sleep(1.5)
        a["rss_after_close_mib"] = _rss(d.pid)
        data["subscribers"] = a

        data["rss_before_b_mib"] = _rss(d.pid)
        held: list[socket.socket] = []
        deadline = time.monotonic() + 20.0
        for _ in range(idle_conns):
            if time.monotonic() > deadline:
                break
            s = _open(d.socket, HALF)
            if s is not None:
                held.append(s)
        b = pr.run(probe_s)
        b["opened"] = len(held)
        b["closed_by_daemon"] = _closed_by_daemon(held)
        b["rss_mib"] = _rss(d.pid)
        for s in held:
            s.close()
        data["idle_half_lines"] = b

        stop = threading.Event()
        sent: dict[str, int] = {}
        th = threading.Thread(target=_churn, args=(d.socket, churn_max, churn_s, stop, sent))
        th.start()
        try:
            c = pr.run(churn_s, stop=None)
        finally:
            stop.set()
            th.join(30)
        c["sent"] = sent.get("sent", 0)
        time.sleep(1.0)
        c["rss_after_mib"] = _rss(d.pid)
        data["churn_half_lines"] = c
        d.stop()

    base = data["idle"]
    base_p = f"p50 {fmt_ms(base['health_ms']['p50'])} / p99 {fmt_ms(base['health_ms']['p99'])}"
    rows: list[Row] = []
    for key, label in (("subscribers", f"(a) {sub_conns} conns x 64 unread subscriptions"),
                       ("idle_half_lines", f"(b) {idle_conns} idle half-line connections"),
                       ("churn_half_lines", "(c) half-line-and-disconnect churn")):
        h = data[key]["health_ms"]
        p99 = h.get("p99", float("nan"))
        rows.append(Row("floods", f"health on a fresh conn, {label}",
                        f"p50 {fmt_ms(h.get('p50', float('nan')))} / p99 {fmt_ms(p99)}"
                        f" ({data[key]['failed']} failed)",
                        f"idle {base_p}", f"p99 ≤ {TARGET_P99_MS:.0f} ms",
                        bool(p99 <= TARGET_P99_MS and data[key]["failed"] == 0)))
    growth = data["subscribers"]["rss_peak_mib"] - base["rss_mib"]
    after = data["subscribers"]["rss_after_close_mib"] - base["rss_mib"]
    rows.append(Row("floods", "RSS growth, (a) peak / after the clients closed",
                    f"+{growth:.1f} / +{after:.1f} MiB", f"idle {base['rss_mib']:.1f} MiB",
                    f"≤ +{RSS_BUDGET_MIB:.0f} MiB", growth <= RSS_BUDGET_MIB))
    growth_b = max(data["idle_half_lines"]["rss_peak_mib"],
                   data["churn_half_lines"]["rss_peak_mib"]) - data["rss_before_b_mib"]
    rows.append(Row("floods", "RSS growth, (b)+(c) peak",
                    f"+{growth_b:.1f} MiB ({data['idle_half_lines']['closed_by_daemon']} of "
                    f"{data['idle_half_lines']['opened']} idle conns closed by the daemon; "
                    f"{data['churn_half_lines']['sent']} churned)",
                    f"before (b) {data['rss_before_b_mib']:.1f} MiB",
                    f"≤ +{RSS_BUDGET_MIB:.0f} MiB", growth_b <= RSS_BUDGET_MIB))
    return BenchResult(
        "floods", "Floods: daemon memory and health latency under abusive clients",
        {"events": events, "sub_conns": sub_conns, "subs_per_conn": 64,
         "idle_conns": idle_conns, "churn_max": churn_max, "churn_seconds": churn_s,
         "probe_seconds": probe_s},
        data, rows, seconds=time.perf_counter() - t_start)
