"""The real Codex CLI (codex-cli, pinned by ``.ci/agents.sh``) under the real daemon, in the
product's default sandbox (bwrap), driven through a real terminal where it is interactive.

Faked: only the model API — ``tests/realcli/fake_openai.py`` on 127.0.0.1 speaks the
Responses API as Codex uses it, reached by its name through tether's egress proxy
(``tests/realcli/net.py``); Codex is pointed at it by a custom model provider's
``base_url`` in a seeded ``~/.codex/config.toml`` (with the project trusted, so it skips its
onboarding). Every claim of the README's provider table for Codex is checked here: hooks
fire, one turn per prompt (its task-title request is not one), the thread id learned at the
first prompt, tokens equal to what the fake served, context % of the window Codex uses, kill
-9 → revival (interactive, headless ``codex exec``, and before the first prompt: afresh,
never another lineage's thread), an idle session not killed, tool fencing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import AGENTS_DIR, cli, versions
from tests.realcli.fake_openai import (
    HOST,
    FakeOpenAI,
    Reply,
    Request,
    Tokens,
    codex_metadata,
)
from tests.realcli.session import Home
from tether.runtime import bwrap

PROBE = bwrap.probe()
# A real CLI on a loaded machine: minutes, not the suite's 120 s.
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}"),
              pytest.mark.timeout(240)]

KEY_ENV = "FAKE_OPENAI_KEY"
#: Codex's own sandbox is not nested in tether's, and nothing asks for approval.
EXEC_FLAGS = ("-s", "danger-full-access")
TUI_FLAGS = ("-s", "danger-full-access", "-a", "never")
#: The context window Codex uses for a model it has no metadata for (its fallback).
FALLBACK_WINDOW = 258_400


def seed(home: Home, fake: FakeOpenAI) -> None:
    """``~/.codex/config.toml``: the fake as a custom model provider (Codex's documented
    ``model_providers`` table), the project trusted (no "Trust this folder?")."""
    (home.user / ".codex").mkdir()
    (home.user / ".codex" / "config.toml").write_text(f'''model = "gpt-fake-1"
model_provider = "fake"

[model_providers.fake]
name = "Fake OpenAI"
base_url = "{fake.base_url}"
env_key = "{KEY_ENV}"
wire_api = "responses"

[projects."{home.work}"]
trust_level = "trusted"
''')


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as f:
        yield f


@pytest.fixture
def home(tmp_path: Path, fake: FakeOpenAI) -> Iterator[Home]:
    h = Home(tmp_path, env={KEY_ENV: "sk-fake-codex"}, apis=(fake.api,))
    seed(h, fake)
    h.start()
    yield h
    h.close()


def codex() -> str:
    return str(cli("codex"))


def thread_of(req: Request) -> str:
    return str(codex_metadata(req).get("thread_id") or req.headers.get("thread-id"))


def served(fake: FakeOpenAI) -> dict[str, int]:
    """What the fake served, in tether's terms (OpenAI's input includes the cached part)."""
    t = fake.served()
    return {"input_tokens": t.input - t.cached, "cache_read_tokens": t.cached,
            "output_tokens": t.output, "cache_creation_tokens": 0}


def crashed(home: Home, lineage: str) -> list[dict[str, Any]]:
    return [e for e in home.events(lineage)
            if e["type"] == "agent.heartbeat" and e.get("state") == "CRASHED"]


def attempt_argv(home: Home, lineage: str) -> list[str]:
    rec = home.lineage(lineage)
    return list(home.daemon.client().exec_get(rec["exec"]).spec.argv)


# ---------------------------------------------------------------------------- finding 7
def test_codex_installed_under_a_hidden_root_runs_in_the_default_sandbox(
        home: Home, tmp_path: Path) -> None:
    """Finding 7 (issue 20): "Missing optional dependency @openai/codex-linux-x64": the
    node wrapper's platform package (its Rust binary) was not bound into the sandbox. An
    install under a directory the sandbox hides (here /tmp; a home alike) is a copy of the
    pinned one (hard links), run by path."""
    src = AGENTS_DIR / "npm" / "node_modules"
    cli("codex")
    dst = tmp_path / "agents" / "npm" / "node_modules"
    (dst / ".bin").mkdir(parents=True)
    (dst / "@openai").mkdir()
    for pkg in (src / "@openai").iterdir():  # @openai/codex and its platform package
        subprocess.run(["cp", "-al", str(pkg), str(dst / "@openai")], check=True)
    os.symlink("../@openai/codex/bin/codex.js", dst / ".bin" / "codex")
    r = home.tether("run", "--", str(dst / ".bin" / "codex"), "--version", check=False)
    assert (r.returncode, r.stdout.strip()) == (0, f"codex-cli {codex_version()}"), r.stderr
    assert "Missing optional dependency" not in r.stderr
    shutil.rmtree(tmp_path / "agents")


def codex_version() -> str:
    return subprocess.run([codex(), "--version"], capture_output=True, text=True,
                          timeout=60).stdout.split()[-1]


# ---------------------------------------------------------------------------- egress
def test_codex_reaches_its_model_api_only_because_its_policy_allows_it(
        home: Home, fake: FakeOpenAI) -> None:
    """Issue 21: Codex in the default sandbox has no way out but tether's egress proxy,
    and reaches the fake API (``fake-openai.test``, which only the proxy resolves, to the
    host's loopback) only because every test here allows that name and port. The same
    ``codex exec`` without the entry: its requests are denied (``agent.egress_denied``
    with the host, counted in ``lineage inspect``), the fake gets none, Codex fails."""
    _, lin = home.run(codex(), "exec", *EXEC_FLAGS, "say hi", allowed=False,
                      flags=("--max-revivals", "0"))
    home.wait_lineage(lin, lambda r: r["status"] == "FAILED", timeout=120,
                      what="codex gives up: no way to its API")
    # The daemon reads the proxy's denial log every second: it may lag the exit.
    rec = home.wait_lineage(lin, lambda r: (HOST, fake.port) in [
        (h["host"], h["port"]) for h in r["egress"]["denied_hosts"]], timeout=30,
        what="its denials journaled")
    assert fake.requests == [], fake.log()
    assert fake.api.entry not in rec["egress"]["allow"]
    denied = [e["data"] for e in home.events(lin) if e["type"] == "agent.egress_denied"]
    assert (HOST, fake.port) in [(d["host"], d["port"]) for d in denied], denied

    _, lin = home.run(codex(), "exec", *EXEC_FLAGS, "say hi")  # allowed, as everywhere
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", what="codex exec ends")
    assert rec["egress"]["network"] == "proxy" and fake.api.entry in rec["egress"]["allow"]
    assert HOST not in [h["host"] for h in rec["egress"]["denied_hosts"]]
    (req,) = fake.turns()
    assert req.headers["host"] == fake.api.entry  # by its name, through the proxy


# ---------------------------------------------------------------------------- headless
def test_codex_exec_turn_tokens_context_and_session(home: Home, fake: FakeOpenAI) -> None:
    """``tether run -- codex exec …`` in the default sandbox: its hooks report the thread
    at its start and one turn of two API calls (a tool call, then the answer), whose
    tokens are exactly what the fake served; the context % is of the window Codex uses."""
    fake.answer(Reply(tool="exec_command", arguments={"cmd": "echo fixed > fix.txt"},
                      tokens=Tokens(11_643, 816, cached=5_376)),
                Reply(text="Fixed: fix.txt says fixed.", tokens=Tokens(12_459, 120,
                                                                       cached=11_000)))
    _, lin = home.run(codex(), "exec", *EXEC_FLAGS, "fix the file")
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", what="codex exec ends")
    assert (home.work / "fix.txt").read_text() == "fixed\n"  # its tool ran, sandboxed
    (req, _) = fake.turns()
    assert rec["provider_session_id"] == thread_of(req)
    assert (rec["turns"], rec["exit_reason"], rec["attempt"]) == (1, "finished", 1)
    assert rec["usage"] == served(fake) == {"input_tokens": 6_267 + 1_459,
                                            "cache_read_tokens": 16_376,
                                            "output_tokens": 936, "cache_creation_tokens": 0}
    assert rec["context_pct"] == pytest.approx(100 * (12_459 + 120) / FALLBACK_WINDOW)
    kinds = [e["type"] for e in home.events(lin)]
    assert kinds.count("agent.session") == 1 and kinds.count("agent.turn") == 1
    session = next(e for e in home.events(lin) if e["type"] == "agent.session")
    assert session["data"]["source"] == "startup"  # learned at its start, not its end


def test_codex_exec_killed_mid_turn_is_resumed_headless(home: Home, fake: FakeOpenAI) -> None:
    """Finding 2 (issue 20): a ``codex exec`` killed mid-turn was resumed as an interactive
    ``codex resume --last`` without a terminal ("stdin is not a terminal", FAILED). It is
    resumed headless — ``codex exec … resume ID PROMPT`` — on its own thread, with a
    continuation prompt, and finishes."""
    fake.answer(Reply(text="never delivered", delay=120, tokens=Tokens(5_000, 50)),
                Reply(text="Done after the interruption.", tokens=Tokens(5_200, 40,
                                                                         cached=4_000)))
    _, lin = home.run(codex(), "exec", *EXEC_FLAGS, "fix the flaky test")
    (first,) = fake.wait_turns(1)  # the turn is in progress: the fake holds its answer
    home.wait_lineage(lin, lambda r: r["provider_session_id"] is not None,
                      what="the thread id, learned at its start")
    home.kill9_agent(lin)
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", timeout=90,
                            what="revived headless and finished")
    argv = attempt_argv(home, lin)
    thread = thread_of(first)
    assert argv[argv.index("exec"):argv.index("exec") + 5] == [
        "exec", *EXEC_FLAGS, "resume", thread]
    assert "--last" not in argv
    _, resumed = fake.turns()
    assert thread_of(resumed) == thread == rec["provider_session_id"]
    prompt = resumed.last_user_text()
    assert "interrupted" in prompt and "fix the flaky test" in prompt
    assert "fix the flaky test" in str(resumed.body)  # the thread's own history
    assert (rec["attempt"], rec["revivals"], rec["turns"], rec["exit_reason"]) == (
        2, 1, 1, "finished")
    assert rec["usage"] == served(fake) == {"input_tokens": 1_200, "cache_read_tokens": 4_000,
                                            "output_tokens": 40, "cache_creation_tokens": 0}


RESET_IN = 2 * 3600
LIMITS = {
    # ChatGPT sign-in (subscriber): "You\u2019ve hit your usage limit … try again at H:MM PM".
    "subscriber": {"error": {"type": "usage_limit_reached", "plan_type": "plus",
                             "message": "The usage limit has been reached"}},
    # API key: "Quota exceeded. Check your plan and billing details." (no reset time).
    "api-key": {"error": {"type": "insufficient_quota", "code": "insufficient_quota",
                          "message": "You exceeded your current quota, please check your "
                                     "plan and billing details."}},
}


@pytest.mark.parametrize("form", sorted(LIMITS))
def test_codex_exec_at_its_usage_limit_waits_then_resumes(home: Home, fake: FakeOpenAI,
                                                          form: str) -> None:
    """The API refuses with a 429 — the subscriber form (``usage_limit_reached``,
    ``resets_at`` in 2 hours) or the API key's (``insufficient_quota``) —, Codex says so and
    exits 1. A usage limit, not a crash: WAITING_LIMIT until the reset time it gave (else
    tether's 30 minutes), on the daemon's clock (moved here), no revival spent; then resumed
    headless on its thread, and it finishes."""
    reset = int(time.time()) + RESET_IN
    body = {"error": {**LIMITS[form]["error"], **({"resets_at": reset} if form == "subscriber"
                                                  else {})}}
    limit = Reply(status=429, error=body)
    fake.answer(*[limit] * 6)  # whatever Codex retries
    _, lin = home.run(codex(), "exec", *EXEC_FLAGS, "refactor the parser")
    rec = home.wait_lineage(lin, lambda r: r["status"] == "WAITING_LIMIT",
                            what="waiting for its usage limit's reset")
    assert rec["exit_reason"] == "usage_limited" and rec["revivals"] == 0
    if form == "subscriber":  # its "try again at H:MM PM": the reset, to the minute
        assert reset - 61 <= rec["revive_at"] <= reset, rec
    else:  # none given: tether's 30 minutes
        assert abs(rec["revive_at"] - (time.time() + 30 * 60)) < 60, rec
    wait = RESET_IN if form == "subscriber" else 30 * 60
    fake.forget_script()  # the refusals Codex did not ask for
    fake.answer(Reply(text="Refactored.", tokens=Tokens(3_000, 70, cached=1_000)))
    home.move_clock(wait + 120)
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", timeout=90,
                            what="resumed after the reset, finished")
    assert (rec["attempt"], rec["revivals"], rec["limit_waits"], rec["turns"]) == (2, 0, 1, 1)
    argv = attempt_argv(home, lin)
    assert argv[argv.index("resume"):argv.index("resume") + 2] == [
        "resume", rec["provider_session_id"]]
    assert rec["usage"] == served(fake) == {"input_tokens": 2_000, "cache_read_tokens": 1_000,
                                            "output_tokens": 70, "cache_creation_tokens": 0}


# ---------------------------------------------------------------------------- interactive
def test_codex_killed_before_its_first_prompt_starts_afresh_not_on_another_thread(
        home: Home, fake: FakeOpenAI) -> None:
    """Finding 3 (issue 20): a Codex killed before its first turn was revived by ``codex
    resume --last`` onto ANOTHER, live lineage's thread. With no thread yet there is no
    conversation: the revival starts Codex afresh, and its first prompt opens a thread of
    its own."""
    fake.answer(Reply(text="Other lineage's answer.", tokens=Tokens(300, 10)))
    other_x, other = home.run(codex(), *TUI_FLAGS, tty=True)
    s_other = home.screen(other_x)
    s_other.wait("Ask Codex")
    s_other.type("the other lineage's task")
    s_other.wait("Other lineage's answer.")
    other_rec = home.wait_lineage(other, lambda r: r["turns"] == 1, what="the other's turn")
    x, lin = home.run(codex(), *TUI_FLAGS, tty=True)
    home.screen(x).wait("Ask Codex")
    assert home.lineage(lin)["provider_session_id"] is None  # no prompt, no thread yet
    home.kill9_agent(lin)
    rec = home.wait_lineage(lin, lambda r: r["attempt"] == 2 and r["status"] == "ACTIVE"
                            and r["exec"] != x, what="revived")
    argv = attempt_argv(home, lin)
    assert "resume" not in argv and "--last" not in argv  # afresh
    fake.answer(Reply(text="A fresh answer.", tokens=Tokens(400, 20)))
    s = home.screen(rec["exec"])
    s.wait("Ask Codex")
    s.type("my own task")
    s.wait("A fresh answer.")
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 1, what="its first turn")
    mine = fake.turns()[-1]
    assert mine.last_user_text() == "my own task"
    assert "the other lineage's task" not in str(mine.body)
    assert rec["provider_session_id"] == thread_of(mine) != other_rec["provider_session_id"]
    assert home.lineage(other)["provider_session_id"] == other_rec["provider_session_id"]


def test_codex_interactive_turns_idle_clear_revival_and_fencing(home: Home,
                                                                fake: FakeOpenAI) -> None:
    """An interactive Codex: one turn per prompt (its task-title request — another thread
    whose ``notify`` also said "turn complete" — is neither a turn nor the lineage's
    session: finding 6), tokens as served, idle longer than ``--crashed-after`` at its
    prompt without being killed or shown CRASHED, ``/clear`` forking the lineage onto a new
    thread, kill -9 → ``codex resume ID`` of that thread, DYING fencing Codex's real tool
    call (``PreToolUse`` denial), and the lineage reaped at DEAD (``out_of_context``)."""
    fake.answer(Reply(text="Hello from the model.", tokens=Tokens(766, 25)))
    x, lin = home.run(codex(), *TUI_FLAGS, tty=True,
                      flags=("--stale-after", "1", "--crashed-after", "3"))
    s = home.screen(x)
    s.wait("Ask Codex")
    s.type("say hello")
    s.wait("Hello from the model.")
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 1, what="turn 1")
    (turn1,) = fake.turns()
    first = rec["provider_session_id"]
    assert first == thread_of(turn1)
    # codex-cli 0.171.0 asks for a task title on a thread of its own: not the lineage's.
    titles = [r for r in fake.requests if r.side]
    assert titles or "codex=0.171.0" not in versions(), fake.log()
    assert all(thread_of(r) != first for r in titles), fake.log()
    assert rec["usage"] == served(fake)
    time.sleep(6)  # idle at its prompt, past --crashed-after 3
    rec = home.lineage(lin)
    assert (rec["turns"], rec["attempt"], rec["exec"], rec["status"]) == (1, 1, x, "ACTIVE")
    assert crashed(home, lin) == [] and rec["heartbeat"] == "IDLE"

    fake.answer(Reply(text="After the clear.", tokens=Tokens(240_000, 25, cached=200_000)))
    s.type("/clear")
    s.wait("Ask Codex")
    s.type("start over")
    s.wait("After the clear.")
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 2, what="turn 2, after /clear")
    assert rec["provider_session_id"] == thread_of(fake.turns()[-1]) != first
    fork = [e["data"] for e in home.events(lin) if e["type"] == "agent.session"][-1]
    assert (fork["from"], fork["to"], fork["source"], fork["fork"]) == (
        first, rec["provider_session_id"], "clear", True)
    assert rec["lifecycle"] == "DYING"  # 240,025 of Codex's 258,400: past 90 %

    home.kill9_agent(lin)
    rec = home.wait_lineage(lin, lambda r: r["attempt"] == 2 and r["status"] == "ACTIVE"
                            and r["exec"] != x, what="revived")
    argv = attempt_argv(home, lin)
    assert argv[argv.index("resume"):argv.index("resume") + 2] == [
        "resume", rec["provider_session_id"]]
    s2 = home.screen(rec["exec"])
    s2.wait("After the clear.")  # the thread it was on, resumed (not the one before /clear)
    assert "Hello from the model." not in s2.text()
    # DYING: one finalization call is allowed, the next is denied.
    fake.answer(Reply(tool="exec_command", arguments={"cmd": "echo final > final.txt"},
                      tokens=Tokens(241_000, 30)),
                Reply(tool="exec_command", arguments={"cmd": "echo late > late.txt"},
                      tokens=Tokens(242_000, 30)),
                Reply(text="Stopped as told.", tokens=Tokens(243_000, 20)))
    s2.wait("Ask Codex")
    s2.type("finish up")
    s2.wait("Stopped as told.")
    rec = home.wait_lineage(lin, lambda r: r["status"] == "FINISHED", what="reaped at DEAD")
    assert (rec["turns"], rec["lifecycle"], rec["exit_reason"]) == (3, "DEAD", "out_of_context")
    assert (home.work / "final.txt").exists() and not (home.work / "late.txt").exists()
    fenced = [e for e in home.events(lin) if e["type"] == "agent.fenced"]
    assert len(fenced) == 1 and fenced[0]["data"]["tool"] == "Bash"
    after_denial = fake.turns()[-1]
    assert "finalization call was already used" in str(after_denial.body)  # the reason
    assert rec["usage"] == served(fake)
    assert thread_of(after_denial) == rec["provider_session_id"]


#: gpt-fake-1's price, as a user prices a model tether's table does not know
#: (``<home>/prices.toml``, dollars per million tokens).
PRICES = """[[price]]
model = "gpt-fake-1"
since = 2025-01-01
input = 10.0
output = 40.0
cache_read = 1.0
"""


def test_codex_budget_pause_denies_its_real_tool_call(home: Home, fake: FakeOpenAI) -> None:
    """A lineage budget (``--budget 0.05``, policy pause) reached by a turn's tokens, priced
    by ``<home>/prices.toml``: Codex's next real tool call is denied by its ``PreToolUse``
    hook, naming the budget, so the command never runs and Codex tells the model; the
    lineage goes on (paused, not stopped). ``tether cost`` prices the turns as served."""
    (home.daemon.home / "prices.toml").write_text(PRICES)
    fake.answer(Reply(text="Read it all.", tokens=Tokens(20_000, 100, cached=4_000)))
    x, lin = home.run(codex(), *TUI_FLAGS, tty=True, flags=("--budget", "0.05"))
    s = home.screen(x)
    s.wait("Ask Codex")
    s.type("read everything")
    s.wait("Read it all.")
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 1, what="turn 1")
    # (16,000 * $10 + 4,000 * $1 + 100 * $40) per million: $0.168, past $0.05.
    assert [e["type"] for e in home.events(lin) if e["type"] == "agent.budget"] == [
        "agent.budget"]
    fake.answer(Reply(tool="exec_command", arguments={"cmd": "echo x > out.txt"},
                      tokens=Tokens(21_000, 30, cached=20_000)),
                Reply(text="The budget stopped me.", tokens=Tokens(21_500, 20, cached=21_000)))
    s.type("now write out.txt")
    s.wait("The budget stopped me.")
    rec = home.wait_lineage(lin, lambda r: r["turns"] == 2, what="turn 2")
    assert not (home.work / "out.txt").exists()  # the real tool call, denied
    (fenced,) = [e for e in home.events(lin) if e["type"] == "agent.fenced"]
    assert fenced["data"]["budget"] and fenced["data"]["tool"] == "Bash"
    assert fenced["reason"].startswith("budget: "), fenced
    assert "budget" in str(fake.turns()[-1].body)  # Codex told the model why
    assert (rec["status"], rec["exec"]) == ("ACTIVE", x) and rec["usage"] == served(fake)
    report = json.loads(home.tether("cost", "--by", "lineage", "--json").stdout)
    (row,) = [r for r in report["rows"] if r["key"] == lin]
    u = rec["usage"]
    assert row["cost_usd"] == pytest.approx(
        (u["input_tokens"] * 10 + u["cache_read_tokens"] * 1 + u["output_tokens"] * 40) / 1e6,
        abs=1e-6)
