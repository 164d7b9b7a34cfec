"""Gemini CLI, Aider, OpenCode, Amp and user-defined providers through the real daemon.

None of these CLIs can run here (no model, no network): ``tests/agents/standin_cli.py``
stands in for each, installed under its name. For the Gemini CLI it runs the hook
commands of the settings file tether names in ``GEMINI_CLI_SYSTEM_DEFAULTS_PATH`` with
JSON on stdin, as Gemini's hooks reference describes; for the CLIs without hooks it
prints what they print (Aider's usage line and prompt, OpenCode's ``ses_…`` id, Amp's
``T-…`` thread id), and tether infers the turns from that output (a heuristic)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.harness import DaemonProc, wait_for
from tests.standin import log, start, starts
from tether.client.errors import TetherError

FAST = {"TETHER_AGENT_TICK": "0.2"}


@pytest.fixture
def fast(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env=FAST)
    return stopped_daemon


def kill_agent(d: DaemonProc, exec_id: str) -> None:
    os.killpg(d.handles(exec_id)["child"]["pid"], signal.SIGKILL)


def test_gemini_hooks_report_turns_fence_tools_and_resume(fast: DaemonProc,
                                                          tmp_path: Path) -> None:
    c = fast.client()
    plan = {"1": [{"hook": "SessionStart", "session_id": "g-1", "source": "startup"},
                  {"hook": "BeforeTool", "session_id": "g-1", "tool_name": "run_shell_command",
                   "tool_input": {"command": "ls"}},
                  {"hook": "AfterAgent", "session_id": "g-1", "prompt": "list files",
                   "prompt_response": "done"},
                  {"sleep": 60}],
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "gemini", plan, "-m", "gemini-2.5-pro", "-p", "list files")
    assert lin.provider == "gemini"  # chosen by the command's name
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=20)
    rec = c.lineage_get(lin.id)
    assert rec.provider_session_id == "g-1"
    wait_for(lambda: len([x for x in log(tmp_path) if "hook" in x]) == 3)
    hooks = [x for x in log(tmp_path) if "hook" in x]
    assert [h["hook"] for h in hooks] == ["SessionStart", "BeforeTool", "AfterAgent"]
    assert all(h["code"] == 0 and h["stdout"] == "" for h in hooks)  # allowed: silent
    kill_agent(fast, rec.exec or "")
    wait_for(lambda: len(starts(tmp_path)) == 2, what="revived")
    # A stand-in writes no Gemini session file, so there is nothing to resume: it starts
    # afresh, prompt and all (``gemini --resume`` of a session without a prompt fails,
    # exit 42). The real CLI's resume, headless and interactive: tests/realcli.
    assert starts(tmp_path)[1]["argv"] == ["-m", "gemini-2.5-pro", "-p", "list files"]


def test_aider_turns_and_tokens_are_read_from_its_output(fast: DaemonProc,
                                                         tmp_path: Path) -> None:
    c = fast.client()
    plan = {"1": [{"print": "Aider v0.86.0\nMain model: sonnet"},
                  {"print": "I changed a.py.\nTokens: 12k sent, 1.2k received. Cost: $0.05"},
                  {"print": "diff> "}, {"sleep": 60}],
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "aider", plan, "--model", "sonnet", "-m", "fix a.py", "a.py")
    assert lin.provider == "aider"
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=20, what="a turn")
    rec = c.lineage_get(lin.id)
    assert rec.usage == {"input_tokens": 12000, "output_tokens": 1200}
    kill_agent(fast, rec.exec or "")
    wait_for(lambda: len(starts(tmp_path)) == 2, what="revived")
    # One-shot (``-m``): revived one-shot, its message a continuation prompt.
    argv = starts(tmp_path)[1]["argv"]
    assert argv[:5] == ["--restore-chat-history", "--model", "sonnet", "a.py", "--message"]
    assert "interrupted" in argv[5] and "The task: fix a.py" in argv[5]
    assert c.lineage_get(lin.id).turns == 1  # quiet output is one turn, not one per tick


def test_opencode_and_amp_session_ids_come_from_their_output(fast: DaemonProc,
                                                             tmp_path: Path) -> None:
    c = fast.client()
    tid = "T-0123abcd-0000-4000-8000-0123456789ab"
    cases = {"opencode": ("ses_4f2a9c0d1e2b", ["run", "fix it", "-m", "anthropic/x"],
                          ["--session", "ses_4f2a9c0d1e2b", "-m", "anthropic/x"]),
             "amp": (tid, ["-x", "fix it"], ["threads", "continue", tid])}
    for name, (sid, args, resumed) in cases.items():
        sub = tmp_path / name
        sub.mkdir()
        plan = {"1": [{"print": f"session {sid}\nworking"}, {"sleep": 60}],
                "*": [{"sleep": 60}]}
        lin = start(c, sub, name, plan, *args)
        assert lin.provider == name
        wait_for(lambda lin=lin: c.lineage_get(lin.id).turns == 1, timeout=30, what=name)
        rec = c.lineage_get(lin.id)
        assert rec.provider_session_id == sid
        kill_agent(fast, rec.exec or "")
        wait_for(lambda sub=sub: len(starts(sub)) == 2, what=f"{name} revived")
        assert starts(sub)[1]["argv"] == resumed


def test_a_user_defined_provider_from_a_toml_file(fast: DaemonProc, tmp_path: Path) -> None:
    """No code: ``<home>/providers/mycli.toml`` says how to resume, read turns, context and
    usage limits; a broken file is refused with a precise error, the daemon serves on."""
    providers = fast.home / "providers"
    providers.mkdir()
    (providers / "mycli.toml").write_text(r"""
resume = ["{argv0}", "--resume", "{session}"]
[turns]
idle_seconds = 0.5
end_regex = '^\$ ?$'
context_regex = 'ctx (\d+)%'
session_regex = 'session=(\S+)'
[exits]
usage_limit = ['credits exhausted']
""")
    c = fast.client()
    plan = {"1": [{"print": "session=abc-1\nctx 42%\n$ "}, {"sleep": 1.5},
                  {"print": "credits exhausted, try again in 2 hours"}, {"exit": 1}],
            "*": [{"sleep": 60}]}
    lin = start(c, tmp_path, "mycli", plan, provider="mycli")
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=20, what="a turn")
    wait_for(lambda: c.lineage_get(lin.id).status == "WAITING_LIMIT", timeout=20)
    rec = c.lineage_get(lin.id)
    assert rec.provider_session_id == "abc-1" and rec.context_pct == 42.0
    assert rec.exit_reason == "usage_limited" and rec.revive_at is not None
    (providers / "broken.toml").write_text("[turns]\nend_regex = '('\n")
    with pytest.raises(TetherError) as e:
        c.agent_start(["whatever"], provider="broken")
    assert "broken.toml" in e.value.message and "not a valid regex" in e.value.message
    assert c.lineage_get(lin.id).status == "WAITING_LIMIT"  # still serving
    out = json.loads(fast.cli("lineage", "inspect", "--json", lin.id).stdout)
    assert out["exit_reason"] == "usage_limited"
