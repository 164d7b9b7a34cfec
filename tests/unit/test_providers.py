"""The Claude Code and Codex providers, driven by recorded hook payloads (Codex's under
``tests/fixtures/codex/0.171.0/`` recorded from the real CLI; the real CLIs run end to end
in ``tests/realcli``).

Here, without a daemon or a CLI, the providers' translation is tested with fixtures in
``tests/fixtures/claude/`` and ``tests/fixtures/codex/`` that follow the published schemas
field for field:

* Claude Code hook inputs: one JSON file per event, named after it, with the
  common input fields and each event's own fields from the "Hooks reference"
  (https://code.claude.com/docs/en/hooks). ``transcript.jsonl`` is a transcript
  whose ``message`` objects are Messages API messages (``usage`` with
  ``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``) in the envelope Claude Code writes (``type``, ``uuid``,
  ``parentUuid``, ``sessionId``, ``isSidechain`` …); like Claude Code, it writes
  one entry per content block, so a message id can appear twice.
* Codex: ``notify_agent_turn_complete.json`` is the JSON Codex passes to its
  ``notify`` program (``docs/config.md`` of openai/codex), and the ``rollout-*.jsonl``
  file is a session file in the shape of ``RolloutLine`` with ``token_count``
  events (``codex-rs/protocol``).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tether.agent.providers import REGISTRY, claude, for_command, get
from tether.agent.providers.base import HookEvent, SessionContext
from tether.agent.providers.claude import (
    EVENT_KINDS,
    ClaudeProvider,
    context_window_for,
)
from tether.agent.providers.codex import (
    BYPASS_TRUST,
    CodexProvider,
    hook_override,
    notify_override,
)
from tether.agent.providers.generic import GenericProvider
from tether.model.records import UsageCursor

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CLAUDE = FIXTURES / "claude"
CODEX = FIXTURES / "codex"
#: Recorded from the real codex-cli 0.171.0 against tests/realcli/fake_openai.py: its hook
#: payloads and the rollout of a two-turn ``codex exec`` / ``codex exec resume`` thread.
CODEX_NOW = CODEX / "0.171.0"
CODEX_THREAD = "01a21ed9-efa2-7b50-89be-d1d4bad3b58f"
SESSION_ID = "8f14e45f-ceea-467f-a0e6-7c1c7a2b9d31"
THREAD_ID = "0199b6c4-3f2a-7d41-9e5b-6a1c2d3e4f50"
COMMON_FIELDS = {"session_id", "transcript_path", "cwd", "permission_mode", "hook_event_name"}


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def ctx_for(tmp_path: Path) -> SessionContext:
    # A hook command with a space and a quote in it, to prove the quoting.
    return SessionContext(
        home=str(tmp_path / "home"), socket=str(tmp_path / "home" / "tether.sock"),
        session="s-1", lineage="l-1", state_dir=str(tmp_path / "state dir"),
        hook_command=("/opt/my python/bin/python3", "-m", "tether.cli.main", "agent", "hook",
                      "--tag", "it's"),
    )


@pytest.fixture
def ctx(tmp_path: Path) -> SessionContext:
    return ctx_for(tmp_path)


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn's count waits for its answer at most 2 s here (a transcript cut short on
    purpose never gets it)."""
    monkeypatch.setattr(claude, "SETTLE_TIMEOUT", 2.0)


# ---------------------------------------------------------------------------- registry


def test_registry_knows_the_built_in_providers() -> None:
    assert set(REGISTRY) == {"generic", "claude", "codex", "gemini", "opencode", "aider", "amp"}
    assert isinstance(get("claude"), ClaudeProvider)
    assert isinstance(get("codex"), CodexProvider)
    assert isinstance(get("generic"), GenericProvider)
    with pytest.raises(KeyError) as e:
        get("cursor")
    assert "cursor" in str(e.value) and "aider, amp, claude, codex" in str(e.value)


def test_for_command_matches_the_basename() -> None:
    assert isinstance(for_command("claude"), ClaudeProvider)
    assert isinstance(for_command("/usr/local/bin/claude"), ClaudeProvider)
    assert isinstance(for_command("/home/me/.npm/bin/codex"), CodexProvider)
    assert for_command("python3") is None
    assert for_command("/usr/bin/claude-helper") is None


# ---------------------------------------------------------------------- claude fixtures


@pytest.mark.parametrize("event", sorted(EVENT_KINDS))
def test_claude_fixtures_follow_the_common_input_schema(event: str) -> None:
    payload = load(CLAUDE / f"{event}.json")
    assert payload.keys() >= COMMON_FIELDS
    assert payload["hook_event_name"] == event
    assert payload["session_id"] == SESSION_ID


# ------------------------------------------------------------------------ claude launch


def test_claude_launch_writes_settings_whose_hooks_call_back(ctx: SessionContext) -> None:
    plan = ClaudeProvider().launch(["claude", "--model", "opus", "fix the bug"], ctx)
    path = str(Path(ctx.state_dir) / "claude-settings.json")
    assert plan.argv == ["claude", "--settings", path, "--model", "opus", "fix the bug"]
    assert list(plan.files) == [path]
    settings = json.loads(plan.files[path])
    hooks = settings["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "PreToolUse", "Notification",
                          "PreCompact", "Stop", "StopFailure", "SessionEnd"}
    for event, groups in hooks.items():
        assert len(groups) == 1
        (handler,) = groups[0]["hooks"]
        assert handler["type"] == "command"
        assert shlex.split(handler["command"]) == [*ctx.hook_command, "claude", event]
    # PreToolUse must see every tool.
    assert hooks["PreToolUse"][0]["matcher"] == "*"
    assert "matcher" not in hooks["Stop"][0]
    # The status line reports the context window the CLI really uses.
    assert settings["statusLine"]["type"] == "command"
    assert shlex.split(settings["statusLine"]["command"]) == [*ctx.hook_command, "claude",
                                                              "StatusLine"]


def test_claude_launch_merges_a_users_own_settings(ctx: SessionContext, tmp_path: Path) -> None:
    say_done = {"hooks": [{"type": "command", "command": "say done"}]}
    mine: dict[str, Any] = {"hooks": {"Stop": [say_done]},
                            "permissions": {"allow": ["Bash(git status)"]}}
    as_file = tmp_path / "mine.json"
    as_file.write_text(json.dumps(mine))
    for flag in (["--settings", json.dumps(mine)], [f"--settings={as_file}"]):
        plan = ClaudeProvider().launch(["claude", *flag, "-c"], ctx)
        path = str(Path(ctx.state_dir) / "claude-settings.json")
        assert plan.argv == ["claude", "--settings", path, "-c"]
        settings = json.loads(plan.files[path])
        assert settings["permissions"] == mine["permissions"]
        stop = settings["hooks"]["Stop"]
        assert stop[0] == mine["hooks"]["Stop"][0]
        assert shlex.split(stop[1]["hooks"][0]["command"])[-2:] == ["claude", "Stop"]
    with pytest.raises(ValueError, match="cannot read"):
        ClaudeProvider().launch(["claude", "--settings", str(tmp_path / "missing.json")], ctx)


# ------------------------------------------------------------------------ claude resume


def test_claude_resume_of_an_interactive_attempt_drops_its_prompt(ctx: SessionContext) -> None:
    argv = ["/usr/local/bin/claude", "--model", "opus", "--add-dir", "../lib", "../docs",
            "--permission-mode", "acceptEdits", "--resume", "0000-old",
            "--dangerously-skip-permissions", "fix the bug"]
    plan = ClaudeProvider().resume(argv, SESSION_ID, "/h/drain/l-1.json", ctx)
    path = str(Path(ctx.state_dir) / "claude-settings.json")
    assert plan.argv == [
        "/usr/local/bin/claude", "--resume", SESSION_ID, "--settings", path,
        "--model", "opus", "--add-dir", "../lib", "../docs",
        "--permission-mode", "acceptEdits", "--dangerously-skip-permissions",
    ]
    assert plan.env == {"TETHER_DRAIN_SNAPSHOT": "/h/drain/l-1.json",
                        "TETHER_PROVIDER_SESSION": SESSION_ID}
    hooks = json.loads(plan.files[path])["hooks"]
    assert shlex.split(hooks["SessionStart"][0]["hooks"][0]["command"])[-2:] == [
        "claude", "SessionStart"]
    # Interrupted in the middle of a turn: asked to carry the turn on.
    going = dataclasses.replace(ctx, continuation="[tether] carry on", interrupted=True)
    plan = ClaudeProvider().resume(argv, SESSION_ID, "/snap", going)
    assert plan.argv[-2:] == ["--", "[tether] carry on"]
    # At its prompt when it died: it waits for its user again.
    idle = dataclasses.replace(ctx, continuation="[tether] carry on", interrupted=False)
    assert "--" not in ClaudeProvider().resume(argv, SESSION_ID, "/snap", idle).argv


def test_claude_resume_of_a_headless_attempt_is_headless_with_a_continuation(
        ctx: SessionContext) -> None:
    """Issue 20 finding 2: `claude --resume ID` without -p and without a prompt fails
    ("No deferred tool marker found … Provide a prompt to continue the conversation")."""
    argv = ["claude", "-p", "--output-format", "json", "--max-turns", "5", "--model", "opus",
            "fix the bug"]
    going = dataclasses.replace(ctx, continuation="[tether] carry on", interrupted=True)
    plan = ClaudeProvider().resume(argv, SESSION_ID, "/snap", going)
    path = str(Path(ctx.state_dir) / "claude-settings.json")
    assert plan.argv == ["claude", "-p", "--resume", SESSION_ID, "--settings", path,
                         "--output-format", "json", "--max-turns", "5", "--model", "opus",
                         "--", "[tether] carry on"]
    plan = ClaudeProvider().resume(argv, SESSION_ID, "/snap", ctx)  # no continuation given
    assert plan.argv[-2:] == ["--", "Continue where you left off."]


def test_claude_only_a_written_session_is_resumed_else_a_fresh_start_carries_on(
        ctx: SessionContext, tmp_path: Path) -> None:
    """Claude Code writes a session's transcript lazily: one stopped at its first
    prompt's 429 has none, and `--resume` fails ("No conversation found")."""
    p = ClaudeProvider()
    path = tmp_path / "s.jsonl"
    assert p.can_resume(SESSION_ID, None)  # nothing known: try
    assert not p.can_resume(SESSION_ID, UsageCursor(path=str(path)))
    path.write_text('{"type":"queue-operation","operation":"enqueue"}\n')
    assert not p.can_resume(SESSION_ID, UsageCursor(path=str(path)))
    path.write_text((CLAUDE / "transcript.jsonl").read_text())
    assert p.can_resume(SESSION_ID, UsageCursor(path=str(path)))
    going = dataclasses.replace(ctx, continuation="[tether] carry on", interrupted=True)
    assert p.launch(["claude", "--model", "opus"], going).argv[-2:] == [
        "--", "[tether] carry on"]
    assert p.launch(["claude", "fix it"], going).argv[-1] == "fix it"  # its own prompt
    assert p.launch(["claude", "-p", "fix it"], going).argv[-2:] == ["-p", "fix it"]
    assert "--" not in p.launch(["claude"], ctx).argv  # a first start


def test_claude_resume_drops_continue_and_session_flags(ctx: SessionContext) -> None:
    argv = ["claude", "--continue", "--session-id", "1111", "--fork-session", "-n", "work",
            "--", "-not-an-option"]
    plan = ClaudeProvider().resume(argv, SESSION_ID, "/snap", ctx)
    assert plan.argv[:3] == ["claude", "--resume", SESSION_ID]
    assert plan.argv[5:] == ["-n", "work"]


def test_claude_resume_without_a_session_id_continues(ctx: SessionContext) -> None:
    plan = ClaudeProvider().resume(["claude", "--model", "opus", "hello"], None, "/snap", ctx)
    assert plan.argv[:2] == ["claude", "--continue"]
    assert plan.argv[-2:] == ["--model", "opus"]
    assert plan.env == {"TETHER_DRAIN_SNAPSHOT": "/snap"}


# ------------------------------------------------------------------------- claude hooks


def test_claude_session_start_captures_the_session_id() -> None:
    ev = ClaudeProvider().parse_hook("SessionStart", load(CLAUDE / "SessionStart.json"))
    assert ev.kind == "session_start"
    assert ev.provider_session_id == SESSION_ID
    assert ev.transcript_path is not None and ev.transcript_path.endswith(f"{SESSION_ID}.jsonl")
    assert ev.model == "claude-sonnet-4-5-20250929"
    assert ClaudeProvider().reply(ev, True, "").stdout == b""  # stdout would become context


def stop_payload(transcript: Path, **changes: Any) -> dict[str, Any]:
    payload = load(CLAUDE / "Stop.json")
    payload["transcript_path"] = str(transcript)
    payload.update(changes)
    return payload


def settle(ev: HookEvent, cursor: UsageCursor | None = None) -> UsageCursor | None:
    return ClaudeProvider().settle_turn(ev, cursor)


def test_claude_stop_is_a_turn_with_usage_from_the_transcript(tmp_path: Path) -> None:
    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines(True)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:6]))  # as it was when the first turn ended
    first = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
    cursor = settle(first)
    path.write_text("".join(lines))  # the second turn
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(path))
    assert ev.kind == "turn_end"
    assert ev.provider_session_id == SESSION_ID
    settle(ev, cursor)
    assert ev.model == "claude-sonnet-4-5-20250929"
    u = ev.usage
    assert u is not None
    # Last assistant message: 7 input + 600 cache writes + 28,300 cache reads + 290 output.
    assert u.context_tokens == 29_197
    assert u.context_window == 200_000
    assert u.context_pct == pytest.approx(14.5985)
    # This turn's tokens: the two API messages after the first turn (msg_03, msg_04).
    assert (u.input_tokens, u.output_tokens) == (12, 700)
    assert (u.cache_read_tokens, u.cache_creation_tokens) == (55_800, 1_400)
    assert ev.messages == [
        {"role": "user", "content": "Also add a test for the limiter."},
        {"role": "assistant", "content": load(CLAUDE / "Stop.json")["last_assistant_message"]},
    ]


def test_claude_first_turn_counts_each_api_message_once(tmp_path: Path) -> None:
    # The transcript as it was when the first turn ended (its first six lines).
    first = tmp_path / "first.jsonl"
    first.write_text("".join((CLAUDE / "transcript.jsonl").read_text().splitlines(True)[:6]))
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(first, last_assistant_message=""))
    settle(ev)
    u = ev.usage
    assert u is not None
    # msg_01 is written twice (a text block, then a tool_use block): counted once.
    assert (u.input_tokens, u.output_tokens) == (4 + 6, 180 + 320)
    assert (u.cache_read_tokens, u.cache_creation_tokens) == (14_000 + 26_000, 12_000 + 1_500)
    assert u.context_tokens == 6 + 1_500 + 26_000 + 320
    assert ev.messages[0]["content"].startswith("Add a rate limiter to the API")


def test_claude_stop_waits_for_the_turn_to_be_written_and_counts_late_lines_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20 finding 4: Claude Code runs Stop before it has written the turn's last
    entries (7 lines at Stop, 9 lines 50 ms later). The hook waits for the final answer;
    what is written later still is counted at the next turn, never twice."""
    import threading

    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines(True)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:7]))  # the second prompt, msg_03 not yet written
    first = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
    cursor = settle(first)

    def write_late() -> None:
        import time

        time.sleep(0.3)
        with path.open("a") as f:
            f.write(lines[7] + lines[8])
            f.write(lines[9][:40])  # half a line: not read until it is whole
        time.sleep(0.3)
        with path.open("a") as f:
            f.write(lines[9][40:])

    t = threading.Thread(target=write_late)
    t.start()
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(path))
    cursor = settle(ev, cursor)
    t.join()
    u = ev.usage
    assert u is not None and (u.input_tokens, u.output_tokens) == (12, 700)  # waited
    monkeypatch.setattr(claude, "SETTLE_TIMEOUT", 0.5)  # the answer never comes again
    again = ClaudeProvider().parse_hook("Stop", stop_payload(path))
    settle(again, cursor)
    assert again.usage is None  # nothing new: nothing counted twice


def test_claude_stop_waits_for_a_transcript_not_yet_on_disk(tmp_path: Path) -> None:
    """Under load Claude Code runs Stop before a new session's transcript exists at all
    (seen in CI: a revived session's only turn counted with no usage). The file is waited
    for like its last lines; a path refused as outside the agent's files is not."""
    import threading

    from tether.agent.providers.base import AGENT_FILES, AgentFiles

    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines(True)
    path = tmp_path / "late.jsonl"

    def write_late() -> None:
        import time

        time.sleep(0.4)
        path.write_text("".join(lines[:6]))

    t = threading.Thread(target=write_late)
    t.start()
    # A sandboxed agent's (read beneath its roots): a file not there yet is no refusal.
    files = AgentFiles(roots=(str(tmp_path),))
    token = AGENT_FILES.set(files)
    try:
        ev = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
        settle(ev)
    finally:
        AGENT_FILES.reset(token)
    t.join()
    assert files.refused == []
    assert ev.usage is not None and ev.usage.output_tokens == 180 + 320
    outside = tmp_path / "elsewhere" / "never.jsonl"
    token = AGENT_FILES.set(AgentFiles(roots=(str(tmp_path / "agent"),)))
    try:
        import time

        began = time.monotonic()
        ev = ClaudeProvider().parse_hook("Stop", stop_payload(outside))
        settle(ev)
        assert ev.usage is None and time.monotonic() - began < 5
    finally:
        AGENT_FILES.reset(token)


def test_claude_a_message_whose_entries_straddle_two_reads_is_counted_once(
        tmp_path: Path) -> None:
    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines(True)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:3]))  # msg_01's first entry only
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
    cursor = settle(ev)
    assert ev.usage is not None and ev.usage.output_tokens == 180
    path.write_text("".join(lines[:6]))  # msg_01's second entry, msg_02
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
    settle(ev, cursor)
    assert ev.usage is not None and ev.usage.output_tokens == 320  # msg_02 only


def test_claude_a_new_session_file_keeps_what_the_old_one_had_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A /clear starts a new transcript; what the old one had past the cursor is pending
    usage, added to the next turn."""
    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines(True)
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text("".join(lines[:6]))
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(old, last_assistant_message=""))
    cursor = settle(ev)
    old.write_text("".join(lines))  # written after the first turn's count
    start = ClaudeProvider().parse_hook("SessionStart", {
        **load(CLAUDE / "SessionStart.json"), "source": "clear", "transcript_path": str(new)})
    cursor = ClaudeProvider().follow_record(start, cursor)
    assert cursor is not None and cursor.path == str(new)
    assert cursor.pending["output_tokens"] == 700
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(new, last_assistant_message=""))
    monkeypatch.setattr(claude, "SETTLE_TIMEOUT", 0.3)  # never written: waited for, in vain
    settle(ev, cursor)
    assert ev.usage is not None and ev.usage.output_tokens == 700  # the file is not there


def test_claude_a_session_resumed_from_outside_counts_from_where_it_is(
        tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text((CLAUDE / "transcript.jsonl").read_text())  # its own history
    start = ClaudeProvider().parse_hook("SessionStart", {
        **load(CLAUDE / "SessionStart.json"), "source": "resume", "transcript_path": str(path)})
    cursor = ClaudeProvider().follow_record(start, None)
    assert cursor is not None and cursor.offset == path.stat().st_size
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(path, last_assistant_message=""))
    settle(ev, cursor)
    assert ev.usage is None  # the history before tether is not this lineage's spending


def test_claude_stop_without_last_assistant_message_reads_the_transcript() -> None:
    payload = stop_payload(CLAUDE / "transcript.jsonl")
    del payload["last_assistant_message"]  # older Claude Code releases
    ev = ClaudeProvider().parse_hook("Stop", payload)
    settle(ev)
    assert ev.messages[-1]["role"] == "assistant"
    assert ev.messages[-1]["content"].startswith("I added tests/test_rate_limit.py")


def test_claude_stop_with_an_unreadable_transcript_has_no_usage(tmp_path: Path) -> None:
    ev = ClaudeProvider().parse_hook("Stop", stop_payload(tmp_path / "gone.jsonl"))
    settle(ev)
    assert ev.kind == "turn_end"
    assert ev.usage is None
    assert [m["role"] for m in ev.messages] == ["assistant"]


def test_claude_transcript_skips_noise(tmp_path: Path) -> None:
    lines = (CLAUDE / "transcript.jsonl").read_text().splitlines()
    extra = [
        "not json",
        json.dumps({"type": "user", "isMeta": True, "uuid": "m",
                    "message": {"role": "user", "content": "<command-name>/cost</command-name>"}}),
        json.dumps({"type": "assistant", "isSidechain": True, "uuid": "s", "message": {
            "id": "msg_side", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "side"}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}}),
        json.dumps({"type": "assistant", "uuid": "z", "message": {
            "id": "msg_syn", "role": "assistant", "model": "<synthetic>",
            "content": [{"type": "text", "text": "No response requested."}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}}),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines + extra) + "\n")
    payload = stop_payload(path)
    del payload["last_assistant_message"]
    ev = ClaudeProvider().parse_hook("Stop", payload)
    settle(ev)
    assert ev.usage is not None and ev.usage.context_tokens == 29_197  # side/synthetic ignored
    assert ev.usage.output_tokens == 180 + 320 + 410 + 290 + 1  # the side chain's was spent
    assert ev.model == "claude-sonnet-4-5-20250929"


def test_claude_stop_failure_is_a_usage_limit_with_its_message() -> None:
    ev = ClaudeProvider().parse_hook("StopFailure", load(CLAUDE / "StopFailure.json"))
    assert (ev.kind, ev.error) == ("turn_failed", "usage_limit")
    assert ev.error_message == "You've hit your session limit · resets 8:56pm (UTC)"
    other = ClaudeProvider().parse_hook("StopFailure", {
        **load(CLAUDE / "StopFailure.json"), "error": "overloaded"})
    assert (other.kind, other.error) == ("turn_failed", "overloaded")


def test_claude_status_line_reports_the_context_window() -> None:
    """Its status line input (https://code.claude.com/docs/en/statusline), as 2.1.332
    wrote it for its default model."""
    payload = {"session_id": SESSION_ID, "model": {"id": "claude-opus-5-5",
                                                   "display_name": "Opus 5.5"},
               "context_window": {"total_input_tokens": 0, "total_output_tokens": 0,
                                  "context_window_size": 1000000, "current_usage": None,
                                  "used_percentage": None}}
    ev = ClaudeProvider().parse_hook("StatusLine", payload)
    assert (ev.kind, ev.model, ev.context_window) == ("status", "claude-opus-5-5", 1_000_000)
    assert ClaudeProvider().reply(ev, True, "").stdout == b""  # nothing shown
    bogus = ClaudeProvider().parse_hook("StatusLine", {"context_window": {
        "context_window_size": 10**12}})
    assert bogus.context_window is None


def test_claude_pre_tool_use_and_the_exact_deny_output() -> None:
    provider = ClaudeProvider()
    ev = provider.parse_hook("PreToolUse", load(CLAUDE / "PreToolUse.json"))
    assert ev.kind == "tool_request"
    assert ev.tool_name == "Bash"
    assert ev.tool_input == {"command": "pytest tests/test_rate_limit.py -q",
                             "description": "Run the rate limiter tests"}
    denied = provider.reply(ev, False, "fenced: context is 93% full; write the handoff")
    assert denied.exit_code == 0
    assert denied.stdout == (
        b'{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", '
        b'"permissionDecisionReason": "fenced: context is 93% full; write the handoff"}}\n')
    allowed = provider.reply(ev, True, "")
    assert (allowed.stdout, allowed.exit_code) == (b"", 0)


@pytest.mark.parametrize(("event", "kind"), [
    ("PreCompact", "pre_compact"), ("SessionEnd", "session_end"),
    ("UserPromptSubmit", "turn_start"), ("Notification", "waiting"),
])
def test_claude_other_events(event: str, kind: str) -> None:
    provider = ClaudeProvider()
    ev = provider.parse_hook(event, load(CLAUDE / f"{event}.json"))
    assert ev.kind == kind
    assert ev.provider_session_id == SESSION_ID
    # Only a tool call is ever answered with a decision.
    assert provider.reply(ev, False, "no").stdout == b""


def test_claude_unknown_event_is_a_heartbeat() -> None:
    ev = ClaudeProvider().parse_hook("PostToolUse", {"session_id": SESSION_ID})
    assert ev.kind == "other"
    assert ev.provider_session_id == SESSION_ID


def test_claude_context_window_rule() -> None:
    assert context_window_for("claude-sonnet-4-5-20250929") == 200_000
    assert context_window_for(None) == 200_000
    assert context_window_for("claude-sonnet-4-5-20250929[1m]") == 1_000_000
    assert context_window_for("claude-sonnet-5") == 1_000_000
    # Natively 1M in Claude Code 2.1.332's model catalog (its default is claude-opus-5-5).
    for model in ("claude-opus-5-5", "claude-opus-4-8", "claude-opus-4-7", "claude-fable-5"):
        assert context_window_for(model) == 1_000_000, model
    assert context_window_for("claude-opus-4-6") == 200_000
    assert context_window_for("claude-opus-4-1", context_tokens=250_000) == 1_000_000


# ---------------------------------------------------------------------------- codex


def test_codex_launch_adds_its_hooks(ctx: SessionContext) -> None:
    argv = ["codex", "--model", "gpt-5-codex", "-c", 'notify=["say"]', BYPASS_TRUST,
            "fix the tests"]
    plan = CodexProvider().launch(argv, ctx)
    flags = [BYPASS_TRUST]
    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "Stop"):
        flags += ["-c", hook_override(ctx, event)]
    # The user's own notify stays (it is theirs); the bypass flag is given once.
    assert plan.argv == ["codex", *flags, "--model", "gpt-5-codex", "-c", 'notify=["say"]',
                         "fix the tests"]
    # Each override is valid TOML: a matcher group whose command runs the hook program,
    # every word shell-quoted.
    hooks = tomllib.loads(plan.argv[3])["hooks"]["SessionStart"]
    (handler,) = hooks[0]["hooks"]
    assert handler["type"] == "command" and handler["timeout"] == 30
    assert shlex.split(handler["command"]) == [*ctx.hook_command, "codex", "SessionStart"]
    assert plan.files == {}


def test_codex_hook_quoting_survives_odd_characters(tmp_path: Path) -> None:
    ctx = SessionContext(home="", socket="", session="", lineage="", state_dir=str(tmp_path),
                         hook_command=('/p "q"\\r', "tab\there", "nl\nx", "é✓\x7f"))
    command = tomllib.loads(hook_override(ctx, "Stop"))["hooks"]["Stop"][0]["hooks"][0]
    assert shlex.split(command["command"])[:4] == list(ctx.hook_command)
    assert tomllib.loads(notify_override(ctx))["notify"][:4] == list(ctx.hook_command)


def codex_home_with(tmp_path: Path, thread: str = THREAD_ID) -> Path:
    """A ``$CODEX_HOME`` holding the recorded rollout of ``thread``."""
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2025" / "10" / "06"
    day.mkdir(parents=True, exist_ok=True)
    for f in [*CODEX.glob("rollout-*.jsonl"), *CODEX_NOW.glob("rollout-*.jsonl")]:
        if thread in f.name:
            shutil.copy(f, day / f.name)
    return home


def test_codex_resume_builds_codex_resume_id(ctx: SessionContext, tmp_path: Path) -> None:
    argv = ["/opt/bin/codex", "--model", "gpt-5-codex", "-s", "workspace-write",
            "-i", "a.png", "b.png", "--full-auto", "-c", "model_reasoning_effort=high",
            "write the tests"]
    provider = CodexProvider(codex_home=str(codex_home_with(tmp_path)))
    plan = provider.resume(argv, THREAD_ID, "/h/drain/l-1.json", ctx)
    assert plan.argv == ["/opt/bin/codex", *hook_flags(ctx), "resume", THREAD_ID,
                         "--model", "gpt-5-codex", "-s", "workspace-write", "--full-auto",
                         "-c", "model_reasoning_effort=high"]
    assert plan.env == {"TETHER_DRAIN_SNAPSHOT": "/h/drain/l-1.json",
                        "TETHER_PROVIDER_SESSION": THREAD_ID}


@pytest.mark.parametrize("argv", [
    ["codex", "resume", "0199-old-id", "--model", "gpt-5"],
    ["codex", "--model", "gpt-5", "resume", "--last", "--all"],
    ["codex", "fork", "--last", "--model", "gpt-5"],
])
def test_codex_resume_from_other_command_lines(argv: list[str], ctx: SessionContext,
                                               tmp_path: Path) -> None:
    provider = CodexProvider(codex_home=str(codex_home_with(tmp_path)))
    plan = provider.resume(argv, THREAD_ID, "/snap", ctx)
    assert plan.argv == ["codex", *hook_flags(ctx), "resume", THREAD_ID, "--model", "gpt-5"]


def test_codex_exec_is_resumed_headless_with_a_continuation_prompt(
        ctx: SessionContext, tmp_path: Path) -> None:
    """Finding 2 (issue 20): ``codex exec`` killed mid-turn was resumed as interactive
    ``codex resume --last`` without a terminal ("stdin is not a terminal"). It is resumed
    headless, by ``codex exec resume ID PROMPT``, its exec options kept where they were,
    with a prompt built from the drain snapshot."""
    from tether.agent import snapshot

    home = tmp_path / "tether"
    snap = snapshot.build(lineage="l-1", instance="d", provider="codex", model="gpt-5",
                          usage={}, turn=1, provider_session_id=THREAD_ID, loop_config={},
                          messages=[{"role": "user", "content": "do the task"},
                                    {"role": "assistant", "content": "half of it is done"}])
    path = snapshot.write(home, snap)
    argv = ["codex", "-m", "gpt-5", "exec", "--json", "-o", "out.md", "-i", "a.png",
            "--skip-git-repo-check", "do the task"]
    provider = CodexProvider(codex_home=str(codex_home_with(tmp_path)))
    plan = provider.resume(argv, THREAD_ID, str(path), ctx)
    assert plan.argv[:len(hook_flags(ctx)) + 1] == ["codex", *hook_flags(ctx)]
    rest = plan.argv[len(hook_flags(ctx)) + 1:]
    assert rest[:-1] == ["-m", "gpt-5", "exec", "--json", "-o", "out.md",
                         "--skip-git-repo-check", "resume", THREAD_ID]
    prompt = rest[-1]
    assert "interrupted" in prompt and "The task: do the task" in prompt
    assert "half of it is done" in prompt
    # No snapshot yet (killed in its first turn): the task from the command line.
    plan = provider.resume(argv, THREAD_ID, str(tmp_path / "none.json"), ctx)
    assert "The task: do the task" in plan.argv[-1]


def test_codex_with_no_conversation_yet_starts_afresh(ctx: SessionContext,
                                                      tmp_path: Path) -> None:
    """Finding 3 (issue 20): killed before its first prompt, a Codex session was resumed
    by ``codex resume --last`` — ANOTHER lineage's thread. Never by recency: with no
    thread learned, or no rollout for it, the original command starts afresh."""
    provider = CodexProvider(codex_home=str(tmp_path / "empty"))
    for argv in (["codex"], ["codex", "exec", "--json", "do it"], ["codex", "-m", "o3", "go"]):
        for sid in (None, THREAD_ID):  # no rollout for THREAD_ID in this home
            plan = provider.resume(argv, sid, "/snap", ctx)
            assert plan.argv == provider.launch(argv, ctx).argv, (argv, sid)
            assert "--last" not in plan.argv and "resume" not in plan.argv
            assert plan.env == {"TETHER_DRAIN_SNAPSHOT": "/snap"}


def test_codex_notify_fixture_follows_the_documented_payload() -> None:
    assert set(load(CODEX / "notify_agent_turn_complete.json")) == {
        "type", "thread-id", "turn-id", "cwd", "input-messages", "last-assistant-message"}


def codex_home_with_rollout(tmp_path: Path) -> Path:
    return codex_home_with(tmp_path)


def test_codex_notify_is_a_turn_with_usage_from_the_rollout(tmp_path: Path) -> None:
    home = codex_home_with_rollout(tmp_path)
    payload = load(CODEX / "notify_agent_turn_complete.json")
    ev = CodexProvider(codex_home=str(home)).parse_hook("notify", payload)
    assert ev.kind == "turn_end"
    assert ev.provider_session_id == THREAD_ID
    assert ev.messages == [
        {"role": "user", "content": payload["input-messages"][0]},
        {"role": "assistant", "content": payload["last-assistant-message"]},
    ]
    assert ev.transcript_path is not None and ev.transcript_path.endswith(f"{THREAD_ID}.jsonl")
    assert ev.model == "gpt-5-codex"
    u = ev.usage
    assert u is not None
    # The second turn's tokens: totals at its end minus totals when it began
    # (input 39,451 - 11,643 of which cached 30,592 - 5,376; output 1,630 - 816).
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (2_592, 25_216, 814)
    assert (u.context_tokens, u.context_window) == (15_114, 272_000)
    assert u.context_pct == pytest.approx(100 * 15_114 / 272_000)


def test_codex_first_turn_usage(tmp_path: Path) -> None:
    home = codex_home_with_rollout(tmp_path)
    (rollout,) = home.glob("sessions/*/*/*/rollout-*.jsonl")
    # The rollout as it was when the first turn ended.
    rollout.write_text("".join(rollout.read_text().splitlines(True)[:9]))
    ev = CodexProvider(codex_home=str(home)).parse_hook(
        "notify", load(CODEX / "notify_agent_turn_complete.json"))
    u = ev.usage
    assert u is not None
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (11_643 - 5_376, 5_376, 816)
    assert u.context_tokens == 12_459


def test_codex_home_comes_from_the_environment(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(codex_home_with_rollout(tmp_path)))
    ev = CodexProvider().parse_hook("notify", load(CODEX / "notify_agent_turn_complete.json"))
    assert ev.usage is not None


def test_codex_notify_without_a_rollout_has_no_usage(tmp_path: Path) -> None:
    payload = load(CODEX / "notify_agent_turn_complete.json")
    payload["last-assistant-message"] = None
    ev = CodexProvider(codex_home=str(tmp_path)).parse_hook("notify", payload)
    assert ev.kind == "turn_end"
    assert ev.usage is None and ev.transcript_path is None
    assert [m["role"] for m in ev.messages] == ["user"]


def test_codex_other_notifications_are_heartbeats(tmp_path: Path) -> None:
    provider = CodexProvider(codex_home=str(tmp_path))
    ev = provider.parse_hook("notify", {"type": "approval-requested", "thread-id": THREAD_ID})
    assert ev.kind == "other"
    assert ev.provider_session_id == THREAD_ID
    # notify is fire-and-forget: there is nothing to answer, even when fenced.
    assert provider.reply(HookEvent(kind="turn_end"), False, "fenced").stdout == b""


def test_the_hook_socket_name_is_the_layouts() -> None:
    from tether.agent.hook import SOCKET_NAME
    from tether.model.layout import HomeLayout

    assert HomeLayout(Path("/h")).socket == Path("/h", SOCKET_NAME)


def hook_flags(ctx: SessionContext) -> list[str]:
    flags = [BYPASS_TRUST]
    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "Stop"):
        flags += ["-c", hook_override(ctx, event)]
    return flags


def test_codex_hooks_recorded_from_the_real_cli(tmp_path: Path) -> None:
    """The payloads codex-cli 0.171.0 gave its hooks: the thread id at its start, the
    turn's start, a tool call to fence and the turn's end, whose usage is each API call
    of that turn (``token_usage_record`` by ``turn_id``) counted once."""
    home = codex_home_with(tmp_path, CODEX_THREAD)
    provider = CodexProvider(codex_home=str(home))
    ev = provider.parse_hook("SessionStart", load(CODEX_NOW / "SessionStart.json"))
    assert (ev.kind, ev.provider_session_id, ev.session_source) == (
        "session_start", CODEX_THREAD, "startup")
    ev = provider.parse_hook("SessionStart", load(CODEX_NOW / "SessionStart.resume.json"))
    assert (ev.kind, ev.session_source) == ("session_start", "resume")
    ev = provider.parse_hook("UserPromptSubmit", load(CODEX_NOW / "UserPromptSubmit.json"))
    assert ev.kind == "turn_start"
    ev = provider.parse_hook("PreToolUse", load(CODEX_NOW / "PreToolUse.json"))
    assert (ev.kind, ev.tool_name, ev.tool_input) == (
        "tool_request", "Bash", {"command": "echo fixed > fix.txt"})
    denied = json.loads(provider.reply(ev, False, "DYING: finish up").stdout)
    assert denied == {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                             "permissionDecision": "deny",
                                             "permissionDecisionReason": "DYING: finish up"}}
    assert provider.reply(ev, True, "ok").stdout == b""  # Codex's own policy applies
    ev = provider.parse_hook("Stop", load(CODEX_NOW / "Stop.json"))
    assert (ev.kind, ev.provider_session_id, ev.model) == ("turn_end", CODEX_THREAD,
                                                           "gpt-fake-1")
    u = ev.usage
    assert u is not None  # served: 11,643 (5,376 cached) / 816, then 12,459 (11,000) / 120
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (
        (11_643 - 5_376) + (12_459 - 11_000), 5_376 + 11_000, 816 + 120)
    assert (u.context_tokens, u.context_window) == (12_459 + 120, 258_400)
    assert ev.messages == [{"role": "user", "content": "fix the file"},
                           {"role": "assistant", "content": "Fixed: fix.txt now says fixed."}]
    ev = provider.parse_hook("Stop", load(CODEX_NOW / "Stop.2.json"))  # the resumed turn
    assert ev.usage is not None
    assert (ev.usage.input_tokens, ev.usage.cache_read_tokens, ev.usage.output_tokens) == (
        13_000 - 12_400, 12_400, 30)
    assert ev.messages[0] == {"role": "user", "content": "anything else?"}


def test_codex_usage_limit_as_the_real_cli_prints_it() -> None:
    """codex-cli 0.171.0 answered a 429 ``usage_limit_reached`` with this line (typographic
    apostrophe), and an API key's 429s with the others: each was taken for a crash,
    spending a revival. Each is a usage limit (with its reset time when it gives one)."""
    from tether.agent import exits

    line = ("ERROR: You\u2019ve hit your usage limit. Upgrade to Pro "
            "(https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to "
            "purchase more credits or try again at 11:45 PM.")
    p = CodexProvider
    rules = exits.ExitRules(usage_limit=p.usage_limit_patterns,
                            out_of_context=p.out_of_context_patterns,
                            waiting_for_user=p.waiting_patterns)
    facts = exits.ExitFacts(state="FAILED", exit_code=1, hung=False, dead=False)
    end = exits.classify(facts, line, rules, 0.0)
    assert end.reason == "usage_limited" and end.reset_at is not None
    # With an API key: 429 insufficient_quota, and a 429 rate limit it retried 5 times.
    for line in ("ERROR: Quota exceeded. Check your plan and billing details.",
                 "ERROR: Reconnecting... 5/5\nERROR: exceeded retry limit, last status: 429 "
                 "Too Many Requests"):
        end = exits.classify(facts, line, rules, 0.0)
        assert (end.reason, end.reset_at) == ("usage_limited", None), line


def test_codex_a_session_id_that_reads_as_an_option_is_no_thread(tmp_path: Path,
                                                                ctx: SessionContext) -> None:
    """The agent names its session through its hooks, and a revival puts it on Codex's
    command line: ``--dangerously-bypass-approvals-and-sandbox`` as a "thread id" (with a
    rollout file of that name planted in ``~/.codex``) must not become an option."""
    evil = "--dangerously-bypass-approvals-and-sandbox"
    day = tmp_path / "sessions" / "2026" / "01" / "01"
    day.mkdir(parents=True)
    (day / f"rollout-2026-01-01T00-00-00-{evil}.jsonl").write_text("{}\n")
    provider = CodexProvider(codex_home=str(tmp_path))
    ev = provider.parse_hook("SessionStart", {"session_id": evil, "source": "startup"})
    assert ev.provider_session_id is None
    ev = provider.parse_hook("notify", {"type": "agent-turn-complete", "thread-id": evil})
    assert ev.provider_session_id is None
    plan = provider.resume(["codex", "exec", "task"], evil, "/snap", ctx)
    assert evil not in plan.argv and "resume" not in plan.argv  # afresh
