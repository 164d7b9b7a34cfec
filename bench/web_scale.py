"""The dashboard with a full home: how long its views take to load, and a change to show,
in Chromium (Debian's, headless, Playwright), with 10,000 execs and 500 lineages.

The home is seeded by writing records straight into a real store (as bench/retention.py
and bench/digest.py do; starting 10,000 real processes would take minutes and measure
nothing more): 10,000 ended execs over 60 days — plain commands and agents' attempts, named
and not, in two sandboxes — and 500 ended lineages of one to three attempts, each attempt
with its ``exec.state`` events and 4 to 12 ``agent.turn`` events (context %, tokens, a
priced model): about 24,000 journal events. Then the real daemon starts on it with the real
``tether web``, and real execs and agents are started next to the seeded ones (a few
running execs and three live agents).

* **page load**: from navigation to the view's first render with its data
  (``window.tetherTiming.firstRender``, i.e. ``performance.now()`` then) — the overview,
  execs (page 1 of 10,000), execs searched, agents (all 500), one lineage;
* **update**: from the SDK call that changes something (an exec started, an agent's turn)
  to the page showing it (a MutationObserver's ``Date.now()``; one clock), on the execs
  view, the overview and a lineage's view;
* **baseline, same run**: the same in a home with 20 execs and 2 lineages; and the daemon
  call the page made at every change before it paged (``exec.list all``: every exec)
  beside the page it makes now (``exec.list limit 50``).
"""

from __future__ import annotations

import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.harness import BenchResult, Daemon, Options, Row, fmt_ms, fresh_home, summarize_ms
from tether.client.blocking import Client
from tether.model.layout import HomeLayout
from tether.model.records import (
    AgentConfig,
    Event,
    ExecRecord,
    ExecSpec,
    LineageRecord,
    SandboxSpec,
)
from tether.model.states import SandboxState
from tether.store import Store

TETHER = [sys.executable, "-m", "tether.cli.main"]
SONNET = "claude-sonnet-4-5-20250929"
DAY = 86400.0
COMMANDS = [["pytest", "-q"], ["make", "test"], ["npm", "run", "build"], ["cargo", "check"],
            ["git", "fetch"], ["ruff", "check", "."], ["go", "vet", "./..."]]
OBSERVER = """() => {
  window.__seen = {};
  const note = () => {
    const now = Date.now();
    for (const tr of document.querySelectorAll('tr[data-exec]'))
      if (!(tr.dataset.exec in window.__seen)) window.__seen[tr.dataset.exec] = now;
    const bar = document.querySelector('.card .bar');
    const pct = bar ? 'pct' + bar.dataset.pct : null;
    if (pct && !(pct in window.__seen)) window.__seen[pct] = now;
  };
  new MutationObserver(note).observe(document.body,
                                     {subtree: true, childList: true, attributes: true});
  note();
}"""


def _seed(home: Path, n_execs: int, n_lineages: int) -> dict[str, Any]:
    """Ended execs, lineages and their journal, written into the home's store."""
    rng = random.Random(21)
    layout = HomeLayout(home)
    store = Store(layout.db)
    sb, _ = store.create_sandbox("builds", SandboxSpec(runtime="process"))
    store.transition_sandbox(sb.id, SandboxState.READY)
    store.close()
    enc = msgspec.json.Encoder()
    now = time.time()
    execs: list[tuple[Any, ...]] = []
    lineages: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    seq: dict[str, int] = {}
    gseq = 1000  # above what the store journaled so far

    def event(stream: str, type_: str, at: float, exec_id: str | None, state: str | None,
              reason: str | None, data: dict[str, Any]) -> None:
        nonlocal gseq
        gseq += 1
        seq[stream] = seq.get(stream, 100) + 1
        ev = Event(gseq=gseq, seq=seq[stream], type=type_, time=at, sandbox=stream,
                   exec=exec_id, state=state, reason=reason, data=data)
        events.append((gseq, stream, seq[stream], enc.encode(ev)))

    def exec_rec(i: int, sandbox: str, argv: list[str], name: str | None, start: float,
                 lineage: str | None) -> ExecRecord:
        ok = rng.random() > 0.1
        ended = start + rng.uniform(1, 900)
        rec = ExecRecord(id=f"{i:012x}", sandbox=sandbox, state="FINISHED" if ok else "FAILED",
                         spec=ExecSpec(argv=argv), name=name, created_at=start,
                         started_at=start + 0.01, ended_at=ended, exit_code=0 if ok else 1,
                         reason="exited with code 0" if ok else "exited with code 1",
                         lineage=lineage)
        execs.append((rec.id, sandbox, name, rec.state, None, enc.encode(rec)))
        event(sandbox, "exec.state", start, rec.id, "PENDING", "accepted", {"argv": argv})
        event(sandbox, "exec.state", start + 0.01, rec.id, "RUNNING", "started", {})
        event(sandbox, "exec.state", ended, rec.id, rec.state, rec.reason,
              {"exit_code": rec.exit_code})
        return rec

    n = 0
    story: dict[str, Any] = {}
    for k in range(n_lineages):
        lid = f"{k:010x}"
        name = f"agent-{k:03d}" if k % 4 else None
        start = now - rng.uniform(0.1, 60) * DAY
        turns = 0
        attempts = []
        for a in range(rng.randint(1, 3)):
            rec = exec_rec(n, "default", ["claude", "--resume"] if a else ["claude"],
                           name, start, lid)
            n += 1
            attempts.append(rec.id)
            for t in range(rng.randint(4, 12)):
                turns += 1
                pct = min(99.0, 8.0 * (t + 1) + rng.uniform(0, 5))
                event("default", "agent.turn", start + 30 * (t + 1), rec.id, "HEALTHY",
                      f"turn {turns}", {"lineage": lid, "turn": turns, "context_pct": pct,
                                        "model": SONNET, "attempt": a + 1,
                                        "usage": {"input_tokens": 20_000, "output_tokens": 900}})
            event("default", "lineage.state", rec.ended_at or start, rec.id, "ORPHANED",
                  "died: exited with code 1", {"lineage": lid, "attempt": a + 1,
                                               "exit_reason": "crashed"})
            start = (rec.ended_at or start) + 5
        status = rng.choice(["FINISHED", "FINISHED", "FAILED", "REAPED"])
        lin = LineageRecord(id=lid, name=name, config=AgentConfig(argv=["claude"],
                                                                   provider="claude"),
                            status=status, exec_id=attempts[-1], attempt=len(attempts),
                            turns=turns, context_pct=40.0, model=SONNET,
                            exit_reason="completed" if status == "FINISHED" else "crashed",
                            created_at=start)
        lineages.append((lid, name, status, enc.encode(lin)))
        if len(attempts) == 3 and not story:
            story = {"lineage": lid, "attempts": 3, "turns": turns}
    while n < n_execs:
        argv = rng.choice(COMMANDS)
        sandbox = sb.id if n % 7 == 0 else "default"
        exec_rec(n, sandbox, argv, f"job-{n}" if n % 3 == 0 else None,
                 now - rng.uniform(0.01, 60) * DAY, None)
        n += 1
    con = sqlite3.connect(layout.db)
    with con:
        con.executemany("INSERT INTO execs VALUES (?, ?, ?, ?, ?, ?)", execs)
        con.executemany("INSERT INTO lineages VALUES (?, ?, ?, ?)", lineages)
        con.executemany("INSERT INTO events (gseq, stream, seq, body) VALUES (?, ?, ?, ?)",
                        events)
    con.close()
    return {"execs": len(execs), "lineages": len(lineages), "events": len(events),
            "story": story, "sandbox": "builds"}


def _web(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([*TETHER, "--home", str(home), "web", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    assert proc.stdout is not None
    m = re.search(r"(http://\S+)", proc.stdout.readline().decode())
    if m is None:
        proc.kill()
        raise RuntimeError("tether web printed no URL")
    return proc, m.group(1)


def _live(c: Client, work: Path) -> list[str]:
    """What runs beside the seeded records: execs and agents, started for real."""
    for i in range(4):
        c.exec_start(["sleep", "600"], cwd=str(work), name=f"live-{i}")
    agents = []
    for i in range(3):
        creds = work / f"creds-{i}"
        lin = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" '
                             f"> {creds}.tmp; mv {creds}.tmp {creds}; exec sleep 600"],
                            provider="generic", name=f"live-agent-{i}", cwd=str(work))
        agents.append(lin.id)
    deadline = time.monotonic() + 30
    while not all((work / f"creds-{i}").exists() for i in range(3)):
        if time.monotonic() > deadline:
            raise RuntimeError("the live agents did not start")
        time.sleep(0.05)
    return agents


def _load(page: Any, url: str, ready: str) -> float:
    page.goto(url)
    page.wait_for_selector(ready, timeout=60000)
    page.wait_for_function("() => window.tetherTiming && window.tetherTiming.firstRender",
                           timeout=60000)
    return float(page.evaluate("() => window.tetherTiming.firstRender")) / 1000


def _updates(page: Any, c: Client, n: int, work: Path, where: str) -> list[float]:
    out = []
    page.evaluate(OBSERVER)
    for i in range(n):
        t0 = time.time()
        x = c.exec_start(["sleep", "30"] if where == "overview" else ["true"], cwd=str(work),
                         name=f"upd-{where}-{i}-{int(t0 * 1000) % 100000}")
        page.wait_for_function(f"() => window.__seen['{x.id}'] !== undefined", timeout=30000)
        out.append((float(page.evaluate(f"() => window.__seen['{x.id}']")) - t0 * 1000) / 1000)
        if where == "overview":
            c.exec_cancel(x.id, signal="KILL")
        time.sleep(0.2)
    return out


def _turns(page: Any, c: Client, session: str, token: str, n: int) -> list[float]:
    out = []
    page.evaluate(OBSERVER)
    for i in range(n):
        pct = 11 + i
        t0 = time.time()
        c.agent_turn(session, token, context_pct=float(pct), model=SONNET,
                     usage={"input_tokens": 1000})
        page.wait_for_function(f"() => window.__seen['pct{pct}'] !== undefined", timeout=30000)
        out.append((float(page.evaluate(f"() => window.__seen['pct{pct}']")) - t0 * 1000)
                   / 1000)
        time.sleep(0.2)
    return out


def _measure(d: Daemon, samples: int, story: dict[str, Any]) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    c = Client(d.home, autostart=False)
    work = Path(tempfile.mkdtemp(prefix="bench-web-"))
    web, url = _web(d.home)
    base = url.split("/?")[0]
    out: dict[str, Any] = {}
    try:
        agents = _live(c, work)
        session, token = (work / "creds-0").read_text().split()
        lineage = story.get("lineage") or agents[0]
        views = {"overview": ("/", "#needs"), "execs": ("/execs", "#pager"),
                 "execs_search": ("/execs?q=job-77", "#pager"),
                 "agents": ("/agents?status=all", "#pager"),
                 "lineage": (f"/lineage/{lineage}", "#attempts li")}
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=shutil.which("chromium"),
                                  args=["--no-sandbox", "--disable-gpu"])
            ctx = b.new_context(viewport={"width": 1400, "height": 900})
            page = ctx.new_page()
            _load(page, url, "#needs")  # the token, traded for a key once
            for name, (path, ready) in views.items():
                _load(page, base + path, ready)  # warm: caches, the daemon's pages
                out[f"load_{name}"] = summarize_ms([_load(page, base + path, ready)
                                                    for _ in range(samples)])
            _load(page, base + "/execs", "#pager")
            out["update_execs"] = summarize_ms(_updates(page, c, samples, work, "execs"))
            _load(page, base + "/", "#needs")
            out["update_overview"] = summarize_ms(_updates(page, c, samples, work,
                                                           "overview"))
            _load(page, base + f"/lineage/{agents[0]}", "#attempts li")
            out["update_lineage"] = summarize_ms(_turns(page, c, session, token, samples))
            b.close()
        t_all, t_page = [], []
        for _ in range(samples):
            t0 = time.perf_counter()
            c.exec_list(all=True)
            t_all.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            c.exec_page(limit=50)
            t_page.append(time.perf_counter() - t0)
        out["exec_list_all"] = summarize_ms(t_all)
        out["exec_list_page"] = summarize_ms(t_page)
    finally:
        web.kill()
        web.wait()
        c.close()
        shutil.rmtree(work, ignore_errors=True)
    return out


def run(opts: Options) -> BenchResult:
    samples = 3 if opts.quick else 10
    n_execs, n_lineages = (2_000, 100) if opts.quick else (10_000, 500)
    t_start = time.perf_counter()
    data: dict[str, Any] = {}
    rows: list[Row] = []
    notes: list[str] = []
    if shutil.which("chromium") is None:
        return BenchResult("web_scale", "Dashboard at scale (tether web, Chromium)", {},
                           {}, [], notes=["chromium is not installed: nothing measured"])
    with fresh_home() as small:
        small.start()
        c = Client(small.home, autostart=False)
        work = Path(tempfile.mkdtemp(prefix="bench-web-small-"))
        try:
            for i in range(20):
                c.exec_wait(c.exec_start(["true"], cwd=str(work), name=f"small-{i}").id,
                            timeout=30)
        finally:
            c.close()
            shutil.rmtree(work, ignore_errors=True)
        data["small"] = _measure(small, samples, {})
    with fresh_home() as big:
        t0 = time.perf_counter()
        seeded = _seed(big.home, n_execs, n_lineages)
        data["seed_seconds"] = round(time.perf_counter() - t0, 2)
        data["seeded"] = seeded
        data["daemon_start_seconds"] = round(big.start(), 3)
        data["big"] = _measure(big, samples, seeded["story"])
    size = f"{seeded['execs']:,} execs / {seeded['lineages']} lineages"
    labels = {"load_overview": "page load: overview (needs you, agents, running)",
              "load_execs": "page load: execs, page 1",
              "load_execs_search": "page load: execs searched (q=job-77)",
              "load_agents": "page load: agents, every status",
              "load_lineage": (f"page load: a lineage ({seeded['story'].get('attempts')} "
                               f"attempts, {seeded['story'].get('turns')} turns)"),
              "update_execs": "update: a started exec shown on /execs",
              "update_overview": "update: a started exec shown on the overview",
              "update_lineage": "update: an agent's turn shown on its lineage view"}
    for key, label in labels.items():
        big_v, small_v = data["big"][key], data["small"][key]
        rows.append(Row("web_scale", f"{label}, p50", fmt_ms(float(big_v["p50"])),
                        f"{fmt_ms(float(small_v['p50']))} with 20 execs", ""))
        if key.startswith("update"):
            rows.append(Row("web_scale", "  p99", fmt_ms(float(big_v["p99"])),
                            f"{fmt_ms(float(small_v['p99']))} with 20 execs", ""))
    rows.append(Row("web_scale", "daemon: exec.list, a page of 50 (what a view asks), p50",
                    fmt_ms(float(data["big"]["exec_list_page"]["p50"])),
                    f"{fmt_ms(float(data['big']['exec_list_all']['p50']))} for all "
                    f"{seeded['execs']:,} (what the old page asked at every change)", ""))
    notes.append(f"home: {size}, {seeded['events']:,} journal events seeded in "
                 f"{data['seed_seconds']} s; daemon SERVING {data['daemon_start_seconds']} s "
                 "after start; plus 4 running execs and 3 live agents")
    return BenchResult("web_scale", "Dashboard at scale (tether web, Chromium)",
                       {"samples": samples, "execs": n_execs, "lineages": n_lineages},
                       data, rows, seconds=time.perf_counter() - t_start, notes=notes)
