"""The dashboard as its users meet it: Debian's chromium, headless, driven by Playwright,
against `tether web` and the real daemon — a started exec appears, an agent's context bar
moves after a turn, typed keys echo in the browser terminal, and the page survives a
daemon ``kill -9`` with no duplicate and no missing event.

Skipped when chromium is not installed, unless ``TETHER_REQUIRE_DOCKER=1`` (CI), which
provisions it (`.ci/provision.sh`): then a missing browser fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import FIXTURES, TETHER, DaemonProc, new_home, remove_home, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("TETHER_SCREENSHOTS")  # a directory: save a picture of each view

pytestmark = pytest.mark.xdist_group("browser")  # one browser at a time: 2 cores


def _need_browser() -> None:
    if CHROMIUM is None:
        if os.environ.get("TETHER_REQUIRE_DOCKER") == "1":
            pytest.fail("CI needs Debian's chromium for the dashboard tests (.ci/provision.sh)")
        pytest.skip("chromium is not installed (apt-get install chromium)")


class Web:
    def __init__(self, d: DaemonProc, *extra: str) -> None:
        self.proc = subprocess.Popen([*TETHER, "--home", str(d.home), "web", "--port", "0",
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=d.env, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        m = re.search(r"(http://\S+)", line)
        assert m, (line, self.proc.stderr.read().decode() if self.proc.stderr else "")
        self.url = m.group(1)
        self.base = self.url.split("/?")[0]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def d() -> Iterator[DaemonProc]:
    _need_browser()
    home = new_home()
    proc = DaemonProc(home)
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()
        remove_home(home)


@pytest.fixture
def web(d: DaemonProc) -> Iterator[Web]:
    w = Web(d)
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def page(web: Web) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(web.url)
        pg.wait_for_selector("#daemon.ok", timeout=15000)
        try:
            yield pg
        finally:
            browser.close()


def shot(pg: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def term_text(pg: Any) -> str:
    text: str = pg.evaluate("""() => { const b = window.tetherTerm.buffer.active; const out = [];
        for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
        return out.join("\\n"); }""")
    return text


def test_a_started_exec_appears_at_once_with_its_logs_and_a_kill_button(
        d: DaemonProc, page: Any) -> None:
    c = d.client()
    x = c.exec_start(["sh", "-c", "echo hello-web; sleep 60"], name="webby")
    t0 = time.monotonic()
    page.wait_for_selector(f'tr[data-exec="{x.id}"][data-state="RUNNING"]', timeout=10000)
    shown = time.monotonic() - t0
    assert shown < 1.0, f"the exec took {shown:.2f} s to appear"
    page.click(f'tr[data-exec="{x.id}"] button[data-logs]')
    page.wait_for_function("() => document.querySelector('#logs').textContent"
                           ".includes('hello-web')", timeout=10000)
    shot(page, "execs")
    page.click(f'tr[data-exec="{x.id}"] button[data-action="kill"]')
    page.wait_for_selector(f'tr[data-exec="{x.id}"][data-state="CANCELLED"]', timeout=15000)
    assert c.exec_get(x.id).state == "CANCELLED"


def test_an_agents_context_bar_moves_after_a_turn(d: DaemonProc, page: Any,
                                                  tmp_path: Path) -> None:
    c = d.client()
    creds = tmp_path / "creds"
    lin = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                         f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                        provider="generic", name="barista")
    wait_for(creds.exists, 20, what="the agent's credentials")
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct=""]', timeout=10000)
    session, token = creds.read_text().split()
    c.agent_turn(session, token, context_pct=37.0, usage={"input_tokens": 10})
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct="37"]', timeout=10000)
    c.agent_turn(session, token, context_pct=72.0)
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct="72"]', timeout=10000)
    assert "1" in page.text_content(f'tr[data-lineage="{lin.id}"]')  # turns column
    shot(page, "agents")


def test_typed_keys_echo_in_the_browser_terminal_and_read_only_types_nothing(
        d: DaemonProc, page: Any) -> None:
    c = d.client()
    x = c.exec_start(["bash", "--norc", "--noprofile", "-i"], tty=True, rows=24, cols=100,
                     env={"PS1": "web$ "})
    page.wait_for_selector(f'tr[data-exec="{x.id}"] button[data-term]', timeout=10000)
    page.click(f'tr[data-exec="{x.id}"] button[data-term]')
    page.wait_for_function("() => window.tetherTerm !== undefined", timeout=10000)
    wait_for(lambda: "web$" in term_text(page), 10, what="the prompt in the browser")
    page.click("#term")
    page.keyboard.type("echo typed-$((6*7))\n")
    wait_for(lambda: "typed-42" in term_text(page), 10, what="the echo in the browser")
    shot(page, "terminal")
    # Detach, then attach read-only: keys go nowhere, output still arrives.
    page.click("#term-detach")
    assert c.exec_get(x.id).state == "RUNNING"
    page.check("#term-ro")
    page.click(f'tr[data-exec="{x.id}"] button[data-term]')
    wait_for(lambda: "typed-42" in term_text(page), 10, what="the replay")
    page.click("#term")
    page.keyboard.type("echo ignored-$((2*3))\n")
    with c.attach(x.id) as t:  # another client types: the read-only page sees it
        t.write("echo other-$((5*5))\n")
        t.read_until(b"other-25", timeout=10)
    wait_for(lambda: "other-25" in term_text(page), 10, what="output on the read-only page")
    assert "ignored-6" not in term_text(page)


def test_the_page_survives_a_daemon_kill_with_no_event_lost_or_twice(
        d: DaemonProc, page: Any) -> None:
    c = d.client()
    first = c.exec_start(["true"])
    page.wait_for_selector(f'tr[data-exec="{first.id}"]', timeout=10000)
    d.kill9()
    page.wait_for_selector("#daemon.bad, #daemon.warn", timeout=15000)
    d.start()
    c = d.client()
    after = c.exec_start(["sh", "-c", "echo after"])
    c.exec_wait(after.id, timeout=20)
    page.wait_for_selector(f'tr[data-exec="{after.id}"][data-state="FINISHED"]', timeout=20000)
    journal = [e.gseq for e in c.events_list(since=0, limit=1000).events]

    def shown() -> list[int]:
        got: list[int] = page.eval_on_selector_all(
            "#events li", "els => els.map(e => Number(e.dataset.gseq))")
        return got
    wait_for(lambda: set(shown()) >= set(journal), 15, what="every journaled event on the page")
    on_page = shown()
    assert len(on_page) == len(set(on_page)), "an event is shown twice"
    # The daemon may journal more meanwhile: read the journal again after the page.
    now = {e.gseq for e in c.events_list(since=0, limit=1000).events}
    assert set(on_page) <= now, "the page shows events the journal lacks"


def test_the_token_guards_every_route_and_read_only_refuses_actions(d: DaemonProc) -> None:
    import urllib.error
    import urllib.request

    w = Web(d, "--read-only")
    try:
        token = w.url.split("token=")[1]

        def get(path: str, **headers: str) -> tuple[int, bytes]:
            req = urllib.request.Request(w.base + path, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        def post(path: str, **headers: str) -> tuple[int, bytes]:
            req = urllib.request.Request(w.base + path, data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **headers})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        status, body = get("/api/state")
        assert status == 401 and b"token" in body
        assert get("/api/state", Authorization="Bearer wrong")[0] == 401
        status, body = get("/api/state", Authorization=f"Bearer {token}")
        assert status == 200 and json.loads(body)["read_only"] is True
        assert post("/api/kill", Authorization=f"Bearer {token}",
                    Origin="http://evil.example")[0] == 401
        status, body = post("/api/kill", Authorization=f"Bearer {token}")
        assert status == 403 and json.loads(body)["error"]["code"] == "READ_ONLY"
        status, body = get("/metrics", Authorization=f"Bearer {token}")
        assert status == 200 and b"# TYPE tether_" in body
        assert get("/metrics")[0] == 401
        mode = (d.home / "web.token").stat().st_mode & 0o777
        assert mode == 0o600 and (d.home / "web.token").read_text() == token
    finally:
        w.stop()


def test_the_needs_you_list_resolves_an_ask_revival_and_shows_a_waiting_agent(
        d: DaemonProc, page: Any, tmp_path: Path) -> None:
    c = d.client()
    dead = c.agent_start(["sh", "-c", "sleep 0.3; exit 3"], provider="generic",
                         name="asker", revival="ask")
    item = f'#needs li[data-needs="{dead.id}"]'
    page.wait_for_selector(f'{item} button[data-action="revive"]', timeout=20000)
    creds = tmp_path / "creds"
    waiter = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                            f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                           provider="generic", name="waiter")
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    payload = json.loads((FIXTURES / "claude" / "Notification.json").read_text())
    c.agent_hook(session, token, "claude", "Notification", payload)
    page.wait_for_selector(f'#needs li[data-needs="{waiter.id}"]', timeout=10000)
    assert "waiting for you" in page.text_content(f'#needs li[data-needs="{waiter.id}"]')
    shot(page, "needs-you")
    page.click(f'{item} button[data-action="reap-lineage"]')
    wait_for(lambda: c.lineage_get(dead.id).status == "REAPED", 15, what="the reap")
    page.wait_for_selector(item, state="detached", timeout=10000)


SONNET = "claude-sonnet-4-5-20250929"  # shipped: $3 in, $15 out per million tokens


def test_agents_show_cost_budget_exit_reason_and_a_usage_limit_wait(
        d: DaemonProc, page: Any, tmp_path: Path) -> None:
    """A lineage past its budget and one waiting for its usage limit's reset: both in
    the agents table (cost / budget, exit reason, the reset time) and in "needs you"."""
    from tests.standin import start

    c = d.client()
    creds = tmp_path / "creds"
    capped = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                            f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                           provider="generic", name="capped", budget_usd=1.0)
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    c.agent_turn(session, token, model=SONNET, usage={"input_tokens": 100_000,
                                                      "output_tokens": 50_000})  # $1.05
    row = f'tr[data-lineage="{capped.id}"]'
    page.wait_for_selector(f'{row} .cost.over[data-cost="1.05"][data-budget="1.00"]',
                           timeout=10000)
    page.wait_for_selector(f'#needs li[data-needs="{capped.id}"]', timeout=10000)
    assert "reached its budget" in page.text_content(f'#needs li[data-needs="{capped.id}"]')
    reset = int(time.time()) + 3600
    plan = {"1": [{"print": f"Claude AI usage limit reached|{reset}"}, {"exit": 1}]}
    limited = start(c, tmp_path, "claude", plan, "-p", "fix it")
    item = f'#needs li[data-needs="{limited.id}"]'
    page.wait_for_selector(f'{item} button[data-action="revive"]', timeout=20000)
    assert "usage limit" in page.text_content(item)
    row = f'tr[data-lineage="{limited.id}"]'
    assert "WAITING_LIMIT until" in page.text_content(f"{row} td.state-WAITING_LIMIT")
    assert page.text_content(f"{row} td.exit") == "usage_limited"
    shot(page, "agents-cost-limits")


def test_panels_show_scheduled_jobs_webhook_dead_letters_and_sandbox_health(
        d: DaemonProc, page: Any, tmp_path: Path) -> None:
    c = d.client()
    c.schedule_add("hourly", ["true"], every=3600, cwd=str(tmp_path))
    c.schedule_run_now("hourly")
    c.hook_add("broken", ["exec.finished"], exec=["false"], max_tries=1, match_name="poke")
    c.exec_wait(c.exec_start(["true"], cwd=str(tmp_path), name="poke").id, timeout=20)
    page.wait_for_selector('#jobs tr[data-job="hourly"][data-state="ACTIVE"]', timeout=10000)
    wait_for(lambda: page.text_content('#jobs tr[data-job="hourly"] td:nth-child(8)')
             == "SUCCESS", 20, what="the run-now run on the page")
    page.wait_for_selector('#hooks tr[data-hook="broken"][data-dead="1"]', timeout=20000)
    assert "tether hook retry broken" in page.text_content('#hooks tr[data-hook="broken"]')
    assert page.text_content('#sandboxes tr[data-sandbox] td.health') == "ok"
    shot(page, "panels")
