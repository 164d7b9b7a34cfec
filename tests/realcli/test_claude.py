"""The real Claude Code (tests/realcli: pinned by .ci/agents.sh) under the real daemon, in
the default sandbox (bwrap), for every claim of the README's provider table.

Only the model API is faked: :mod:`tests.realcli.fake_anthropic` on 127.0.0.1, reached by
its name through tether's egress proxy (:mod:`tests.realcli.net`), written
from Anthropic's API documentation, answers each request as the test scripts it (text or
a tool call, with chosen token counts) and records what it served, so tether's counts are
compared with it exactly. Interactive sessions are driven through their real terminal
(the attach protocol, as ``tether attach``). Thresholds are short by flags and the usage
limit's reset is reached by the daemon's test clock, not by sleeping.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.realcli.claude_env import ClaudeUnderTether
from tests.realcli.fake_anthropic import HOST, FakeAnthropic, Reply, Usage, rate_limited
from tether.runtime import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe().available,
                                reason="the default sandbox (bwrap) is not available here")

MODEL_WINDOW = 1_000_000  # Claude Code 2.1.332's default model, claude-opus-5-5


def ctx_pct(u: Usage, window: int = MODEL_WINDOW) -> float:
    return 100.0 * (u.input + u.cache_read + u.cache_creation + u.output) / window


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def ct(tmp_path: Path, api: FakeAnthropic) -> Iterator[ClaudeUnderTether]:
    t = ClaudeUnderTether(tmp_path, api)
    yield t
    t.close()


def test_claude_reaches_its_model_api_only_because_its_policy_allows_it(
        ct: ClaudeUnderTether, api: FakeAnthropic) -> None:
    """Issue 21: Claude Code in the default sandbox has no way out but tether's egress
    proxy, and reaches the fake API (``fake-anthropic.test``, which only the proxy
    resolves, to the host's loopback) only because every test here allows that name and
    port. The same ``claude -p`` without the entry: its requests are denied
    (``agent.egress_denied`` with the host, counted in the lineage's ``egress``), the
    fake gets none, Claude Code fails."""
    lin = ct.start("-p", "say hi", allowed=False, max_revivals=0)
    rec = ct.wait(lin.id, "claude gives up: no way to its API",
                  lambda r: r.status == "FAILED", timeout=120)
    assert api.requests == []
    assert rec.egress is not None and api.api.entry not in rec.egress.allow
    # The daemon reads the proxy's denial log every POLL seconds: journaled soon after.
    wait_for(lambda: (HOST, api.api.port) in [
        (e.data["host"], e.data["port"]) for e in ct.events(lin.id, "agent.egress_denied")],
        30, what="its denials journaled")
    rec = ct.get(lin.id)
    assert rec.egress is not None
    assert (HOST, api.api.port) in [(h.host, h.port) for h in rec.egress.denied_hosts]

    api.answer("say hi", Reply(text="Hi.", usage=Usage(10, 2)))
    lin = ct.start("-p", "say hi")  # allowed, as everywhere
    rec = ct.wait(lin.id, "claude -p ends", lambda r: r.status == "FINISHED", timeout=90)
    assert rec.egress is not None and rec.egress.network == "proxy"
    assert api.api.entry in rec.egress.allow
    assert HOST not in [h.host for h in rec.egress.denied_hosts]
    assert [s.usage for s in api.main_calls()] == [Usage(10, 2)]
    assert rec.usage == Usage(10, 2).as_tether()


def test_headless_hung_and_killed_mid_turn_resumes_headless_counting_every_call_once(
        ct: ClaudeUnderTether, api: FakeAnthropic) -> None:
    """`claude -p`: hooks, the session id, a hang in the middle of a turn (its API call
    never answers) killed as hung, a kill -9 in the middle of the next: each revival is
    `claude -p --resume ID -- <continuation>` (finding 2), and the tokens tether counts
    are exactly those of the calls the server answered (finding 4)."""
    p = ct.project
    u1, u2, u3 = Usage(1200, 40, 3000, 500), Usage(2100, 60, 0, 4200), Usage(900, 25, 100, 4300)
    api.answer("write a.txt", Reply(text="Writing a.", tool="Write", usage=u1,
                                    tool_input={"file_path": str(p / "a.txt"),
                                                "content": "a\n"}),
               Reply(hold=True))
    api.answer("(hung", Reply(text="Writing b.", tool="Write", usage=u2,
                              tool_input={"file_path": str(p / "b.txt"), "content": "b\n"}),
               Reply(hold=True))
    api.answer("(crashed", Reply(text="Both written.", usage=u3))
    # -p is silent while it starts: on a machine loaded by the suite and stress-ng it took
    # over 10 s to make its first call, was killed as hung before it had a conversation and
    # so (rightly) started afresh, not resumed. The hang this test means is the held call.
    lin = ct.start("-p", "write a.txt and b.txt", stale_after=2.0, crashed_after=20.0)
    rec = ct.wait(lin.id, "revived after the hang",
                  lambda r: r.attempt == 2 and r.status == "ACTIVE")
    assert rec.turns == 0 and rec.revivals == 1
    hung = [e for e in ct.events(lin.id, "lineage.state") if e.state == "ORPHANED"]
    assert hung and hung[0].data["exit_reason"] == "hung"
    second = ct.argv(rec.exec or "")
    sid = rec.provider_session_id
    assert sid and second[1:4] == ["-p", "--resume", sid], second
    assert second[-2] == "--" and second[-1].startswith("[tether] This session was "
                                                        "interrupted (hung")
    api.wait_received(4)  # attempt 2 wrote b.txt and waits on its next call: kill -9 it
    ct.kill9(lin.id)
    rec = ct.wait(lin.id, "finished", lambda r: r.status == "FINISHED", timeout=90)
    assert (rec.attempt, rec.revivals, rec.exit_reason) == (3, 2, "finished")
    assert (p / "a.txt").read_text() == "a\n" and (p / "b.txt").read_text() == "b\n"
    # One user turn (the continuations carried it on); every call the server answered.
    assert rec.turns == 1
    served = api.main_calls()
    assert [s.usage for s in served] == [u1, u2, u3]
    assert rec.usage == (u1 + u2 + u3).as_tether()
    assert {s.session for s in served} == {sid}  # the session id tether learned
    assert rec.context_pct == pytest.approx(ctx_pct(u3))
    assert rec.lifecycle == "HEALTHY"


def test_interactive_turns_tokens_window_idle_clear_and_revivals(
        tmp_path: Path, api: FakeAnthropic) -> None:
    """An interactive session through its terminal: hooks, one turn per prompt, tokens
    equal to what the server served (a tool call's two API calls included), the context
    % against the window the CLI reports it uses (here 500k: `CLAUDE_CODE_MAX_CONTEXT_
    TOKENS`, which tether's model rule does not know), idle at its prompt for longer than
    --crashed-after and not killed (finding 1), kill -9 at its prompt resumed with
    `--resume` and no prompt, `/clear` forking the lineage, and a kill -9 before the
    cleared session's first prompt starting afresh (finding 2)."""
    ct = ClaudeUnderTether(tmp_path, api)
    ct.agent_env.update(DISABLE_COMPACT="1", CLAUDE_CODE_MAX_CONTEXT_TOKENS="500000")
    try:
        p = ct.project
        u1, u2, u3 = (Usage(3000, 80, 2000, 10000), Usage(150, 30, 500, 14000),
                      Usage(80000, 20, 0, 20000))
        api.answer("turn one", Reply(text="Writing.", tool="Write", usage=u1,
                                     tool_input={"file_path": str(p / "one.txt"),
                                                 "content": "1\n"}),
                   Reply(text="One done.", usage=u2))
        api.answer("turn two", Reply(text="Two done.", usage=u3))
        lin = ct.start(tty=True, stale_after=1.0, crashed_after=3.0)
        t = ct.terminal(lin.id)
        first = ct.get(lin.id)
        t.type("turn one")
        rec = ct.wait(lin.id, "turn 1", lambda r: r.turns == 1)
        assert rec.usage == (u1 + u2).as_tether() and (p / "one.txt").read_text() == "1\n"
        assert rec.context_pct == pytest.approx(ctx_pct(u2, 500_000))
        assert rec.heartbeat == "IDLE" and rec.waiting_since is not None
        import time

        time.sleep(7)  # more than twice --crashed-after, at its prompt
        rec = ct.get(lin.id)
        assert (rec.status, rec.attempt, rec.heartbeat) == ("ACTIVE", 1, "IDLE")
        assert not [e for e in ct.c.events_list(limit=10000).events
                    if e.type == "exec.state" and e.state == "CANCELLED"]
        t.type("turn two")
        rec = ct.wait(lin.id, "turn 2", lambda r: r.turns == 2)
        assert rec.usage == (u1 + u2 + u3).as_tether() == api.total().as_tether()
        assert rec.context_pct == pytest.approx(ctx_pct(u3, 500_000))  # 20%, not 10%
        assert {s.session for s in api.main_calls()} == {first.provider_session_id}
        starts = ct.events(lin.id, "agent.turn_start")
        assert len(starts) == 2  # once per prompt
        t.close()
        # kill -9 at its prompt: resumed, waiting for its user again (no prompt given).
        ct.kill9(lin.id)
        rec = ct.wait(lin.id, "revived", lambda r: r.attempt == 2 and r.status == "ACTIVE")
        argv = ct.argv(rec.exec or "")
        assert argv[1:3] == ["--resume", first.provider_session_id] and "--" not in argv
        t = ct.terminal(lin.id)
        t.type("/clear")
        rec = ct.wait(lin.id, "the fork", lambda r: r.provider_session_id
                      != first.provider_session_id)
        fork = ct.events(lin.id, "agent.session")[-1]
        assert fork.data["source"] == "clear" and fork.data["fork"] is True
        t.close()
        ct.kill9(lin.id)  # the cleared session has no conversation: started afresh
        rec = ct.wait(lin.id, "started afresh", lambda r: r.attempt == 3
                      and r.status == "ACTIVE")
        assert "--resume" not in ct.argv(rec.exec or "")
        assert rec.turns == 2 and rec.revivals == 2
        assert rec.usage == api.total().as_tether()  # the title requests are not the session's
    finally:
        ct.close()


def test_interactive_killed_mid_turn_carries_on_then_dying_fences_its_tool_call(
        ct: ClaudeUnderTether, api: FakeAnthropic) -> None:
    """kill -9 before the first prompt: started afresh (finding 2). kill -9 in the middle
    of an interactive turn: resumed with `--resume` and a continuation prompt, which
    carries the turn on. Its context then passes --dying-pct:
    the next turn's first tool call is the finalization call, the second is denied
    through the PreToolUse hook (the CLI sends the model the denial), the turn's end
    makes it DEAD and it is reaped with exit reason `out_of_context` (finding 8)."""
    p = ct.project
    uw, ud = Usage(2000, 50, 1000, 0), Usage(500000, 100, 0, 100000)  # 60% of 1M
    uf1, uf2, uf3 = Usage(600, 20, 0, 600000), Usage(700, 20, 0, 600100), Usage(800, 20, 0, 0)
    api.answer("start working", Reply(text="Writing w.", tool="Write", usage=uw,
                                      tool_input={"file_path": str(p / "w.txt"),
                                                  "content": "w\n"}),
               Reply(hold=True))
    api.answer("(crashed", Reply(text="Work done.", usage=ud))
    api.answer("finalize", Reply(text="Handoff.", tool="Write", usage=uf1,
                                 tool_input={"file_path": str(p / "handoff.md"),
                                             "content": "notes\n"}),
               Reply(text="More.", tool="Write", usage=uf2,
                     tool_input={"file_path": str(p / "extra.txt"), "content": "x\n"}),
               Reply(text="Stopping.", usage=uf3))
    lin = ct.start(tty=True, aging_pct=40.0, dying_pct=50.0)
    fresh = ct.get(lin.id)
    ct.wait(lin.id, "its session", lambda r: r.provider_session_id is not None)
    ct.kill9(lin.id)  # before its first prompt: nothing to resume ("No conversation found")
    rec = ct.wait(lin.id, "started afresh", lambda r: r.attempt == 2 and r.status == "ACTIVE")
    assert rec.exec != fresh.exec and "--resume" not in ct.argv(rec.exec or "")
    t = ct.terminal(lin.id)
    t.type("start working")
    api.wait_received(2)  # w.txt written, its next call in flight: kill -9
    # (once the CLI has written the prompt down: under load its transcript lags its calls)
    ct.wait_transcript_prompt(ct.get(lin.id).provider_session_id or "")
    t.close()
    ct.kill9(lin.id)
    rec = ct.wait(lin.id, "carried on", lambda r: r.turns == 1, timeout=90)
    assert (rec.attempt, rec.revivals, rec.lifecycle) == (3, 2, "DYING")
    argv = ct.argv(rec.exec or "")
    assert argv[1:3] == ["--resume", rec.provider_session_id]
    assert argv[-2] == "--" and argv[-1].startswith("[tether] This session was interrupted "
                                                    "(crashed: killed by SIGKILL)")
    assert rec.usage == (uw + ud).as_tether()
    t = ct.terminal(lin.id)
    t.type("finalize")
    rec = ct.wait(lin.id, "reaped", lambda r: r.status == "FINISHED", timeout=60)
    assert (rec.lifecycle, rec.exit_reason, rec.turns) == ("DEAD", "out_of_context", 2)
    assert rec.reason == "context exhausted (DEAD); the session was reaped"
    assert (p / "handoff.md").exists() and not (p / "extra.txt").exists()
    denied = api.main_calls("finalize")[2].tool_results
    assert denied and denied[0].get("is_error") and "fenced" in str(denied[0]["content"])
    assert [e.state for e in ct.events(lin.id, "agent.lifecycle")] == ["DYING", "DRAINING",
                                                                      "DEAD"]
    assert len(ct.events(lin.id, "agent.fenced")) == 1
    assert rec.usage == (uw + ud + uf1 + uf2 + uf3).as_tether() == api.total().as_tether()


def test_budget_pause_denies_the_real_tool_call(ct: ClaudeUnderTether,
                                                 api: FakeAnthropic) -> None:
    """A lineage budget (policy pause) reached at a turn's end: the next tool call is
    denied through the PreToolUse hook, with the budget's reason."""
    p = ct.project
    api.answer("expensive", Reply(text="Thought hard.", usage=Usage(40000, 500)))  # ~$0.13
    api.answer("now a tool", Reply(text="Writing.", tool="Write", usage=Usage(100, 10),
                                   tool_input={"file_path": str(p / "paid.txt"),
                                               "content": "$\n"}),
               Reply(text="It was denied.", usage=Usage(120, 10)))
    lin = ct.start("--model", "claude-sonnet-4-5", tty=True, budget_usd=0.05)
    t = ct.terminal(lin.id)
    t.type("expensive")
    ct.wait(lin.id, "turn 1", lambda r: r.turns == 1)
    wait_for(lambda: ct.events(lin.id, "agent.budget"), what="the budget reached")
    assert [e.data["scope"] for e in ct.events(lin.id, "agent.budget")] == ["lineage"]
    t.type("now a tool")
    rec = ct.wait(lin.id, "turn 2", lambda r: r.turns == 2)
    assert not (p / "paid.txt").exists()
    denied = api.main_calls("now a tool")[1].tool_results
    assert denied and "budget:" in str(denied[0]["content"])
    fenced = ct.events(lin.id, "agent.fenced")
    assert len(fenced) == 1 and fenced[0].data["budget"] is True
    assert rec.status == "ACTIVE" and rec.usage == api.total().as_tether()
    t.close()


def test_headless_subscription_limit_waits_for_its_reset_without_a_revival(
        tmp_path: Path, api: FakeAnthropic) -> None:
    """A subscription's usage limit as Claude Code shows it ("You've hit your 5-hour
    limit · resets 11:39pm (UTC)", from the server's anthropic-ratelimit-unified-*
    headers): WAITING_LIMIT until that time, then resumed headless; no revival spent
    (finding 5). The daemon's test clock is moved past the reset."""
    ct = ClaudeUnderTether(tmp_path, api, subscription=True)
    try:
        api.failing = rate_limited(reset_in=2 * 3600, subscriber=True)
        lin = ct.start("-p", "limited task")
        rec = ct.wait(lin.id, "waiting for the reset", lambda r: r.status == "WAITING_LIMIT")
        assert (rec.exit_reason, rec.revivals, rec.limit_waits) == ("usage_limited", 0, 1)
        assert "You've hit your 5-hour limit · resets" in (rec.reason or "")
        import time

        assert rec.revive_at is not None and abs(rec.revive_at - (time.time() + 7200)) < 120
        api.failing = None
        done = Reply(text="Done after the reset.", usage=Usage(500, 9))
        api.answer("(usage limited", done)
        api.answer("limited task", done)
        ct.move_clock(rec.revive_at + 5)
        rec = ct.wait(lin.id, "finished", lambda r: r.status == "FINISHED", timeout=90)
        assert (rec.exit_reason, rec.attempt, rec.revivals, rec.turns) == (
            "finished", 2, 0, 1)
        # Resumed headless, if the CLI had written its session down before it exited
        # (it writes lazily); else started afresh with its own prompt ("No conversation
        # found with session ID" otherwise).
        argv = ct.argv(rec.exec or "")
        assert (argv[1:3] == ["-p", "--resume"] and argv[-2] == "--") or (
            "--resume" not in argv and argv[-2:] == ["-p", "limited task"]), argv
        assert rec.usage == api.total().as_tether() == Usage(500, 9).as_tether()
    finally:
        ct.close()


def test_interactive_api_key_limit_and_stop_failure_wait_then_carry_on(
        ct: ClaudeUnderTether, api: FakeAnthropic) -> None:
    """An API key's 429 once the CLI's retries are spent ("API Error: Request rejected
    (429)"): its StopFailure hook (`error: rate_limit`) makes tether stop the session
    that would sit at its prompt; no reset time is given, so it waits 30 minutes (the
    test clock), then the session is asked to carry the turn on: resumed, or, when the
    CLI had not yet written the session down (it writes lazily: "No conversation found
    with session ID"), started afresh with the continuation as its first prompt."""
    api.failing = rate_limited(reset_in=600)
    lin = ct.start(tty=True)
    t = ct.terminal(lin.id)
    first = ct.get(lin.id).exec
    t.type("limited interactive")
    rec = ct.wait(lin.id, "waiting for the reset", lambda r: r.status == "WAITING_LIMIT")
    t.close()
    assert (rec.exit_reason, rec.revivals) == ("usage_limited", 0)
    assert "usage limit: API Error: Request rejected (429)" in (rec.reason or "")
    import time

    assert rec.revive_at is not None and abs(rec.revive_at - (time.time() + 1800)) < 60
    stop = [e for e in ct.c.events_list(limit=10000).events
            if e.type == "exec.state" and e.exec == first and e.state == "CANCELLED"]
    assert stop and (stop[0].reason or "").startswith("usage limit: ")
    api.failing = None
    api.answer("(usage limited", Reply(text="Carried on.", usage=Usage(700, 11)))
    ct.move_clock(rec.revive_at + 5)
    rec = ct.wait(lin.id, "carried on", lambda r: r.turns == 1, timeout=90)
    assert (rec.attempt, rec.revivals, rec.limit_waits) == (2, 0, 1)
    assert ct.argv(rec.exec or "")[-1].startswith("[tether] This session was interrupted "
                                                  "(usage limited")
    assert rec.usage == api.total().as_tether()
