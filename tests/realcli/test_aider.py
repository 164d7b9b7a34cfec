"""The real Aider (aider-chat, pinned by ``.ci/agents.sh``, in its own venv) under the real
daemon, in the product's default sandbox (bwrap), driven through a real terminal where it
is interactive.

Faked: only the model API — ``tests/realcli/fake_openai.py`` on 127.0.0.1 speaks Chat
Completions as Aider (through litellm) uses it, reached by its name through tether's egress
proxy (``tests/realcli/net.py``). Aider finds it through its own config and
keys in the home, which the sandbox must show it: ``openai-api-base`` and the model in
``~/.aider.conf.yml``, ``OPENAI_API_KEY`` in ``~/.env`` (finding 11 of issue 20), with the
options that skip its questions (analytics, release notes, model warnings, .gitignore).

Aider has no hooks: tether infers its turns from its output (its prompt after a usage
line). Its token counts are its own figures: the API's usage, rounded (``10k``), when it
does not stream (``stream: false`` here, so a test can compare them with what the fake
served), its own estimate when it streams (then tether records what it printed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import cli
from tests.realcli.fake_openai import HOST, FakeOpenAI, Reply, Tokens
from tests.realcli.session import Home, Screen
from tether.runtime import bwrap

PROBE = bwrap.probe()
# A real CLI on a loaded machine: minutes, not the suite's 120 s.
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}"),
              pytest.mark.timeout(300)]

KEY = "sk-fake-aider"
CRASHED_AFTER = 4
USAGE = re.compile(r"Tokens: ([\d.]+k?) sent, ([\d.]+k?) received")


def seed(home: Home, fake: FakeOpenAI) -> None:
    (home.user / ".aider.conf.yml").write_text(f"""openai-api-base: {fake.base_url}
model: openai/gpt-fake-1
analytics-disable: true
check-update: false
show-release-notes: false
show-model-warnings: false
gitignore: false
auto-commits: false
stream: false
""")
    (home.user / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    (home.user / ".aider").mkdir()  # its state directory (analytics id, caches)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as f:
        yield f


@pytest.fixture
def home(tmp_path: Path, fake: FakeOpenAI) -> Iterator[Home]:
    # litellm's model price list is read from the package, not fetched from GitHub.
    h = Home(tmp_path, env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"}, apis=(fake.api,))
    seed(h, fake)
    h.start()
    yield h
    h.close()


def aider() -> str:
    return str(cli("aider"))


def at_prompt(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return bool(lines) and lines[-1].rstrip() == ">"


def quiet_turns(home: Home, lineage: str, seconds: float) -> dict[str, Any]:
    """The lineage after its output was quiet at the prompt for ``seconds``."""
    time.sleep(seconds)
    return home.lineage(lineage)


def crashed(home: Home, lineage: str) -> list[dict[str, Any]]:
    return [e for e in home.events(lineage)
            if e["type"] == "agent.heartbeat" and e.get("state") == "CRASHED"]


def revived(home: Home, lineage: str, attempt: int, old_exec: str) -> tuple[Screen, list[str]]:
    rec = home.wait_lineage(lineage, lambda r: r["attempt"] == attempt
                            and r["status"] == "ACTIVE" and r["exec"] not in (None, old_exec),
                            what=f"attempt {attempt}")
    argv = list(home.daemon.client().exec_get(rec["exec"]).spec.argv)
    s = home.screen(rec["exec"])
    s.wait(at_prompt, timeout=90)
    return s, argv


def test_aider_interactive_turns_tokens_idle_and_revivals(home: Home,
                                                         fake: FakeOpenAI) -> None:
    """Finding 11 (issue 20): turns were over-counted — the startup banner as turn 1, a
    local command (``/tokens``, no model call), an empty Enter's redraw, a revived
    attempt's banner — and ``/tokens`` made tether read the old ``Tokens:`` line again
    (1,382 → 2,084 input tokens); the cache form was not read; its config and keys in the
    home were hidden by the sandbox. Here: one turn per prompt, each with the tokens Aider
    printed (equal to what was served, as it does not stream), revived before its first
    prompt and after a turn with its chat history, never killed while idle at its prompt."""
    # A terminal agent waits for its user from its start (Aider imports for seconds first).
    x, lin = home.run(aider(), tty=True,
                      flags=("--stale-after", "2", "--crashed-after", str(CRASHED_AFTER)))
    s = home.screen(x)
    s.wait(at_prompt, timeout=90)
    # Killed before its first prompt: revived (its chat history is empty).
    home.kill9_agent(lin)
    s, argv = revived(home, lin, 2, x)
    assert argv[1:] == ["--restore-chat-history"]

    fake.answer(Reply(text="Hello there.", tokens=Tokens(766, 25)))
    s.type("say hi")
    s.wait("Tokens: 766 sent, 25 received.")
    first = {"input_tokens": 766, "output_tokens": 25}
    rec = home.wait_lineage(lin, lambda r: r["usage"] == first, what="turn 1's tokens")
    assert rec["turns"] == 1  # neither banner was one
    assert fake.turns()[0].headers["authorization"] == f"Bearer {KEY}"  # ~/.env, read
    s.type("/tokens")
    s.wait("tokens total")
    s.type("")
    rec = quiet_turns(home, lin, CRASHED_AFTER + 2)  # idle at its prompt past --crashed-after
    assert (rec["turns"], rec["usage"]) == (1, first)  # /tokens, Enter: no turn, no tokens
    assert (rec["attempt"], rec["status"]) == (2, "ACTIVE")  # not killed
    assert crashed(home, lin) == [] and rec["heartbeat"] != "CRASHED"
    assert len(fake.turns()) == 1  # /tokens and Enter asked the model nothing

    # Aider's cache form, as an OpenAI-compatible API reports a cache (DeepSeek's hit,
    # Anthropic's write): "Tokens: 10k sent, 1.4k cache write, 8.0k cache hit, 1.2k
    # received." ("sent" is its prompt plus the cache write).
    fake.answer(Reply(text="Cached answer.", tokens=Tokens(8_600, 1_200),
                      usage_extra={"prompt_cache_hit_tokens": 8_000,
                                   "cache_creation_input_tokens": 1_400}))
    s.type("use the cache")
    s.wait("1.2k received.")
    assert "Tokens: 10k sent, 1.4k cache write, 8.0k cache hit, 1.2k received." in s.text()
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 2, what="turn 2")
    both = {"input_tokens": 766 + 10_000, "output_tokens": 25 + 1_200,
            "cache_creation_tokens": 1_400, "cache_read_tokens": 8_000}
    assert rec["usage"] == both

    # Killed after its turns: revived with its chat history; its banner is no turn.
    old = str(rec["exec"])
    home.kill9_agent(lin)
    s, argv = revived(home, lin, 3, old)
    assert argv[1:] == ["--restore-chat-history"]
    fake.answer(Reply(text="Still here.", tokens=Tokens(900, 30)))
    s.type("are you still there")
    s.wait("Tokens: 900 sent, 30 received.")
    rec = home.wait_lineage(lin, lambda r: r["usage"]["input_tokens"] == 766 + 10_000 + 900,
                            what="turn 3's tokens")
    assert rec["turns"] == 3
    assert "say hi" in str(fake.turns()[-1].body)  # the restored conversation
    assert list((home.user / ".aider").iterdir())  # its state, written in the sandbox


def test_aider_one_shot_is_revived_one_shot_and_its_turn_counted(home: Home,
                                                                 fake: FakeOpenAI) -> None:
    """``aider --message`` (headless) killed before its answer: revived headless, with its
    chat history and a continuation prompt (finding 2), and its one turn counted when it
    exits, with the tokens served. Streaming, Aider prints its own estimate: tether records
    what it printed."""
    fake.answer(Reply(text="never delivered", delay=120, tokens=Tokens(5_000, 50)),
                Reply(text="Fixed the typo.", tokens=Tokens(987, 56)))
    _, lin = home.run(aider(), "--message", "fix the typo in README.md")
    fake.wait_turns(1, timeout=90)
    home.kill9_agent(lin)
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", timeout=120,
                            what="revived one-shot, finished")
    argv = list(home.daemon.client().exec_get(rec["exec"]).spec.argv)
    assert argv[1:3] == ["--restore-chat-history", "--message"]
    resumed = fake.turns()[-1]
    assert "interrupted" in resumed.last_user_text()
    assert "fix the typo in README.md" in resumed.last_user_text()
    assert (rec["attempt"], rec["turns"], rec["exit_reason"]) == (2, 1, "finished")
    assert rec["usage"] == {"input_tokens": 987, "output_tokens": 56}

    fake.answer(Reply(text="Streamed answer.", tokens=Tokens(4_321, 99)))
    x, lin2 = home.run(aider(), "--stream", "--message", "stream it")
    rec = home.wait_lineage(lin2, lambda r: r["status"] == "FINISHED", timeout=90,
                            what="the streamed one-shot")
    out = home.tether("logs", x).stdout
    sent, received = USAGE.search(out).groups()  # type: ignore[union-attr]
    assert rec["usage"] == {"input_tokens": int(sent), "output_tokens": int(received)}
    assert rec["turns"] == 1 and int(sent) != 4_321  # its estimate, not the API's count


def test_aider_reaches_its_model_api_only_because_its_policy_allows_it(
        home: Home, fake: FakeOpenAI) -> None:
    """Issue 21: Aider in the default sandbox reaches the fake API (``fake-openai.test``,
    resolved by the egress proxy alone) only because its policy names that host and port,
    as every test here does. Without the entry the proxy denies its request
    (``agent.egress_denied`` with the host) and the fake gets nothing; with it, the
    request arrives by that name."""
    x, lin = home.run(aider(), "--message", "say hi", allowed=False,
                      flags=("--max-revivals", "0"))
    rec = home.wait_lineage(lin, lambda r: any(h["host"] == HOST for h in
                                               r["egress"]["denied_hosts"]),
                            timeout=90, what="its request denied")
    assert fake.requests == [], fake.log()
    assert fake.api.entry not in rec["egress"]["allow"]
    (denied,) = [e["data"] for e in home.events(lin) if e["type"] == "agent.egress_denied"
                 and e["data"]["host"] == HOST]
    assert denied["port"] == fake.port
    home.tether("kill", x, check=False)

    fake.answer(Reply(text="Hi.", tokens=Tokens(321, 12)))
    _, lin = home.run(aider(), "--message", "say hi")
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", timeout=90,
                            what="the allowed one-shot")
    assert (rec["egress"]["network"], rec["usage"]) == (
        "proxy", {"input_tokens": 321, "output_tokens": 12})
    assert fake.api.entry in rec["egress"]["allow"]
    assert [r.headers["host"] for r in fake.turns()] == [fake.api.entry]
