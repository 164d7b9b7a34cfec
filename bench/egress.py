"""The egress proxy's cost: what going out through tether's proxy adds to a request, and
what an agent's own network namespace adds to its start.

Requests (a small ``GET``, answered with ``Connection: close``), against one origin
process on 127.0.0.1, measured in alternating rounds so that a busy neighbour weighs on
every path alike:

* direct: a new TCP connection to the origin per request — the baseline, what an agent
  with the host's network does;
* proxy: the same request in absolute form on the real proxy's Unix socket (the proxy
  process, as the daemon runs it: ``python -I -S .../egress/run.py``);
* bridge + proxy: the path a sandboxed agent's request takes — TCP to the bridge
  (``egress/bridge.py``, the relay the sandbox runs), the Unix socket, the proxy, TCP to
  the origin;
* CONNECT tunnel: through the bridge, ``CONNECT`` and its ``200``, then the request in
  the tunnel (what HTTPS costs on top of TLS).

Latency is one client's sequential requests (p50/p99); requests/s is ``CLIENTS``
client processes for the same while. Bulk: 64 MiB through a tunnel vs direct.

Agent start: ``agent.start`` sent → reply, and → the agent's first statement running
(a timestamp it writes), for a generic agent in a bwrap sandbox behind the proxy (its
own namespace, the proxy socket served, the bridge started before it) against the same
agent in a bwrap sandbox with ``network: host``, interleaved, same daemon.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    RawConn,
    Row,
    finish,
    fmt_ms,
    fresh_home,
    memory_of,
    percentile,
    popen,
    summarize_ms,
)
from tether.egress import bridge as egress_bridge
from tether.egress import proxy as egress_proxy
from tether.runtime import bwrap as bwrap_runtime

CLIENTS = 4
BULK = 64 << 20
ORIGIN = r'''
import asyncio, sys
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
CHUNK = b"x" * 65536

async def serve(r, w):
    try:
        head = await r.readuntil(b"\r\n\r\n")
        if b" /bulk" in head.split(b"\r\n")[0]:
            n = int(sys.argv[1])
            w.write(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
                    .encode())
            for _ in range(n // len(CHUNK)):
                w.write(CHUNK)
                await w.drain()
        else:
            w.write(OK)
        await w.drain()
    except Exception:
        pass
    finally:
        w.close()

async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()

asyncio.run(main())
'''


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(1 << 16):
        out += chunk
    return out


def _ways(sock: str, port: int, bridge_port: int | None = None) -> dict[str, Callable[[], int]]:
    name = "origin.test"
    plain = f"GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}\r\n\r\n".encode()
    origin = b"GET / HTTP/1.1\r\nHost: origin\r\n\r\n"

    def direct() -> int:
        with socket.create_connection(("127.0.0.1", port), 10) as s:
            s.sendall(origin)
            return len(_read_all(s))

    def proxy() -> int:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(sock)
            s.sendall(plain)
            return len(_read_all(s))

    def bridged() -> int:
        assert bridge_port is not None
        with socket.create_connection(("127.0.0.1", bridge_port), 10) as s:
            s.sendall(plain)
            return len(_read_all(s))

    def tunnel() -> int:
        assert bridge_port is not None
        with socket.create_connection(("127.0.0.1", bridge_port), 10) as s:
            s.sendall(f"CONNECT {name}:{port} HTTP/1.1\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            s.sendall(origin)
            return len(_read_all(s))

    return {"direct": direct, "proxy": proxy, "bridge + proxy": bridged,
            "CONNECT tunnel": tunnel}


def _rate(way: str, sock: str, port: int, bridge_port: int, seconds: float) -> float:
    """Requests/s of ``CLIENTS`` processes each looping ``way`` for ``seconds``."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rate_child, args=(way, sock, port, bridge_port, seconds, q))
             for _ in range(CLIENTS)]
    for p in procs:
        p.start()
    total: int = sum(int(q.get(timeout=seconds + 60)) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def _rate_child(way: str, sock: str, port: int, bridge_port: int, seconds: float,
                q: Any) -> None:
    fn = _ways(sock, port, bridge_port)[way]
    n = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        fn()
        n += 1
    q.put(n)


def _bulk(direct: bool, port: int, bridge_port: int) -> float:
    """Seconds to read ``BULK`` bytes from the origin, directly or through a tunnel."""
    t0 = time.perf_counter()
    if direct:
        s = socket.create_connection(("127.0.0.1", port), 30)
    else:
        s = socket.create_connection(("127.0.0.1", bridge_port), 30)
        s.sendall(f"CONNECT origin.test:{port} HTTP/1.1\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
    with s:
        s.sendall(b"GET /bulk HTTP/1.1\r\nHost: origin\r\n\r\n")
        n = 0
        while chunk := s.recv(1 << 20):
            n += len(chunk)
    assert n >= BULK, n
    return time.perf_counter() - t0


class _Proxy:
    """The real proxy process on a scratch directory, one key allowing the origin, and the
    real bridge (its relay) in front of that key's socket, on the host's loopback."""

    def __init__(self, port: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tbeg", dir="/tmp"))
        (self.root / "keys").mkdir()
        (self.root / "keys" / "bench.json").write_text(json.dumps({"allow": ["origin.test"]}))
        self.proc = popen([sys.executable, "-I", "-S",
                           str(Path(egress_proxy.__file__).with_name("run.py")),
                           str(self.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"resolve": {"origin.test": ["127.0.0.1"]}}).encode()
                              + b"\n")
        self.proc.stdin.close()
        json.loads(self.proc.stdout.readline())
        self.sock = str(self.root / "socks" / "bench" / "proxy.sock")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.bridge_port = int(s.getsockname()[1])
        self.bridge = popen([sys.executable, "-I", "-S", egress_bridge.__file__,
                             str(self.bridge_port), self.sock, "/bin/sleep", "100000"],
                            start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.bridge_port), 1):
                break
            time.sleep(0.01)

    def relay_pid(self) -> int | None:
        try:
            kids = Path(f"/proc/{self.bridge.pid}/task/{self.bridge.pid}/children").read_text()
            return int(kids.split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        relay = self.relay_pid()
        if relay is not None:
            with contextlib.suppress(OSError):
                os.kill(relay, 9)
        finish(self.bridge)
        finish(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)


def _requests(opts: Options) -> tuple[list[Row], dict[str, Any]]:
    seconds = 1.0 if opts.quick else 3.0
    samples = 200 if opts.quick else 1000
    origin = popen([sys.executable, "-c", ORIGIN, str(BULK)], stdout=subprocess.PIPE,
                   start_new_session=True)
    assert origin.stdout is not None
    port = int(origin.stdout.readline())
    px = _Proxy(port)
    try:
        ways = _ways(px.sock, port, px.bridge_port)
        for fn in ways.values():  # warm up; each answers in full
            for _ in range(20):
                assert fn() > 40
        lat: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(samples // 50):  # alternating rounds of 50
            for way, fn in ways.items():
                for _ in range(50):
                    t0 = time.perf_counter()
                    fn()
                    lat[way].append(time.perf_counter() - t0)
        rps = {w: 0.0 for w in ways}
        for way in ways:
            rps[way] = _rate(way, px.sock, port, px.bridge_port, seconds)
        bulk = {"direct": min(_bulk(True, port, px.bridge_port) for _ in range(3)),
                "tunnel": min(_bulk(False, port, px.bridge_port) for _ in range(3))}
        mem = {"proxy": memory_of(px.proc.pid), "bridge relay": memory_of(px.relay_pid() or 0)}
    finally:
        px.close()
        finish(origin)
    p50 = {w: percentile(v, 50) * 1000 for w, v in lat.items()}
    p99 = {w: percentile(v, 99) * 1000 for w, v in lat.items()}
    mibs = {k: BULK / v / 2**20 for k, v in bulk.items()}
    rows = []
    for way in ("proxy", "bridge + proxy", "CONNECT tunnel"):
        rows.append(Row("egress request", f"{way}: p50 / p99 (n={len(lat[way])})",
                        f"{fmt_ms(p50[way])} / {fmt_ms(p99[way])}",
                        f"direct {fmt_ms(p50['direct'])} / {fmt_ms(p99['direct'])} "
                        f"(+{fmt_ms(p50[way] - p50['direct'])} at p50)"))
    for way in ("proxy", "bridge + proxy", "CONNECT tunnel"):
        rows.append(Row("egress request", f"{way}: requests/s ({CLIENTS} clients, "
                        f"{seconds:g} s)", f"{rps[way]:.0f}/s",
                        f"direct {rps['direct']:.0f}/s ({rps[way] / rps['direct']:.2f}x)"))
    rows.append(Row("egress request", f"bulk {BULK >> 20} MiB through a tunnel (best of 3)",
                    f"{mibs['tunnel']:.0f} MiB/s", f"direct {mibs['direct']:.0f} MiB/s"))
    if mem["proxy"] and mem["bridge relay"]:
        rows.append(Row("egress request", "memory: the proxy · one bridge relay",
                        f"{mem['proxy']['VmRSS']:.1f} MiB · "
                        f"{mem['bridge relay']['VmRSS']:.1f} MiB RSS",
                        f"Pss {mem['proxy'].get('Pss', 0):.1f} · "
                        f"{mem['bridge relay'].get('Pss', 0):.1f} MiB"))
    data = {"latency_ms": {w: summarize_ms(v) for w, v in lat.items()},
            "requests_per_s": rps, "bulk_mib_per_s": mibs, "memory_mib": mem}
    return rows, data


AGENT = ("import os, sys, time\nt = repr(time.time())\n"
         "open(sys.argv[1] + '.tmp', 'w').write(t)\nos.rename(sys.argv[1] + '.tmp', sys.argv[1])\n")


def _agent_start(opts: Options) -> tuple[list[Row], dict[str, Any]]:
    n = 8 if opts.quick else 20
    ws = tempfile.mkdtemp(prefix="tbeg", dir="/tmp")
    (Path(ws) / "agent.py").write_text(AGENT)
    rpc: dict[str, list[float]] = {"proxy": [], "none": [], "host": []}
    first: dict[str, list[float]] = {"proxy": [], "none": [], "host": []}
    bad: list[str] = []
    with fresh_home() as d:
        d.start()
        conn = RawConn(d.socket, timeout=60)
        try:
            boxes = {"proxy": conn.result("sandbox.create", {
                         "name": "egress", "runtime": "bwrap", "workspace": ws})["id"],
                     "none": conn.result("sandbox.create", {
                         "name": "netnone", "runtime": "bwrap", "workspace": ws,
                         "network": "none"})["id"],
                     "host": conn.result("sandbox.create", {
                         "name": "nethost", "runtime": "bwrap", "workspace": ws,
                         "network": "host"})["id"]}
            for i in range(n + 2):  # the first round of each warms caches
                for kind, sb in boxes.items():
                    mark = Path(ws) / f"first-{kind}-{i}"
                    t0 = time.time()
                    p0 = time.perf_counter()
                    reply = conn.call("agent.start", {
                        "argv": [sys.executable, "agent.py", str(mark)], "provider": "generic",
                        "sandbox": sb, "cwd": ws, "revival": "reap"})
                    took = time.perf_counter() - p0
                    res = reply.get("result") or {}
                    if not res.get("exec"):
                        bad.append(str(reply)[:300])
                        continue
                    deadline = time.monotonic() + 30
                    while not mark.exists() and time.monotonic() < deadline:
                        time.sleep(0.002)
                    if i < 2 or not mark.exists():
                        continue
                    rpc[kind].append(took)
                    first[kind].append(float(mark.read_text() or "nan") - t0)
                    time.sleep(0.1)
        finally:
            conn.close()
            d.stop()
    shutil.rmtree(ws, ignore_errors=True)
    def fig(v: list[float]) -> str:  # p50 (min): the minimum is what load hides
        return f"{fmt_ms(percentile(v, 50) * 1000)} ({fmt_ms(min(v, default=0) * 1000)})"

    rows = [
        Row("agent start, bwrap", f"agent.start → reply, p50 (min), n={len(rpc['proxy'])}",
            fig(rpc["proxy"]), f"network: host {fig(rpc['host'])} · none (its own "
            f"namespace, no proxy) {fig(rpc['none'])}"),
        Row("agent start, bwrap", "agent.start → its first statement, p50 (min)",
            fig(first["proxy"]), f"network: host {fig(first['host'])} · none "
            f"{fig(first['none'])}"),
    ]
    data = {"rpc_ms": {k: summarize_ms(v) for k, v in rpc.items()},
            "first_statement_ms": {k: summarize_ms(v) for k, v in first.items()},
            "bad_starts": bad[:10]}
    return rows, data


def run(opts: Options) -> BenchResult:
    rows, data = _requests(opts)
    notes: list[str] = []
    if bwrap_runtime.probe().available:
        more, data["agent_start"] = _agent_start(opts)
        rows += more
        if data["agent_start"]["bad_starts"]:
            notes.append(f"agent starts that failed: {data['agent_start']['bad_starts']}")
    else:
        notes.append("bubblewrap cannot make a sandbox here: no agent start rows")
    return BenchResult(name="egress", title="egress proxy: cost per request, agent start",
                       rows=rows, notes=notes,
                       params={"clients": CLIENTS, "bulk_bytes": BULK, "quick": opts.quick},
                       data=data)
