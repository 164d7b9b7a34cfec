"""The pure parts of webhooks: which events a hook matches, backoff, the delivery states."""

from __future__ import annotations

from tether.model.hooks import (
    BACKOFF_CAP,
    DeliveryState,
    HookRecord,
    backoff,
    delivery_key,
    event_names,
    sources_of,
    wants_subject,
    wants_type,
)


def hook(**kw: object) -> HookRecord:
    return HookRecord(name="h", **{"on": ["exec.*"], **kw})  # type: ignore[arg-type]


def test_state_events_answer_to_their_state() -> None:
    assert event_names("exec.state", "FINISHED") == ("exec.state", "exec.finished")
    assert event_names("lineage.state", "ASK_PENDING")[1] == "lineage.ask_pending"
    assert event_names("agent.waiting", "idle") == ("agent.waiting",)
    finished = event_names("exec.state", "FINISHED")
    assert wants_type(hook(on=["exec.finished"]), finished)
    assert not wants_type(hook(on=["exec.failed"]), finished)
    assert wants_type(hook(on=["*"]), event_names("daemon.started", "RUNNING"))


def test_subject_filters() -> None:
    x = {"name": "nightly-3", "exit_code": 0, "signal": None}
    assert wants_subject(hook(sandbox="work"), ("s1", "work"), x)
    assert not wants_subject(hook(sandbox="work"), ("default", "default"), x)
    assert wants_subject(hook(match_name="nightly-*"), (), x)
    assert not wants_subject(hook(match_name="weekly-*"), (), x)
    assert not wants_subject(hook(match_name="*"), (), None)  # nothing named
    assert not wants_subject(hook(nonzero=True), (), x)
    assert wants_subject(hook(nonzero=True), (), {**x, "exit_code": 2})
    assert wants_subject(hook(nonzero=True), (), {**x, "exit_code": None, "signal": 9})


def test_backoff_doubles_with_jitter_and_a_cap() -> None:
    assert backoff(1, 1.0) == 2.0 and backoff(2, 1.0) == 4.0 and backoff(5, 1.0) == 32.0
    assert backoff(3, 0.8) == 8.0 * 0.8
    assert backoff(40, 1.2) == BACKOFF_CAP * 1.2


def test_delivery_states_and_key() -> None:
    assert set(sources_of(DeliveryState.PROCESSING)) == {"PENDING", "FAILED"}
    assert "PROCESSING" in sources_of(DeliveryState.PENDING)  # recovery after a kill
    assert "COMPLETED" not in sources_of(DeliveryState.PROCESSING)
    assert delivery_key(42, "ci") == "42-ci"
