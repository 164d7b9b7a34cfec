"""Launch and resume command lines of the OpenCode, Aider and Amp providers, and
user-defined providers from TOML: pure (no daemon, no CLI). The Gemini CLI's:
test_gemini_provider.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.agent.providers import REGISTRY, get, load_user
from tether.agent.providers.base import SessionContext
from tether.agent.providers.user import ProviderFileError, load


def ctx(tmp: Path) -> SessionContext:
    return SessionContext(home=str(tmp), socket=str(tmp / "s"), session="L", lineage="L",
                          state_dir=str(tmp), hook_command=("py", "-m", "tether.agent.hook"))


def test_output_providers_resume(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    assert get("opencode").resume(["opencode", "run", "fix it", "-m", "a/b"], "ses_abcdefgh1",
                                  "/s", c).argv == ["opencode", "--session", "ses_abcdefgh1",
                                                    "-m", "a/b"]
    assert get("opencode").resume(["opencode", "-c"], None, "/s", c).argv == [
        "opencode", "--continue"]
    # Interactive: the chat history restored; one-shot (``-m``, ``-f``): one-shot again,
    # with a continuation prompt for its message (finding 2 of issue 20).
    assert get("aider").resume(["aider", "--model", "sonnet", "a.py"], None, "/s",
                               c).argv == ["aider", "--restore-chat-history", "--model",
                                           "sonnet", "a.py"]
    argv = get("aider").resume(["aider", "--model", "sonnet", "-m", "fix it", "a.py"], None,
                               str(tmp_path / "none.json"), c).argv
    assert argv[:-1] == ["aider", "--restore-chat-history", "--model", "sonnet", "a.py",
                         "--message"]
    assert "The task: fix it" in argv[-1]
    argv = get("aider").resume(["aider", "--message-file=task.md"], None, "/s", c).argv
    assert argv[:-1] == ["aider", "--restore-chat-history", "--message"]
    tid = "T-0123abcd-0000-4000-8000-0123456789ab"
    assert get("amp").resume(["amp", "-x", "fix it"], tid, "/s", c).argv == [
        "amp", "threads", "continue", tid]
    assert get("amp").resume(["amp"], None, "/s", c).argv == ["amp", "threads", "continue"]
    for name in ("opencode", "aider", "amp"):
        assert get(name).turn_idle_seconds is not None  # heuristics, documented as such
    assert get("gemini").turn_idle_seconds is None  # hooks


def test_user_provider_from_toml(tmp_path: Path) -> None:
    d = tmp_path / "providers"
    d.mkdir()
    (d / "mycli.toml").write_text('''
commands = ["mycli", "mycli2"]
resume = ["{argv0}", "--resume", "{session}", "{args}"]
resume_last = ["{argv0}", "--last"]
resume_drop = { "-p" = 1 }
[turns]
idle_seconds = 1.5
end_regex = '^\\$ $'
context_regex = '(\\d+)% context'
session_regex = 'session: (\\S+)'
[exits]
usage_limit = ['quota gone']
''')
    (d / "broken.toml").write_text("commands = [1]\n")
    (d / "claude.toml").write_text("")
    errors = load_user(d)
    assert any("broken.toml" in e and "commands must be a list of strings" in e
               for e in errors)
    assert any("'claude' is a built-in" in e for e in errors)
    p = REGISTRY["mycli"]
    assert p.commands == ("mycli", "mycli2") and p.turn_idle_seconds == 1.5
    assert p.resume(["mycli", "-p", "go", "--fast"], "S1", "/s", ctx(tmp_path)).argv == [
        "mycli", "--resume", "S1", "--fast"]
    assert p.resume(["mycli", "--fast"], None, "/s", ctx(tmp_path)).argv == ["mycli", "--last"]
    assert p.usage_limit_patterns == ("quota gone",)
    load_user(tmp_path / "none")
    assert "mycli" not in REGISTRY


@pytest.mark.parametrize(("text", "why"), [
    ("nope = 1", "unknown key(s) nope"),
    ("[turns]\nend_regex = '('", "[turns] end_regex is not a valid regex"),
    ("[turns]\nidle_seconds = 0", "idle_seconds must be a number of seconds above 0"),
    ("resume = 'x'", "resume must be a list of strings"),
    ("[exits]\nusage_limit = ['[']", "[exits] usage_limit is not a valid regex"),
    ("= broken", "bad.toml"),
])
def test_a_bad_provider_file_is_refused_precisely(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProviderFileError, match=None) as e:
        load(path)
    assert why in str(e.value) and str(path) in str(e.value)


def test_aider_usage_lines_with_and_without_its_cache_form() -> None:
    """Finding 11 (issue 20): Aider's cache form was not read. Every usage line of a
    turn's output counts (one per model call), each figure as Aider printed it."""
    from tether.daemon.agents.turns import usage_of

    pattern = get("aider").usage_pattern
    assert usage_of(pattern, "Tokens: 12k sent, 3.4k cache write, 8.0k cache hit, 1.2k "
                    "received.\nCost: $0.05 message, $0.05 session.") == {
        "input_tokens": 12_000, "cache_creation_tokens": 3_400, "cache_read_tokens": 8_000,
        "output_tokens": 1_200}
    assert usage_of(pattern, "Tokens: 766 sent, 25 received. Cost: $0.0041 message\n"
                    "> \nTokens: 1.4k sent, 8.0k cache hit, 50 received.\n") == {
        "input_tokens": 2_166, "cache_read_tokens": 8_000, "output_tokens": 75}
    assert usage_of(pattern, "$ 0.0000      531 tokens total\n> ") is None  # /tokens
