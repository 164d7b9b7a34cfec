"""Exit reasons, usage-limit waits and session forks through the real daemon.

The agent CLIs cannot run here (no model, no network): ``tests/agents/standin_cli.py``
stands in for them, installed under the CLI's name; it runs the hook commands tether
wires up exactly as the CLI's documented hook interface does, and prints the messages
the CLIs print (see each provider's patterns for their sources)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, wait_for
from tests.standin import log, start, starts

FAST = {"TETHER_AGENT_TICK": "0.2"}


def test_a_usage_limit_waits_for_its_reset_time_then_resumes_without_spending_a_revival(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    """Claude Code prints "Claude AI usage limit reached|<epoch>" and exits 1: the
    lineage waits (WAITING_LIMIT, in `lineage ls` and `ps`) until the test clock passes
    the reset time, then resumes the session; max_revivals=0 proves no revival is spent,
    and a daemon SIGKILL while it waits changes nothing."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    d = stopped_daemon
    d.start(env={**FAST, "TETHER_TEST_CLOCK": str(clock)})
    c = d.client()
    reset = int(time.time()) + 3600
    plan = {"1": [{"hook": "SessionStart", "session_id": "sess-1", "source": "startup"},
                  {"hook": "UserPromptSubmit", "session_id": "sess-1", "prompt": "fix it"},
                  {"print": f"Claude AI usage limit reached|{reset}"}, {"exit": 1}],
            "2": [{"print": "resumed"}, {"sleep": 30}]}
    lin = start(c, tmp_path, "claude", plan, "-p", "fix it", max_revivals=0)
    wait_for(lambda: c.lineage_get(lin.id).status == "WAITING_LIMIT", timeout=20)
    rec = c.lineage_get(lin.id)
    assert rec.exit_reason == "usage_limited" and rec.revive_at == reset
    assert rec.revivals == 0 and rec.limit_waits == 1
    assert b"WAITING_LIMIT" in d.cli("lineage", "ls").stdout
    assert b"WAITING_LIMIT" in d.cli("ps", "-a").stdout
    ev = [e for e in c.events_list(limit=10000).events
          if e.type == "lineage.state" and e.state == "WAITING_LIMIT"]
    assert ev and ev[-1].data["exit_reason"] == "usage_limited"
    assert ev[-1].data["reset_at"] == reset
    d.kill9()  # the wait is durable: revive_at is in the record
    d.start(env={**FAST, "TETHER_TEST_CLOCK": str(clock)})
    c = d.client()
    time.sleep(1.0)
    assert c.lineage_get(lin.id).status == "WAITING_LIMIT"  # not before its time
    clock.write_text(str(reset - time.time() + 5))  # the clock passes the reset time
    wait_for(lambda: c.lineage_get(lin.id).status == "ACTIVE"
             and c.lineage_get(lin.id).attempt == 2, timeout=20, what="resumed")
    wait_for(lambda: len(starts(tmp_path)) == 2)
    second = starts(tmp_path)[1]["argv"]
    assert second[:3] == ["-p", "--resume", "sess-1"]  # headless: resumed headless
    assert second[-2] == "--" and second[-1].startswith("[tether] This session was "
                                                        "interrupted (usage limit")
    assert c.lineage_get(lin.id).revivals == 0


def test_a_stop_failure_for_a_rate_limit_stops_an_interactive_session_to_wait(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    """Claude Code's StopFailure hook (``error: rate_limit``): an interactive session
    would sit at its prompt showing the limit; tether stops it and waits for the reset
    its message gives, spending no revival (issue 20, finding 5)."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    d = stopped_daemon
    d.start(env={**FAST, "TETHER_TEST_CLOCK": str(clock)})
    c = d.client()
    msg = "You've hit your session limit · resets 8:56pm (UTC)"
    plan = {"1": [{"hook": "SessionStart", "session_id": "s-1", "source": "startup"},
                  {"hook": "UserPromptSubmit", "session_id": "s-1", "prompt": "fix it"},
                  {"print": f"  ⎿  {msg}"},
                  {"hook": "StopFailure", "session_id": "s-1", "error": "rate_limit",
                   "last_assistant_message": msg},
                  {"sleep": 60}],
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "claude", plan, tty=True, max_revivals=0)
    wait_for(lambda: c.lineage_get(lin.id).status == "WAITING_LIMIT", timeout=20)
    rec = c.lineage_get(lin.id)
    assert (rec.exit_reason, rec.revivals, rec.limit_waits) == ("usage_limited", 0, 1)
    assert rec.revive_at is not None and 0 < rec.revive_at - time.time() <= 86400
    assert msg in (rec.reason or "")
    clock.write_text(str(rec.revive_at - time.time() + 5))
    wait_for(lambda: len(starts(tmp_path)) == 2, timeout=20, what="resumed at the reset")
    argv = starts(tmp_path)[1]["argv"]
    assert argv[:2] == ["--resume", "s-1"] and argv[-1].startswith("[tether] This session")
    assert c.lineage_get(lin.id).revivals == 0


def test_each_exit_reason_is_classified_and_shown(fast_daemon_env: DaemonProc,
                                                  tmp_path: Path) -> None:
    """One lineage per way an attempt can end; `lineage inspect` shows the reason."""
    c = fast_daemon_env.client()
    cases: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
        "finished": ([{"print": "done"}, {"exit": 0}], {}),
        "crashed": ([{"print": "Segmentation fault"}, {"exit": 139}], {"revival": "reap"}),
        "out_of_context": ([{"print": "API Error: 400 prompt is too long: 210000 tokens"},
                            {"exit": 1}], {}),
        "waiting_for_user": ([{"print": "Do you want to proceed?\n> 1. Yes"},
                              {"sleep": 60}], {"stale_after": 0.5, "crashed_after": 1.5}),
        "hung": ([{"print": "thinking"}, {"sleep": 60}],
                 {"stale_after": 0.5, "crashed_after": 1.5, "revival": "reap"}),
        "killed": ([{"sleep": 60}], {}),
    }
    lins = {}
    for reason, (steps, params) in cases.items():
        sub = tmp_path / reason
        sub.mkdir()
        lins[reason] = start(c, sub, "claude", {"*": steps}, "-p", reason, **params)
    wait_for(lambda: c.lineage_get(lins["killed"].id).exec is not None)
    assert fast_daemon_env.cli("kill", c.lineage_get(lins["killed"].id).exec or "")\
        .returncode == 0
    for reason, lin in lins.items():
        wait_for(lambda lin=lin: c.lineage_get(lin.id).exit_reason is not None, timeout=30,
                 what=reason)
        got = json.loads(fast_daemon_env.cli("lineage", "inspect", "--json", lin.id).stdout)
        assert got["exit_reason"] == reason, got
    assert c.lineage_get(lins["waiting_for_user"].id).status == "ASK_PENDING"
    assert c.lineage_get(lins["out_of_context"].id).lifecycle == "DEAD"
    assert c.lineage_get(lins["finished"].id).status == "FINISHED"


def test_a_clear_forks_the_session_and_a_revival_after_a_daemon_sigkill_resumes_it(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    """Claude Code's /clear fires SessionStart with ``source: clear`` and a new
    session_id: the lineage follows it; after the daemon and the agent are SIGKILLed,
    the revival resumes the new session, not the first."""
    d = stopped_daemon
    d.start(env=FAST)
    c = d.client()
    plan = {"1": [{"hook": "SessionStart", "session_id": "sess-A", "source": "startup"},
                  {"hook": "UserPromptSubmit", "session_id": "sess-A", "prompt": "one"},
                  {"hook": "Stop", "session_id": "sess-A", "last_assistant_message": "1"},
                  {"hook": "SessionStart", "session_id": "sess-B", "source": "clear"},
                  {"hook": "UserPromptSubmit", "session_id": "sess-B", "prompt": "two"},
                  {"print": "ready"}, {"sleep": 60}],
            "2": [{"hook": "SessionStart", "session_id": "sess-B", "source": "resume"},
                  {"hook": "SessionStart", "session_id": "sess-C", "source": "clear"},
                  {"print": "cleared"}, {"sleep": 60}],
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "claude", plan)
    wait_for(lambda: [x.get("hook") for x in log(tmp_path)].count("UserPromptSubmit") == 2)
    forks = [e for e in c.events_list(limit=10000).events if e.type == "agent.session"]
    assert [e.data["to"] for e in forks] == ["sess-A", "sess-B"]
    assert forks[1].data["from"] == "sess-A" and forks[1].data["source"] == "clear"
    exec_id = c.lineage_get(lin.id).exec or ""
    child = d.handles(exec_id)["child"]
    d.kill9()
    os.killpg(child["pid"], signal.SIGKILL)
    d.start(env=FAST)
    c = d.client()
    wait_for(lambda: c.lineage_get(lin.id).attempt == 2, what="revived")
    wait_for(lambda: len(starts(tmp_path)) == 2)
    argv = starts(tmp_path)[1]["argv"]
    assert argv[:2] == ["--resume", "sess-B"]
    # Killed in its turn: asked to carry it on.
    assert argv[-2] == "--" and argv[-1].startswith("[tether] This session was interrupted")
    # A /clear with no prompt since: a session with no conversation yet, which Claude Code
    # cannot resume ("No conversation found with session ID"): started afresh.
    wait_for(lambda: c.lineage_get(lin.id).provider_session_id == "sess-C")
    os.killpg(d.handles(c.lineage_get(lin.id).exec or "")["child"]["pid"], signal.SIGKILL)
    wait_for(lambda: len(starts(tmp_path)) == 3, what="revived again")
    assert "--resume" not in starts(tmp_path)[2]["argv"]


@pytest.fixture
def fast_daemon_env(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env=FAST)
    return stopped_daemon

