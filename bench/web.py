"""The dashboard: what it costs the daemon, how fast events reach a browser, and a
keystroke through its terminal bridge beside ``tether attach``'s SDK path.

* RPC: ``daemon.health`` round trips/s on one raw connection for a few seconds, while
  execs are started at ~20/s, without and then with ``tether web`` running, a
  server-sent-event stream of the journal open and consumed, and ``/api/overview``
  fetched every second (more than an open page does: it asks only after a change).
* Events to browser: headless chromium (Debian's) on the page; a ``fetch`` stream of
  ``/api/events`` (with the page's key, as the page reads it) records when each event
  arrives; latency = arrival minus the moment ``exec.start`` was sent (one clock).
  ``bench/web_scale.py`` measures the views themselves with 10,000 execs.
* Keystroke echo: one byte into ``cat`` on a terminal and its echo back, through the
  WebSocket bridge (``/api/term``) and through the SDK's ``Attachment`` (the same
  monitor protocol ``tether attach`` speaks), alternating. The browser's own rendering
  is not included.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

from bench.harness import BenchResult, Options, RawConn, Row, fmt_ms, fresh_home, summarize_ms
from tether.client.blocking import Client

TETHER = [sys.executable, "-m", "tether.cli.main"]


def _rpc_rate(sock: Any, seconds: float) -> float:
    conn = RawConn(sock)
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.call("daemon.health")
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        conn.close()


def _load(c: Client, stop: threading.Event) -> None:
    while not stop.is_set():
        c.exec_start(["true"])
        time.sleep(0.05)


def _start_web(home: Any) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([*TETHER, "--home", str(home), "web", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    assert proc.stdout is not None
    m = re.search(r"(http://\S+)", proc.stdout.readline().decode())
    if m is None:
        proc.kill()
        raise RuntimeError("tether web printed no URL")
    return proc, m.group(1)


def _page_reader(base: str, token: str, stop: threading.Event) -> None:
    """What an open page does: the event stream consumed, the state fetched every second."""
    hdr = {"Authorization": f"Bearer {token}"}

    def stream() -> None:
        req = urllib.request.Request(base + "/api/events?since=0", headers=hdr)
        with urllib.request.urlopen(req) as r:
            while not stop.is_set() and r.readline():
                pass
    threading.Thread(target=stream, daemon=True).start()
    while not stop.is_set():
        with urllib.request.urlopen(urllib.request.Request(base + "/api/overview",
                                                           headers=hdr)) as r:
            r.read()
        stop.wait(1.0)


def _browser_latency(base_url: str, c: Client, n: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    out: list[float] = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        pg = b.new_page()
        pg.goto(base_url)
        pg.wait_for_selector("#daemon.ok", timeout=30000)
        last = max((e.gseq for e in c.events_list(since=0, limit=1000).events), default=0)
        pg.evaluate("""async (since) => { window.__arrivals = {};
            const key = localStorage.getItem('tether.session');
            const r = await fetch('/api/events?since=' + since,
                                  {headers: {Authorization: 'Bearer ' + key}});
            const reader = r.body.getReader(); const dec = new TextDecoder(); let buf = '';
            (async () => { for (;;) { const {value, done} = await reader.read(); if (done) return;
              buf += dec.decode(value, {stream: true}); let i;
              while ((i = buf.indexOf('\\n\\n')) >= 0) { const block = buf.slice(0, i);
                buf = buf.slice(i + 2);
                for (const line of block.split('\\n')) if (line.startsWith('data: ')) {
                  const ev = JSON.parse(line.slice(6));
                  if (ev.type === 'exec.state' && ev.state === 'PENDING')
                    window.__arrivals[ev.exec] = Date.now(); } } } })(); }""", last)
        for _ in range(n):
            t0 = time.time() * 1000
            x = c.exec_start(["true"])
            pg.wait_for_function(f"() => window.__arrivals['{x.id}'] !== undefined",
                                 timeout=30000)
            got = pg.evaluate(f"() => window.__arrivals['{x.id}']")
            out.append((float(got) - t0) / 1000)
            time.sleep(0.05)
        b.close()
    return out


async def _echo_ws(url: str, token: str, n: int) -> list[float]:
    import websockets

    out = []
    async with websockets.connect(url, additional_headers={
            "Authorization": f"Bearer {token}"}) as ws:
        await asyncio.sleep(0.3)
        while True:  # drain the replay
            try:
                await asyncio.wait_for(ws.recv(), 0.3)
            except TimeoutError:
                break
        for _ in range(n):
            t0 = time.perf_counter()
            await ws.send(b"x")
            while True:
                msg = await ws.recv()
                if isinstance(msg, bytes) and b"x" in msg:
                    break
            out.append(time.perf_counter() - t0)
            await asyncio.sleep(0.005)
    return out


def _echo_sdk(c: Client, exec_id: str, n: int) -> list[float]:
    out = []
    with c.attach(exec_id) as t:
        t.read(0.3)
        for _ in range(n):
            t0 = time.perf_counter()
            t.write(b"x")
            while b"x" not in t.read(5):
                pass
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)
    return out


def run(opts: Options) -> BenchResult:
    seconds = 1.0 if opts.quick else 3.0
    samples = 20 if opts.quick else 60
    t_start = time.perf_counter()
    data: dict[str, Any] = {}
    rows: list[Row] = []
    notes: list[str] = []
    with fresh_home() as d:
        d.start()
        c = Client(d.home, autostart=False)
        stop = threading.Event()
        loader = threading.Thread(target=_load, args=(c, stop), daemon=True)
        loader.start()
        without = _rpc_rate(d.socket, seconds)
        web, url = _start_web(d.home)
        try:
            base, token = url.split("/?token=")
            page_stop = threading.Event()
            reader = threading.Thread(target=_page_reader, args=(base, token, page_stop),
                                      daemon=True)
            reader.start()
            time.sleep(0.5)
            with_web = _rpc_rate(d.socket, seconds)
            page_stop.set()
            stop.set()
            loader.join(10)
            rows.append(Row("web", "daemon.health round trips/s, page open and streaming",
                            f"{with_web:,.0f}/s", f"{without:,.0f}/s without", ""))
            data["rpc"] = {"with_web": with_web, "without": without,
                           "ratio": with_web / without}
            if shutil.which("chromium"):
                lat = summarize_ms(_browser_latency(url, c, samples))
                data["events_to_browser_ms"] = lat
                rows.append(Row("web", "event to the browser (exec.start → the page's stream) p50",
                                fmt_ms(float(lat["p50"])), ""))
                rows.append(Row("web", "  p99", fmt_ms(float(lat["p99"])), ""))
            else:
                notes.append("chromium is not installed: no browser latency")
            x = c.exec_start(["cat"], tty=True, rows=24, cols=80)
            ws_url = base.replace("http://", "ws://") + f"/api/term/{x.id}?rows=24&cols=80"
            ws, sdk = [], []
            for _ in range(3):  # alternate, so load lands on both alike
                ws += asyncio.run(_echo_ws(ws_url, token, samples // 3))
                sdk += _echo_sdk(c, x.id, samples // 3)
            w, s = summarize_ms(ws), summarize_ms(sdk)
            data["echo_ms"] = {"web_bridge": w, "sdk_attach": s}
            rows.append(Row("web", "keystroke echo, browser bridge (WebSocket) p50",
                            fmt_ms(float(w["p50"])), f"{fmt_ms(float(s['p50']))} SDK attach"))
            rows.append(Row("web", "  p99", fmt_ms(float(w["p99"])),
                            f"{fmt_ms(float(s['p99']))} SDK attach"))
        finally:
            web.kill()
            web.wait()
            c.close()
    return BenchResult("web", "Dashboard (tether web)", {"seconds": seconds,
                                                          "samples": samples},
                       data, rows, seconds=time.perf_counter() - t_start, notes=notes)
