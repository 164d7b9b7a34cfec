"""Cost accounting and budgets against the real daemon: turns with usage priced by the
shipped table and by ``<home>/prices.toml``; unknown models shown as unknown; a
lineage's budget and the daily one journal ``agent.budget`` once per crossing, then
deny Claude's PreToolUse (pause) or stop the agent (stop); a crossing survives a
SIGKILL between the turn's commit and its event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Client, DaemonProc, new_home, raw_call, remove_home, wait_for
from tether.client.errors import TetherError

SONNET = "claude-sonnet-4-5-20250929"  # shipped: $3 in, $15 out, $0.30 / $3.75 cache


@pytest.fixture
def dd() -> Iterator[DaemonProc]:
    home = new_home()
    d = DaemonProc(home, env={"TETHER_DIGEST_TZ": "UTC"})
    try:
        yield d
    finally:
        d.cleanup()
        remove_home(home)


def start_agent(c: Client, tmp: Path, name: str, **kw: Any) -> tuple[str, str, str]:
    """A generic agent that waits (its credentials written for the test to speak as it)."""
    creds = tmp / f"{name}.creds"
    script = (f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > {creds}.tmp; '
              f"mv {creds}.tmp {creds}; sleep 600")
    lin = c.agent_start(["sh", "-c", script], provider="generic", name=name, **kw)
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    return lin.id, session, token


def budget_events(c: Client) -> list[Any]:
    return [e for e in c.events_list(since=0, limit=1000).events if e.type == "agent.budget"]


def pre_tool_use(c: Client, session: str, token: str) -> tuple[bool, str]:
    r = c.agent_hook(session, token, "claude", "PreToolUse",
                     {"hook_event_name": "PreToolUse", "session_id": "s1",
                      "tool_name": "Bash", "tool_input": {"command": "ls"}})
    if not r.stdout:
        return True, ""
    out = json.loads(r.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    return False, str(out["permissionDecisionReason"])


def cost_json(d: DaemonProc, *args: str) -> dict[str, Any]:
    r = d.cli("cost", "--json", *args)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_cost_figures_unknown_models_and_the_price_override(dd: DaemonProc,
                                                             tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    lin, session, token = start_agent(c, tmp_path, "pricey")
    # (what one request of Sonnet 4.5 can carry: a turn's usage is capped at that, per
    # request and second — docs/SECURITY.md, "Usage")
    c.agent_turn(session, token, model=SONNET, usage={
        "input_tokens": 100_000, "output_tokens": 20_000,
        "cache_read_tokens": 200_000, "cache_creation_tokens": 10_000})
    c.agent_turn(session, token, model="llama-local-7b", usage={"input_tokens": 1000})
    expected = 0.3 + 0.3 + 0.06 + 0.0375

    by_model = {r["key"]: r for r in cost_json(dd, "--by", "model")["rows"]}
    assert by_model[SONNET]["cost_usd"] == pytest.approx(expected, abs=1e-9)
    assert by_model["llama-local-7b"]["cost_usd"] is None  # unknown, not zero
    rep = cost_json(dd, "--by", "lineage")
    (row,) = rep["rows"]
    assert row["key"] == lin and row["turns"] == 2
    assert row["cost_usd"] is None and row["unpriced_turns"] == 1
    assert row["priced_usd"] == pytest.approx(expected, abs=1e-9)
    assert any("llama-local-7b" in n and "prices.toml" in n for n in rep["notes"])
    text = dd.cli("cost", "--by", "lineage")
    assert text.returncode == 0 and "unknown" in text.stdout.decode()
    assert "no price for model 'llama-local-7b'" in text.stderr.decode()
    day = cost_json(dd, "--by", "day", "--since", "1d")["rows"]
    assert len(day) == 1 and day[0]["turns"] == 2
    assert cost_json(dd, "--by", "sandbox")["rows"][0]["key"] == "default"

    # The override file: a price for the local model, a new one for Sonnet.
    (dd.home / "prices.toml").write_text(
        '[[price]]\nmodel = "llama-local"\ninput = 0.5\noutput = 1\n\n'
        '[[price]]\nmodel = "claude-sonnet-4-5"\nsince = 2025-01-01\ninput = 1\n'
        'output = 2\ncache_read = 0.1\ncache_write = 1\n')
    rep = cost_json(dd, "--by", "lineage")
    assert rep["rows"][0]["cost_usd"] == pytest.approx(0.1 + 0.04 + 0.02 + 0.01 + 0.0005,
                                                       abs=1e-9)
    assert rep["notes"] == []

    # A bad override: a clear error naming the file and the key; the daemon serves on.
    (dd.home / "prices.toml").write_text('[[price]]\nmodel = "x"\ninput = "cheap"\noutput = 1\n')
    bad = dd.cli("cost")
    assert bad.returncode != 0
    err = bad.stderr.decode()
    assert str(dd.home / "prices.toml") in err and "'input'" in err and "price[0]" in err
    (dd.home / "prices.toml").write_text("[[price]\n")
    assert "not valid TOML" in dd.cli("cost").stderr.decode()
    assert c.health().status == "SERVING"


def test_a_lineage_budget_pauses_then_a_raise_resumes(dd: DaemonProc, tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    lin, session, token = start_agent(c, tmp_path, "capped", budget_usd=1.0)
    c.agent_turn(session, token, model=SONNET, usage={"input_tokens": 100_000})  # $0.30
    assert pre_tool_use(c, session, token) == (True, "")
    reply = c.agent_turn(session, token, model=SONNET, usage={"output_tokens": 50_000})
    assert reply.budget and reply.budget[0]["scope"] == "lineage"  # $0.30 + $0.75
    (ev,) = budget_events(c)
    assert ev.data["lineage"] == lin and ev.data["budget_usd"] == 1.0
    assert ev.data["spent_usd"] == pytest.approx(1.05) and ev.state == "pause"
    allowed, reason = pre_tool_use(c, session, token)
    assert not allowed and "budget" in reason and "$1.00" in reason
    c.agent_turn(session, token, model=SONNET, usage={"output_tokens": 1000})
    assert len(budget_events(c)) == 1  # one event per crossing, not per turn
    assert c.lineage_get(lin).status == "ACTIVE"  # paused, not stopped

    r = dd.cli("budget", "set", "5", "--lineage", "capped")
    assert r.returncode == 0, r.stderr
    assert "of $5.00 (pause)" in r.stdout.decode()
    assert pre_tool_use(c, session, token) == (True, "")


def test_a_lineage_budget_with_policy_stop_stops_the_agent(dd: DaemonProc,
                                                           tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    lin, session, token = start_agent(c, tmp_path, "stopper", budget_usd=0.5,
                                      budget_policy="stop")
    c.agent_turn(session, token, model=SONNET, usage={"output_tokens": 40_000})  # $0.60
    wait_for(lambda: c.lineage_get(lin).status == "FINISHED", 20, what="the agent stopped")
    rec = c.lineage_get(lin)
    assert rec.exit_reason == "budget" and "budget" in (rec.reason or "")
    (ev,) = budget_events(c)
    assert ev.state == "stop"


def test_the_daily_budget_over_every_agent(dd: DaemonProc, tmp_path: Path) -> None:
    dd.start(env={"TETHER_BUDGET_DAILY_USD": "1"})
    c = dd.client()
    _, s1, t1 = start_agent(c, tmp_path, "one")
    _, s2, t2 = start_agent(c, tmp_path, "two")
    c.agent_turn(s1, t1, model=SONNET, usage={"output_tokens": 40_000})  # $0.60
    assert pre_tool_use(c, s2, t2) == (True, "")
    c.agent_turn(s2, t2, model=SONNET, usage={"output_tokens": 40_000})  # $1.20 today
    (ev,) = budget_events(c)
    assert ev.data["scope"] == "daily" and ev.data["spent_usd"] == pytest.approx(1.2)
    for s, t in ((s1, t1), (s2, t2)):
        allowed, reason = pre_tool_use(c, s, t)
        assert not allowed and "daily budget" in reason
    shown = json.loads(dd.cli("budget", "--json").stdout)
    assert shown["daily"] == {"budget_usd": 1.0, "policy": "pause"}
    assert shown["spent_today_usd"] == pytest.approx(1.2)
    # A stored budget wins over the environment's; cleared, the environment's is back.
    assert dd.cli("budget", "set", "10").returncode == 0
    assert pre_tool_use(c, s1, t1) == (True, "")
    assert len(budget_events(c)) == 1
    r = dd.cli("budget", "clear")
    assert r.returncode == 0 and "$1.00 a day (pause)" in r.stdout.decode(), r.stderr
    assert not pre_tool_use(c, s1, t1)[0]


def test_a_crossing_survives_a_sigkill_before_its_event(dd: DaemonProc,
                                                        tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    lin, session, token = start_agent(c, tmp_path, "crashy", budget_usd=0.5)
    dd.term()
    dd.start(env={"TETHER_FAULT": "cost.before_crossing"})
    c = dd.client()
    with pytest.raises((TetherError, OSError)):
        c.agent_turn(session, token, model=SONNET, usage={"output_tokens": 40_000})
    wait_for(lambda: dd.proc is not None and dd.proc.poll() is not None, 20,
             what="the daemon killed at the fault point")
    assert "cost.before_crossing" in dd.log_text()
    dd.start()
    c = dd.client()
    assert c.lineage_get(lin).turns == 1  # the turn was committed
    (ev,) = budget_events(c)  # journaled at start-up, once
    assert ev.data["lineage"] == lin
    assert not pre_tool_use(c, session, token)[0]
    dd.kill9()
    dd.start()
    assert len(budget_events(dd.client())) == 1


def test_bad_budget_input(dd: DaemonProc, tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    with pytest.raises(TetherError) as e:
        c.agent_start(["true"], provider="generic", budget_usd=-1.0)
    assert "budget_usd" in str(e.value)
    with pytest.raises(TetherError):
        c.budget_set(0.0)
    for params in ({}, {"usd": 5.0, "clear": True}):
        reply = raw_call(dd.socket, "budget.set", params)
        assert reply["error"]["data"]["code"] == "INVALID_PARAMS", reply
    with pytest.raises(TetherError):
        c.cost_report("bogus")  # type: ignore[arg-type]
    r = dd.cli("run", "--budget", "5", "--", "true")
    assert r.returncode == 2 and "--budget is for agents" in r.stderr.decode()
    assert dd.cli("cost", "--since", "yesterday-ish").returncode == 2
    assert c.health().status == "SERVING"
    dd.term()
    bad = DaemonProc(dd.home, env={"TETHER_BUDGET_DAILY_USD": "lots"})
    p = bad.start(wait=False)
    assert p.wait(20) == 2
    assert "TETHER_BUDGET_DAILY_USD" in bad.log_text()


def test_budgets_crossed_under_load_are_journaled_once_each(dd: DaemonProc,
                                                           tmp_path: Path) -> None:
    """Four agents report turns at once from four threads (each on its own connection):
    the daily budget and each lineage's budget are crossed mid-burst, and each crossing
    is journaled exactly once; afterwards every agent's tool calls are denied."""
    import threading

    dd.start(env={"TETHER_BUDGET_DAILY_USD": "3"})
    agents = [start_agent(dd.client(), tmp_path, f"busy{i}", budget_usd=1.0)
              for i in range(4)]
    errors: list[BaseException] = []

    def burst(session: str, token: str) -> None:
        try:
            c = dd.client()
            for _ in range(12):  # $0.15 a turn: this lineage crosses $1.00 at its 7th
                c.agent_turn(session, token, model=SONNET, usage={"output_tokens": 10_000})
        except BaseException as e:  # reported below, on the main thread
            errors.append(e)

    threads = [threading.Thread(target=burst, args=(s, t)) for _, s, t in agents]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    c = dd.client()
    events = budget_events(c)
    daily = [e for e in events if e.data["scope"] == "daily"]
    per_lineage = sorted(e.data["lineage"] for e in events if e.data["scope"] != "daily")
    assert len(daily) == 1 and daily[0].data["spent_usd"] >= 3.0
    assert per_lineage == sorted(lin for lin, _, _ in agents)  # each once
    for _, s, t in agents:
        assert not pre_tool_use(c, s, t)[0]
    rows = cost_json(dd, "--by", "lineage")["rows"]
    assert len(rows) == 4 and all(r["turns"] == 12 for r in rows)
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(4 * 12 * 0.15)
