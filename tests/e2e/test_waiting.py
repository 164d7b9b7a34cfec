"""An interactive agent waiting for its user is not hung (issue 20, finding 1).

"Waiting for its user" is a state the provider reports — entered when a turn ends (and
when a terminal attempt starts), left only when the next turn starts — not a timing
inference: a notification, a redraw or a ``/clear`` while it waits must not void it, and
a silent agent in the middle of a turn is still killed as hung. One test per way a
provider reports its turns: hooks (the Claude Code stand-in), the agent protocol (the
scripted SDK agent) and output (the Aider stand-in). The real CLIs are in tests/realcli.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness import SCRIPTED_AGENT, DaemonProc, wait_for
from tests.standin import log, start, starts

FAST = {"TETHER_AGENT_TICK": "0.2"}
QUICK = {"stale_after": 0.5, "crashed_after": 1.5, "tty": True}


@pytest.fixture
def fast(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env=FAST)
    return stopped_daemon


def kinds(d: DaemonProc, lineage: str, *types: str) -> list[tuple[str, str | None]]:
    return [(e.type, e.state) for e in d.client().events_list(limit=10000).events
            if e.type in types and (e.data or {}).get("lineage") == lineage]


def test_hooks_a_claude_session_waits_through_notifications_output_and_clear(
        fast: DaemonProc, tmp_path: Path) -> None:
    c = fast.client()
    sid = "c0ffee00-0000-4000-8000-000000000001"
    plan = {"1": [{"hook": "SessionStart", "session_id": sid, "source": "startup"},
                  {"sleep": 2.5},  # fresh, before any prompt: waiting
                  {"hook": "UserPromptSubmit", "session_id": sid, "prompt": "fix it"},
                  {"hook": "Stop", "session_id": sid, "last_assistant_message": "fixed"},
                  {"sleep": 2.5},
                  {"hook": "Notification", "session_id": sid,
                   "notification_type": "idle_prompt",
                   "message": "Claude is waiting for your input"},
                  {"print": "a redraw after the turn"},
                  {"sleep": 2.5},
                  {"hook": "SessionEnd", "session_id": sid, "reason": "clear"},
                  {"hook": "SessionStart", "session_id": "c0ffee00-0000-4000-8000-0000000000c1",
                   "source": "clear"},
                  {"sleep": 2.5},
                  {"hook": "UserPromptSubmit", "session_id": "c0ffee00-0000-4000-8000-0000000000c1",
                   "prompt": "now hang"},
                  {"sleep": 60}],  # silent in the middle of a turn: hung
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "claude", plan, **QUICK)
    wait_for(lambda: [x.get("hook") for x in log(tmp_path)].count("SessionStart") == 2
             or len(starts(tmp_path)) > 1, timeout=30, what="the /clear")
    assert len(starts(tmp_path)) == 1, "killed while it waited for its user"
    assert c.lineage_get(lin.id).heartbeat == "IDLE"
    wait_for(lambda: len(starts(tmp_path)) == 2, timeout=30, what="the hung turn killed")
    rec = c.lineage_get(lin.id)
    assert rec.turns == 1 and rec.exit_reason in (None, "hung")
    cancels = [e for e in c.events_list(limit=10000).events
               if e.type == "exec.state" and e.state == "CANCELLED"]
    assert len(cancels) == 1 and "hung" in (cancels[0].reason or "")
    beats = [s for t, s in kinds(fast, lin.id, "agent.heartbeat")]
    assert "IDLE" in beats and "CRASHED" in beats and beats.index("IDLE") < beats.index(
        "CRASHED")
    started = kinds(fast, lin.id, "agent.turn_start")
    assert len(started) == 2  # the first prompt and the one after /clear, nothing else


def test_protocol_an_sdk_agent_at_its_prompt_is_idle_and_a_tool_call_starts_a_turn(
        fast: DaemonProc, tmp_path: Path) -> None:
    c = fast.client()
    lin = c.agent_start([sys.executable, str(SCRIPTED_AGENT), "--log",
                         str(tmp_path / "agent.log"), "--pcts", "10,20", "--wait-file",
                         str(tmp_path / "go"), "--linger", "60"],
                        provider="generic", revival="revive", **QUICK)
    (tmp_path / "go.1").touch()
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, what="turn 1")
    wait_for(lambda: c.lineage_get(lin.id).heartbeat == "IDLE", what="idle")
    import time

    time.sleep(4)  # more than twice crashed_after
    rec = c.lineage_get(lin.id)
    assert (rec.status, rec.attempt, rec.heartbeat) == ("ACTIVE", 1, "IDLE")
    assert rec.waiting_since is not None
    (tmp_path / "go.2").touch()  # its tool call starts turn 2, its report ends it
    wait_for(lambda: c.lineage_get(lin.id).turns == 2, what="turn 2")
    assert [s for _, s in kinds(fast, lin.id, "agent.turn_start")] == ["HEALTHY", "HEALTHY"]


def test_output_an_aider_session_waits_at_its_prompt(fast: DaemonProc, tmp_path: Path) -> None:
    c = fast.client()
    plan = {"1": [{"print": "Aider v0.86.0\nMain model: sonnet"},
                  {"print": "I changed a.py.\nTokens: 12k sent, 1.2k received."},
                  {"print": "diff> "}, {"sleep": 60}],
            "*": [{"sleep": 60}]}
    # Its turn ends after 3 s of quiet output (turn_idle_seconds): a hang takes longer.
    lin = start(c, tmp_path, "aider", plan, "--model", "sonnet",
                **{**QUICK, "crashed_after": 4.0})
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=20, what="a turn")
    import time

    time.sleep(9)
    rec = c.lineage_get(lin.id)
    assert (rec.status, rec.attempt, rec.heartbeat) == ("ACTIVE", 1, "IDLE")
    assert len(starts(tmp_path)) == 1
