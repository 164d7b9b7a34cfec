"""The dashboard as its users meet it: Debian's chromium, headless, driven by Playwright,
against `tether web` and the real daemon. One test (at least) per view: the overview
(what needs you, live agents, running execs), execs (filters, search, paging, names not
ids), one exec (stdout beside stderr followed live, its terminal), agents, one lineage
(its attempts as a timeline, context chart, revivals and why, exit reasons, cost,
handoff, worktree and branch), sandboxes, jobs, webhooks and the event journal, which
survives a daemon ``kill -9`` with no duplicate and no missing event. Each view has a URL
that opens it in a new tab.

Skipped when chromium is not installed, unless ``TETHER_REQUIRE_DOCKER=1`` (CI), which
provisions it (`.ci/provision.sh`): then a missing browser fails. ``make screenshots``
runs these with ``TETHER_SCREENSHOTS`` set: each view's picture goes to docs/screenshots.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import FIXTURES, DaemonProc, new_home, remove_home, wait_for
from tests.webpage import Web, chromium, need_browser, open_page, shot, term_text

pytestmark = pytest.mark.xdist_group("browser")  # one browser at a time: 2 cores

SONNET = "claude-sonnet-4-5-20250929"  # shipped: $3 in, $15 out per million tokens
EN = "\u2013"  # an en dash: the page writes ranges as "1 EN 50 of 56"
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d · ")


@pytest.fixture
def d() -> Iterator[DaemonProc]:
    need_browser()
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
def ctx(web: Web) -> Iterator[Any]:
    with chromium() as c:
        yield c


@pytest.fixture
def page(ctx: Any, web: Web) -> Any:
    return open_page(ctx, web.url)


def wait_text(page: Any, selector: str, text: str, timeout: float = 10000) -> None:
    page.wait_for_function("([s, t]) => (document.querySelector(s)?.textContent || '')"
                           ".includes(t)", arg=[selector, text], timeout=timeout)


def agent_creds(c: Any, tmp_path: Path, name: str, **kw: Any) -> tuple[Any, str, str]:
    """A generic agent that hands its session out, then idles."""
    creds = tmp_path / f"creds-{name}"
    lin = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                         f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                        provider="generic", name=name, **kw)
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    return lin, session, token


# ---------------------------------------------------------------------- execs
def test_a_started_exec_appears_at_once_and_its_view_follows_stdout_beside_stderr(
        d: DaemonProc, page: Any, web: Web) -> None:
    c = d.client()
    page.click("#nav a[data-view=execs]")
    page.wait_for_selector("#f-running")
    x = c.exec_start(["sh", "-c", "echo hello-web; echo oops-web >&2; sleep 0.5; "
                      "echo second-out; echo second-err >&2; sleep 60"], name="webby")
    t0 = time.monotonic()
    page.wait_for_selector(f'tr[data-exec="{x.id}"][data-state="RUNNING"]', timeout=10000)
    shown = time.monotonic() - t0
    assert shown < 1.0, f"the exec took {shown:.2f} s to appear"
    row = page.text_content(f'tr[data-exec="{x.id}"]')
    assert "webby" in row and "default" in row
    assert STAMP.match(page.text_content(f'tr[data-exec="{x.id}"] time'))
    page.click(f'tr[data-exec="{x.id}"] td a')
    page.wait_for_url(f"{web.base}/exec/{x.id}")
    for pane, text in (("#logs", "second-out"), ("#stderr", "second-err")):
        wait_text(page, pane, text)
    assert "oops" not in page.text_content("#logs")  # each stream in its own pane
    assert page.text_content("#stderr") == "oops-web\nsecond-err\n"
    shot(page, "exec")
    page.click('button[data-action="kill"]')
    wait_for(lambda: c.exec_get(x.id).state == "CANCELLED", 15, what="the kill")
    page.wait_for_selector(".card .state-CANCELLED", timeout=10000)


def test_a_hidden_tab_lets_its_streams_go_and_resumes_them_without_a_gap_or_a_repeat(
        d: DaemonProc, page: Any, web: Web) -> None:
    """A browser holds six connections to a host across its tabs: a tab hidden for 3 s
    closes its streams (stdout and stderr share one), and once shown again both logs go
    on from the offsets they had reached (the stream's Last-Event-ID), every line once."""
    c = d.client()
    x = c.exec_start(["sh", "-c", "for i in $(seq 1 400); do echo out$i; echo err$i >&2; "
                      "sleep 0.05; done; sleep 60"], name="chatty")
    page.goto(f"{web.base}/exec/{x.id}")
    wait_text(page, "#stderr", "err5\n")
    page.evaluate("""() => { Object.defineProperty(document, 'hidden', {value: true,
        configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }""")
    time.sleep(3.5)
    frozen = page.text_content("#logs")
    time.sleep(1.0)
    assert page.text_content("#logs") == frozen, "a hidden tab kept its stream"
    page.evaluate("""() => { Object.defineProperty(document, 'hidden', {value: false,
        configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }""")
    wait_text(page, "#logs", "out400\n", timeout=30000)
    wait_text(page, "#stderr", "err400\n", timeout=30000)
    assert page.text_content("#logs") == "".join(f"out{i}\n" for i in range(1, 401))
    assert page.text_content("#stderr") == "".join(f"err{i}\n" for i in range(1, 401))


def test_a_long_log_opens_at_its_end(d: DaemonProc, page: Any, web: Web) -> None:
    """A page shows the last 256 KiB of a log and says how much it left out."""
    c = d.client()
    x = c.exec_start(["sh", "-c", "seq 1 200000; echo the-last-line"], name="long")
    c.exec_wait(x.id, timeout=30)
    page.goto(f"{web.base}/exec/{x.id}")
    page.wait_for_selector(".log-pane[data-stream=stdout][data-ended]", timeout=15000)
    text = page.text_content("#logs")
    assert text.endswith("199999\n200000\nthe-last-line\n") and len(text) <= 256 * 1024
    size = len(b"".join(c.read_logs(x.id)))
    skipped = size - 256 * 1024
    assert f"the first {skipped:,} bytes are not shown" in page.text_content(
        ".log-pane[data-stream=stdout] .pane-head")


def test_execs_are_filtered_searched_and_paged_by_name_not_id(
        d: DaemonProc, page: Any, web: Web, tmp_path: Path) -> None:
    c = d.client()
    c.sandbox_create("builds", runtime="process")
    ids = [c.exec_start(["true"], name=f"job-{i:02d}").id for i in range(55)]
    for x in ids:
        c.exec_wait(x, timeout=20)
    lone = c.exec_start(["sh", "-c", "sleep 60"], sandbox="builds", name="needle-in-builds")
    page.goto(f"{web.base}/execs")
    page.wait_for_selector(f'tr[data-exec="{lone.id}"]')
    assert page.text_content("#pager span") == f"1{EN}50 of 56"
    assert page.eval_on_selector_all("table.execs tbody tr", "rs => rs.length") == 50
    assert page.text_content(f'tr[data-exec="{lone.id}"] td:nth-child(2)') == "builds"
    page.click("#page-next")
    page.wait_for_selector(f"#pager span:text('51{EN}56 of 56')")
    assert "offset=50" in page.url
    # Newest first: page two holds the six oldest.
    assert page.eval_on_selector_all("table.execs tbody tr",
                                     "rs => rs.map(r => r.dataset.exec)") == ids[:6][::-1]
    page.check("#f-running")
    page.wait_for_selector(f"#pager span:text('1{EN}1 of 1')")
    assert "running=1" in page.url
    page.uncheck("#f-running")
    page.select_option("#f-sandbox", "builds")
    page.wait_for_selector(f"#pager span:text('1{EN}1 of 1')")
    page.select_option("#f-sandbox", "")
    page.fill("#f-q", "JOB-4")  # the name, ignoring case
    page.wait_for_selector(f"#pager span:text('1{EN}10 of 10')")
    assert "q=JOB-4" in page.url
    page.select_option("#f-state", "FINISHED")
    page.wait_for_selector(f"#pager span:text('1{EN}10 of 10')")
    shot(page, "execs")
    # The URL is the view: reloaded (or shared), it shows the same rows.
    page.reload()
    page.wait_for_selector(f"#pager span:text('1{EN}10 of 10')")
    assert page.input_value("#f-q") == "JOB-4"
    page.fill("#f-q", "needle")
    page.select_option("#f-state", "")
    page.wait_for_selector(f'tr[data-exec="{lone.id}"]')
    assert page.text_content("#pager span") == f"1{EN}1 of 1"


def test_the_run_form_starts_a_sandboxed_command_in_a_project_directory(
        d: DaemonProc, page: Any, web: Web, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    page.goto(f"{web.base}/execs")
    page.click("#run-open")
    page.fill("#run-cmd", "pwd; echo started-from-the-page")
    page.fill("#run-cwd", str(project))
    page.fill("#run-name", "from-page")
    page.click("#run-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/exec/[0-9a-f]{12}$"))
    wait_text(page, "#logs", "started-from-the-page")
    assert page.text_content("#logs").startswith(f"{project}\n")


# ---------------------------------------------------------------------- agents
def test_an_agents_context_bar_moves_after_a_turn(d: DaemonProc, page: Any,
                                                  tmp_path: Path) -> None:
    c = d.client()
    lin, session, token = agent_creds(c, tmp_path, "barista")
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct=""]', timeout=10000)
    c.agent_turn(session, token, context_pct=37.0, usage={"input_tokens": 10})
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct="37"]', timeout=10000)
    c.agent_turn(session, token, context_pct=72.0)
    page.wait_for_selector(f'tr[data-lineage="{lin.id}"] .bar[data-pct="72"]', timeout=10000)
    assert page.text_content(f'tr[data-lineage="{lin.id}"] td:nth-child(7)') == "2"  # turns
    shot(page, "overview")


def test_the_lineage_view_is_a_timeline_of_attempts_with_revivals_cost_and_handoff(
        d: DaemonProc, ctx: Any, web: Web, tmp_path: Path) -> None:
    """A real worktree agent: two turns at 30% and 61% on Sonnet, a handoff, then it
    dies (exit 3) and is revived; the lineage's own URL, opened in a new tab, shows the
    attempts, why the second one was started, exit reasons, cost, the context chart,
    the handoff (as text), the worktree and its branch, and its current attempt's logs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    tree = tmp_path / "tree"
    subprocess.run([*git, "worktree", "add", "-q", "-b", "fix-42", str(tree)], check=True)
    c = d.client()
    marker = tmp_path / "died-once"
    script = (f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > {tmp_path}/s.tmp; '
              f"mv {tmp_path}/s.tmp {tmp_path}/s; echo attempt-output; "
              f"if [ ! -e {marker} ]; then sleep 1.5; touch {marker}; exit 3; fi; exec sleep 120")
    lin = c.agent_start(["sh", "-c", script], provider="generic", name="fixer",
                        cwd=str(tree), worktree=str(tree), issue="ENG-42 fix it")
    wait_for(lambda: (tmp_path / "s").exists(), 20, what="attempt 1's credentials")
    session, token = (tmp_path / "s").read_text().split()
    c.agent_turn(session, token, context_pct=30.0, model=SONNET,
                 usage={"input_tokens": 100_000, "output_tokens": 10_000})
    c.agent_turn(session, token, context_pct=61.0, model=SONNET,
                 usage={"input_tokens": 50_000})
    c.agent_handoff(session, token, "## next\n<img src=x onerror=window.__pwned=1> fix the "
                    "parser, then <b>run</b> make test\n")
    (tmp_path / "s").unlink()
    wait_for(lambda: c.lineage_get(lin.id).attempt == 2 and (tmp_path / "s").exists(), 30,
             what="the revival")
    open_page(ctx, web.url)  # the dashboard was opened once in this browser, with its token
    # Then the lineage's URL alone, in a new tab.
    view = open_page(ctx, f"{web.base}/lineage/{lin.id}", '#attempts li[data-attempt="2"]')
    first = view.text_content('#attempts li[data-attempt="1"]')
    assert "ended: crashed" in first and f"2 turns (1{EN}2)" in first, first
    assert "$0.60" in first  # 150k in at $3/M + 10k out at $15/M
    second = view.text_content('#attempts li[data-attempt="2"]')
    assert "revived because: died: exited with code 3" in second, second
    assert "running" in second
    assert view.text_content("#worktree") == str(tree)
    assert view.text_content("#branch") == "fix-42"
    handoff = view.text_content("#handoff")
    assert "<img src=x onerror=window.__pwned=1>" in handoff and "<b>run</b>" in handoff
    assert view.evaluate("() => window.__pwned") is None
    assert view.eval_on_selector_all("#ctx-chart circle.dot", "cs => cs.length") == 2
    assert view.eval_on_selector_all("#ctx-chart line.revival", "ls => ls.length") == 1
    wait_text(view, "#logs", "attempt-output")
    shot(view, "lineage")
    # It follows the lineage: the next turn shows without a reload.
    session, token = (tmp_path / "s").read_text().split()
    c.agent_turn(session, token, context_pct=12.0)
    view.wait_for_selector(f'#attempts li[data-attempt="2"]:has-text("1 turn (3{EN}3)")',
                           timeout=10000)
    assert view.errors == []


def test_the_needs_you_list_resolves_an_ask_revival_and_shows_a_waiting_agent(
        d: DaemonProc, page: Any, web: Web, tmp_path: Path) -> None:
    c = d.client()
    dead = c.agent_start(["sh", "-c", "sleep 0.3; exit 3"], provider="generic",
                         name="asker", revival="ask")
    item = f'#needs li[data-needs="{dead.id}"]'
    page.wait_for_selector(f'{item} button[data-action="revive"]', timeout=20000)
    assert page.text_content("#needs-badge") == "1 needs you"
    waiter, session, token = agent_creds(c, tmp_path, "waiter")
    payload = json.loads((FIXTURES / "claude" / "Notification.json").read_text())
    c.agent_hook(session, token, "claude", "Notification", payload)
    page.wait_for_selector(f'#needs li[data-needs="{waiter.id}"]', timeout=10000)
    assert "waiting for you" in page.text_content(f'#needs li[data-needs="{waiter.id}"]')
    shot(page, "needs-you")
    # Its lineage view shows the same, with the actions.
    page.click(f"{item} a")
    page.wait_for_url(f"{web.base}/lineage/{dead.id}")
    page.click(f'{item} button[data-action="reap-lineage"]')
    wait_for(lambda: c.lineage_get(dead.id).status == "REAPED", 15, what="the reap")
    page.wait_for_selector(item, state="detached", timeout=10000)
    page.wait_for_selector(".card .state-REAPED", timeout=10000)
    # A waiting agent is still counted on every view; a fresh dashboard (restarted
    # `tether web`) knows it too, from the journal.
    page.wait_for_selector("#needs-badge:text('1 needs you')", timeout=10000)
    again = Web(d)
    try:
        other = open_page(page.context, again.url)
        other.wait_for_selector(f'#needs li[data-needs="{waiter.id}"]', timeout=10000)
    finally:
        again.stop()


def test_agents_show_cost_budget_exit_reason_and_a_usage_limit_wait(
        d: DaemonProc, page: Any, web: Web, tmp_path: Path) -> None:
    """A lineage past its budget and one waiting for its usage limit's reset: both in
    the agents table (cost / budget, exit reason, the reset time) and in "needs you"."""
    from tests.standin import start

    c = d.client()
    capped, session, token = agent_creds(c, tmp_path, "capped", budget_usd=1.0)
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
    # The agents view: every status, searched by name, paged.
    page.click("#nav a[data-view=agents]")
    page.wait_for_selector(f'tr[data-lineage="{capped.id}"]')
    page.fill("#f-q", "capp")
    page.wait_for_selector(f'tr[data-lineage="{limited.id}"]', state="detached")
    assert page.text_content("#pager span") == f"1{EN}1 of 1"
    shot(page, "agents")


# ---------------------------------------------------------------------- terminal
def test_typed_keys_echo_in_the_browser_terminal_and_read_only_types_nothing(
        d: DaemonProc, page: Any, web: Web) -> None:
    c = d.client()
    x = c.exec_start(["bash", "--norc", "--noprofile", "-i"], tty=True, rows=24, cols=100,
                     env={"PS1": "web$ "}, name="shell")
    page.wait_for_selector(f'tr[data-exec="{x.id}"] button[data-open]', timeout=10000)
    page.click(f'tr[data-exec="{x.id}"] button[data-open]')
    page.wait_for_url(f"{web.base}/exec/{x.id}")
    page.wait_for_selector(".term-pane[data-attached=rw]", timeout=10000)
    wait_for(lambda: "web$" in term_text(page), 10, what="the prompt in the browser")
    page.click("#term")
    page.keyboard.type("echo typed-$((6*7))\n")
    wait_for(lambda: "typed-42" in term_text(page), 10, what="the echo in the browser")
    box = page.eval_on_selector("#term", "e => e.getBoundingClientRect().height")
    assert box > 500, f"the terminal does not fill the view ({box}px)"
    shot(page, "terminal")
    # Detach, then attach read-only: keys go nowhere, output still arrives.
    page.click("#term-detach")
    assert c.exec_get(x.id).state == "RUNNING"
    page.check("#term-ro")
    page.wait_for_selector(".term-pane[data-attached=ro]", timeout=10000)
    wait_for(lambda: "typed-42" in term_text(page), 10, what="the replay")
    page.click("#term")
    page.keyboard.type("echo ignored-$((2*3))\n")
    with c.attach(x.id) as t:  # another client types: the read-only page sees it
        t.write("echo other-$((5*5))\n")
        t.read_until(b"other-25", timeout=10)
    wait_for(lambda: "other-25" in term_text(page), 10, what="output on the read-only page")
    assert "ignored-6" not in term_text(page)


# ---------------------------------------------------------------------- the journal
def test_the_page_survives_a_daemon_kill_with_no_event_lost_or_twice(
        d: DaemonProc, page: Any) -> None:
    c = d.client()
    first = c.exec_start(["true"])
    page.wait_for_selector(f'tr[data-exec="{first.id}"]', timeout=10000)
    page.click("#nav a[data-view=events]")
    page.wait_for_selector("#events li")
    d.kill9()
    page.wait_for_selector("#daemon.bad, #daemon.warn", timeout=15000)
    d.start()
    c = d.client()
    after = c.exec_start(["sh", "-c", "echo after"])
    c.exec_wait(after.id, timeout=20)
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
    page.wait_for_selector("#daemon.ok", timeout=15000)
    shot(page, "events")


# ---------------------------------------------------------------------- panels
def test_panels_show_scheduled_jobs_webhook_dead_letters_and_sandbox_health(
        d: DaemonProc, page: Any, web: Web, tmp_path: Path) -> None:
    c = d.client()
    c.schedule_add("hourly", ["true"], every=3600, cwd=str(tmp_path))
    c.schedule_run_now("hourly")
    c.hook_add("broken", ["exec.finished"], exec=["false"], max_tries=1, match_name="poke")
    c.exec_wait(c.exec_start(["true"], cwd=str(tmp_path), name="poke").id, timeout=20)
    page.click("#nav a[data-view=jobs]")
    page.wait_for_selector('#view table.jobs tr[data-job="hourly"][data-state="ACTIVE"]',
                           timeout=10000)
    wait_for(lambda: page.text_content('tr[data-job="hourly"] td:nth-child(8)')
             == "SUCCESS", 20, what="the run-now run on the page")
    shot(page, "jobs")
    page.click("#nav a[data-view=hooks]")
    page.wait_for_selector('table.hooks tr[data-hook="broken"][data-dead="1"]', timeout=20000)
    assert "tether hook retry broken" in page.text_content('tr[data-hook="broken"]')
    page.click("#nav a[data-view=sandboxes]")
    page.wait_for_selector("table.sandboxes tr[data-sandbox]")
    assert page.text_content('tr[data-sandbox="default"] td.health') == "ok"
    page.go_back()
    page.wait_for_selector('table.hooks tr[data-hook="broken"]')


# ---------------------------------------------------------------------- time
def test_times_are_local_iso_8601_on_a_24_hour_clock_as_the_cli_prints_them(
        d: DaemonProc, web: Web) -> None:
    c = d.client()
    x = c.exec_start(["sleep", "60"], name="clock")
    zone = "Asia/Kolkata"  # UTC+05:30: a half-hour offset shows a wrong conversion
    with chromium(timezone_id=zone) as ctx:
        page = open_page(ctx, f"{web.url}")
        assert page.text_content("#tz").endswith(" (UTC+05:30)")  # ICU: Asia/Calcutta
        cell = page.text_content(f'tr[data-exec="{x.id}"] time')
        attr = page.get_attribute(f'tr[data-exec="{x.id}"] time', "datetime")
    r = d.cli("ps", env={"TZ": zone})
    line = next(ln for ln in r.stdout.decode().splitlines() if x.id in ln)
    shown = cell.split(" · ")[0]
    assert shown in line, (cell, line)  # the CLI's STARTED column, to the second
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30", attr), attr
    assert re.fullmatch(r"\d+s ago", cell.split(" · ")[1]), cell
