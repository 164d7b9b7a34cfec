"""The exit-reason rules and reset-time parsing (tether.agent.exits): pure."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from tether.agent.exits import (
    DEFAULT_LIMIT_WAIT,
    ExitFacts,
    ExitReason,
    classify,
    reset_time,
)
from tether.agent.providers import get

NOW = datetime(2026, 3, 2, 10, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp()


def rules(name: str):  # type: ignore[no-untyped-def]
    from tether.daemon.agents.ending import rules_of

    return rules_of(get(name))


def facts(state: str = "FAILED", code: int | None = 1, *, hung: bool = False,
          dead: bool = False) -> ExitFacts:
    return ExitFacts(state=state, exit_code=code, hung=hung, dead=dead)


def test_reset_times() -> None:
    assert reset_time("Claude AI usage limit reached|1772445600", NOW) == 1772445600.0
    assert reset_time("try again in 2 hours 5 minutes", NOW) == NOW + 7500
    assert reset_time("Try again in 2 days 3 hours.", NOW) == NOW + 2 * 86400 + 3 * 3600
    at = reset_time("5-hour limit reached ∙ resets 3pm (Europe/Paris)", NOW)
    assert at == datetime(2026, 3, 2, 15, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp()
    early = reset_time("resets 9am (Europe/Paris)", NOW)  # passed today: tomorrow
    assert early == datetime(2026, 3, 3, 9, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp()
    assert reset_time("usage limit reached", NOW) is None
    assert reset_time("resets 5", NOW) is None  # not a time
    assert reset_time("limit reached|99", NOW) is None
    assert reset_time("try again in 400 days", NOW) is None  # not believed


def test_claude_and_codex_messages() -> None:
    end = classify(facts(), "\x1b[31mClaude AI usage limit reached|1772445600\x1b[0m\n",
                   rules("claude"), NOW)
    assert end.reason == ExitReason.USAGE_LIMITED and end.reset_at == 1772445600.0
    end = classify(facts(), "■ You've hit your usage limit. Upgrade to Pro or try again "
                   "in 1 hour 30 minutes.", rules("codex"), NOW)
    assert end.reason == ExitReason.USAGE_LIMITED and end.reset_at == NOW + 5400
    assert DEFAULT_LIMIT_WAIT > 0


def test_claude_code_2_1_limit_messages() -> None:
    """Issue 20 finding 5: what Claude Code 2.1.332 shows, to a subscription and to an
    API key, once a server answers 429 (tests/realcli reproduces both)."""
    c = rules("claude")
    for line in ("You've hit your session limit · resets 8:56pm (UTC)",
                 "You've hit your 5-hour limit · resets 11:15pm (UTC)"):
        end = classify(facts(), f"> hello\n  ⎿  {line}\n", c, NOW)
        assert end.reason == ExitReason.USAGE_LIMITED and end.detail.endswith(line)
        assert end.reset_at is not None and 0 < end.reset_at - NOW <= 86400
    end = classify(facts(), "API Error: Request rejected (429) · This request would exceed "
                   "your rate limit.\n", c, NOW)
    assert end.reason == ExitReason.USAGE_LIMITED and end.reset_at is None  # then 30 min


def test_a_stop_for_a_reported_usage_limit() -> None:
    """tether stopped it because its CLI reported a limit (Claude's StopFailure hook):
    a usage limit, whatever the cancel, its reset time from the output or the message."""
    c = rules("claude")
    msg = "You've hit your session limit · resets 8:56pm (UTC)"
    end = classify(ExitFacts("CANCELLED", None, hung=False, dead=False, limited=msg), "",
                   c, NOW)
    assert end.reason == ExitReason.USAGE_LIMITED and end.detail == msg
    assert end.reset_at == reset_time(msg, NOW)
    end = classify(ExitFacts("CANCELLED", None, hung=False, dead=False, limited="claude "
                             "reported a usage limit"), "", c, NOW)
    assert end.reason == ExitReason.USAGE_LIMITED and end.reset_at is None


def test_every_reason() -> None:
    c = rules("claude")
    assert classify(facts("FINISHED", 0), "bye", c, NOW).reason == ExitReason.FINISHED
    assert classify(facts(), "boom", c, NOW).reason == ExitReason.CRASHED
    assert classify(facts("CANCELLED", None), "", c, NOW).reason == ExitReason.KILLED
    assert classify(facts("CANCELLED", None, hung=True), "...", c, NOW).reason == \
        ExitReason.HUNG
    assert classify(facts("CANCELLED", None, hung=True), "Do you want to proceed?", c,
                    NOW).reason == ExitReason.WAITING_FOR_USER
    assert classify(facts(), "Prompt is too long", c, NOW).reason == \
        ExitReason.OUT_OF_CONTEXT
    assert classify(facts("FINISHED", 0), "", c, NOW, ).reason == ExitReason.FINISHED
    assert classify(facts("FINISHED", 0, dead=True), "", c, NOW).reason == \
        ExitReason.OUT_OF_CONTEXT
    # A DEAD session is reaped by tether (its exec CANCELLED): out of context, not killed.
    assert classify(facts("CANCELLED", None, dead=True), "", c, NOW).reason == \
        ExitReason.OUT_OF_CONTEXT
    # A limit shown at the prompt of an interactive CLI tether killed for silence.
    assert classify(facts("CANCELLED", None, hung=True), "usage limit reached", c,
                    NOW).reason == ExitReason.USAGE_LIMITED
