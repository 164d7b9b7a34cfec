"""The Gemini CLI provider, pure: its hooks (where the CLI loads them), resume command
lines (headless, interactive, fresh), and what it reads from a session file. The fixtures
in ``tests/fixtures/gemini`` were recorded from the real Gemini CLI 0.61.0
(tests/fixtures/README.md); the real CLI itself runs in ``tests/realcli/test_gemini.py``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tether.agent import snapshot
from tether.agent.providers.base import SessionContext
from tether.agent.providers.gemini import (
    DEFAULT_CONTEXT_WINDOW,
    GeminiProvider,
    context_window_for,
    has_conversation,
    read_transcript,
    strip_json_comments,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "gemini"
SID = "d086b8d2-5c94-4a33-b0fb-a4699f8e6325"


def ctx(tmp: Path, *, confined: bool = False, tty: bool = True) -> SessionContext:
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    return SessionContext(home=str(tmp), socket=str(tmp / "s"), session="L", lineage="L",
                          state_dir=str(state), hook_command=("py", "-m", "tether.agent.hook"),
                          confined=confined, tty=tty)


@pytest.fixture
def gdir(tmp_path: Path) -> Path:
    """A ``~/.gemini`` holding the recorded session (and the empty file a resume makes)."""
    chats = tmp_path / "home" / ".gemini" / "tmp" / "app" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(FIX / "transcript.jsonl", chats / "session-2026-11-27T21-10-d086b8d2.jsonl")
    (chats / "session-2026-11-27T21-11-d086b8d2.jsonl").write_text(
        json.dumps({"sessionId": SID, "projectHash": "x", "kind": "main"}) + "\n")
    return tmp_path / "home" / ".gemini"


def payload(event: str, transcript: Path | None = None) -> dict[str, object]:
    data: dict[str, object] = json.loads((FIX / f"{event}.json").read_text())
    if transcript is not None:
        data["transcript_path"] = str(transcript)
    return data


# ---------------------------------------------------------------------- hooks
def test_unconfined_hooks_go_into_the_system_defaults_file(tmp_path: Path) -> None:
    p = GeminiProvider(str(tmp_path / "nohome"))
    plan = p.launch(["gemini", "-m", "gemini-2.5-pro", "-p", "fix it"], ctx(tmp_path))
    assert plan.argv == ["gemini", "-m", "gemini-2.5-pro", "-p", "fix it"]
    assert plan.views == {}
    path = plan.env["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"]
    settings = json.loads(plan.files[path])
    assert settings["hooksConfig"] == {"enabled": True}
    assert set(settings["hooks"]) == {"SessionStart", "BeforeAgent", "BeforeTool",
                                      "AfterAgent", "Notification", "PreCompress",
                                      "SessionEnd"}
    cmd = settings["hooks"]["AfterAgent"][0]["hooks"][0]["command"]
    assert cmd == "py -m tether.agent.hook gemini AfterAgent"
    assert settings["hooks"]["BeforeTool"][0]["matcher"] == ".*"


def test_confined_the_users_settings_are_shown_with_tethers_hooks(tmp_path: Path) -> None:
    """Gemini CLI 0.61.0 skips a system defaults file not owned by root (every directory
    above it too): a confined agent sees its own settings.json with the hooks added."""
    g = tmp_path / "home" / ".gemini"
    g.mkdir(parents=True)
    (g / "settings.json").write_text("""{
      // the user's own, with comments, as the CLI allows
      "security": {"auth": {"selectedType": "gemini-api-key"}},  /* a "quoted" // */
      "ui": {"theme": "GitHub // not a comment"},
      "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "mine"}]}]},
      "hooksConfig": {"disabled": ["x"]}
    }""")
    p = GeminiProvider(str(g))
    c = ctx(tmp_path, confined=True)
    plan = p.launch(["gemini"], c)
    assert "GEMINI_CLI_SYSTEM_DEFAULTS_PATH" not in plan.env  # not twice
    shown = str(Path(c.state_dir) / "gemini-settings.json")
    assert plan.views == {str(g / "settings.json"): shown}
    merged = json.loads(plan.files[shown])
    assert merged["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert merged["ui"] == {"theme": "GitHub // not a comment"}
    assert merged["hooksConfig"] == {"disabled": ["x"], "enabled": True}
    after = merged["hooks"]["AfterAgent"]
    assert after[0]["hooks"][0]["command"] == "mine"  # theirs first, then tether's
    assert after[1]["hooks"][0]["command"] == "py -m tether.agent.hook gemini AfterAgent"
    # Hooks turned off by the user: theirs stay off, tether's run.
    (g / "settings.json").write_text(json.dumps({
        "hooksConfig": {"enabled": False},
        "hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "mine"}]}]}}))
    merged = json.loads(p.launch(["gemini"], c).files[shown])
    assert [h["hooks"][0]["command"] for h in merged["hooks"]["BeforeTool"]] == [
        "py -m tether.agent.hook gemini BeforeTool"]
    assert merged["hooksConfig"]["enabled"] is True


def test_confined_without_settings_and_with_broken_ones(tmp_path: Path) -> None:
    g = tmp_path / "home" / ".gemini"
    c = ctx(tmp_path, confined=True)
    plan = GeminiProvider(str(g)).launch(["gemini"], c)  # no ~/.gemini at all
    (view,) = plan.views.values()
    assert json.loads(plan.files[view])["hooksConfig"] == {"enabled": True}
    g.mkdir(parents=True)
    (g / "settings.json").write_text("{ not json")
    plan = GeminiProvider(str(g)).launch(["gemini"], c)
    # The CLI reports a broken file itself: it is not hidden behind a view.
    assert plan.views == {} and "GEMINI_CLI_SYSTEM_DEFAULTS_PATH" in plan.env


def test_strip_json_comments() -> None:
    assert json.loads(strip_json_comments('{"a": "x//y", /* c */ "b": 1 // d\n}')) == {
        "a": "x//y", "b": 1}
    assert json.loads(strip_json_comments('{"a": "q\\"//"}')) == {"a": 'q"//'}


def test_hook_kinds() -> None:
    p = GeminiProvider()
    assert p.parse_hook("BeforeAgent", payload("BeforeAgent")).kind == "turn_start"
    start = p.parse_hook("SessionStart", payload("SessionStart"))
    assert (start.kind, start.provider_session_id, start.session_source) == (
        "session_start", SID, "startup")
    tool = p.parse_hook("BeforeTool", payload("BeforeTool"))
    assert (tool.kind, tool.tool_name) == ("tool_request", "write_file")
    assert tool.tool_input is not None and tool.tool_input["content"] == "written\n"
    deny = p.reply(tool, False, "fenced")
    assert json.loads(deny.stdout) == {"decision": "deny", "reason": "fenced"}
    assert p.reply(tool, True, "ok").stdout == b""
    assert p.parse_hook("Notification", {"notification_type": "ToolPermission",
                                         "message": "Allow?"}).kind == "waiting"
    assert p.parse_hook("PreCompress", payload("PreCompress")).kind == "pre_compact"


# ---------------------------------------------------------------------- the session file
def test_a_turn_counts_each_api_response_once(gdir: Path) -> None:
    """Turn 2 of the recorded session: one response, 2,300 prompt tokens of which 1,800
    cached, 5 answer and 40 thought tokens."""
    path = next(gdir.glob("tmp/app/chats/*21-10*"))
    model, usage, messages, prompted = read_transcript(str(path))
    assert model == "gemini-2.5-flash" and prompted
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (500, 1800, 45)
    assert usage.context_tokens == 2300 + 5 and usage.context_window == DEFAULT_CONTEXT_WINDOW
    assert messages == [{"role": "user", "content": "are you there?"},
                        {"role": "assistant", "content": "Still here."}]


def test_a_turn_with_a_tool_call(gdir: Path, tmp_path: Path) -> None:
    """Turn 1: the function call's response (its record written twice, counted once)
    and the answer after the tool's result (a user record that is not a prompt)."""
    lines = (FIX / "transcript.jsonl").read_text().splitlines()
    cut = next(i for i, ln in enumerate(lines) if '"are you there?"' in ln) - 2
    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(lines[:cut]) + "\n")
    _, usage, messages, _ = read_transcript(str(first))
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (4100, 42, 0)
    assert usage.context_tokens == 2112
    assert messages == [{"role": "user", "content": "write out.txt"},
                        {"role": "assistant", "content": "I wrote the file."}]
    p = GeminiProvider()
    turn = p.parse_hook("AfterAgent", payload("AfterAgent", first))
    assert turn.kind == "turn_end" and turn.usage is not None
    assert turn.usage.input_tokens == 4100 and turn.model == "gemini-2.5-flash"
    # The transcript's answer, not the hook's ``prompt_response`` (which repeats a chunk).
    assert turn.messages[-1] == {"role": "assistant", "content": "I wrote the file."}
    assert turn.usage.context_pct == pytest.approx(100 * 2112 / 1_048_576)


def test_context_windows() -> None:
    assert context_window_for("gemini-2.5-pro") == 1_048_576
    assert context_window_for("gemma-4-31b-it") == 256_000
    assert context_window_for(None) == 1_048_576


# ---------------------------------------------------------------------- resume
def test_resume_headless_continues_with_a_prompt_from_the_snapshot(
        gdir: Path, tmp_path: Path) -> None:
    """``gemini --resume ID`` without ``-p`` and without a terminal fails ("No input
    provided via stdin", exit 42): a headless attempt is resumed headless."""
    snap = snapshot.write(tmp_path, snapshot.build(
        lineage="L", instance="i", provider="gemini", model=None, usage={}, turn=1,
        messages=[{"role": "user", "content": "write out.txt"},
                  {"role": "assistant", "content": "half done"}],
        provider_session_id=SID, loop_config={}))
    p = GeminiProvider(str(gdir))
    argv = ["gemini", "-m", "gemini-2.5-flash", "--approval-mode", "yolo", "-p",
            "write out.txt", "-o", "json"]
    for tty in (True, False):  # ``-p``: headless, terminal or not
        plan = p.resume(argv, SID, str(snap), ctx(tmp_path, tty=tty))
        assert plan.argv[:9] == ["gemini", "--resume", SID, "-m", "gemini-2.5-flash",
                                 "--approval-mode", "yolo", "-o", "json"]
        assert plan.argv[9] == "-p" and len(plan.argv) == 11
        assert "interrupted" in plan.argv[10] and "write out.txt" in plan.argv[10]
        assert "half done" in plan.argv[10]
        assert plan.env["TETHER_PROVIDER_SESSION"] == SID
    # No terminal and no -p (stdin was the prompt): headless too.
    plan = p.resume(["gemini", "--yolo"], SID, str(snap), ctx(tmp_path, tty=False))
    assert plan.argv[:5] == ["gemini", "--resume", SID, "--yolo", "-p"]


def test_resume_interactive_at_its_prompt(gdir: Path, tmp_path: Path) -> None:
    p = GeminiProvider(str(gdir))
    plan = p.resume(["gemini", "-m", "x", "-i", "start here", "--yolo", "-w", "a query",
                     "-e", "ext1", "ext2"], SID, "/nonexistent", ctx(tmp_path))
    assert plan.argv == ["gemini", "--resume", SID, "-m", "x", "--yolo", "-e", "ext1", "ext2"]


def test_no_conversation_yet_starts_afresh(gdir: Path, tmp_path: Path) -> None:
    """Resuming a session with no prompt fails ("No previous sessions found for this
    project", exit 42): it starts afresh from its command, as does one never seen."""
    p = GeminiProvider(str(gdir))
    chats = next(gdir.glob("tmp/app/chats"))
    empty = "6a9dc6f8-4416-4ea4-a441-d6a0953859b4"
    lines = (FIX / "transcript.jsonl").read_text().splitlines()
    (chats / "session-2026-11-27T21-06-6a9dc6f8.jsonl").write_text(
        lines[0].replace(SID, empty) + "\n" + lines[1] + "\n")  # metadata, session context
    assert has_conversation(SID, str(gdir)) and not has_conversation(empty, str(gdir))
    argv = ["gemini", "-m", "x", "-p", "do it"]
    for sid in (empty, None, "00000000-0000-0000-0000-000000000000"):
        plan = p.resume(argv, sid, "/s", ctx(tmp_path, tty=False))
        assert plan.argv == argv


def test_a_failed_turn_taken_back_leaves_nothing_to_resume(tmp_path: Path) -> None:
    """0.61.0 after a quota error: the prompt's record, then a checkpoint without it."""
    lines = (FIX / "transcript.jsonl").read_text().splitlines()
    checkpoint = lines[1]  # {"$set": {"messages": [<session context>]}}
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([lines[0], checkpoint, lines[2], checkpoint]) + "\n")
    assert read_transcript(str(path))[3] is False
    path.write_text("\n".join([lines[0], checkpoint, lines[2]]) + "\n")
    assert read_transcript(str(path))[3] is True
    prompt_id = json.loads(lines[2])["id"]
    with path.open("a") as f:
        f.write(json.dumps({"$rewindTo": prompt_id}) + "\n")
    assert read_transcript(str(path))[3] is False


def test_the_users_settings_are_read_only_from_their_own_file(tmp_path: Path) -> None:
    """A link to someone else's file (root's secrets, for a root daemon) is not copied
    into the view the agent reads; a link to the user's own dotfiles is."""
    g = tmp_path / "home" / ".gemini"
    g.mkdir(parents=True)
    dotfiles = tmp_path / "dotfiles.json"
    dotfiles.write_text('{"ui": {"theme": "x"}}')
    (g / "settings.json").symlink_to(dotfiles)
    c = ctx(tmp_path, confined=True)
    plan = GeminiProvider(str(g)).launch(["gemini"], c)
    (view,) = plan.views.values()
    assert json.loads(plan.files[view])["ui"] == {"theme": "x"}
    if os.getuid() == 0:
        os.chown(dotfiles, 1, 1)  # another user's
        plan = GeminiProvider(str(g)).launch(["gemini"], c)
        assert plan.views == {}
