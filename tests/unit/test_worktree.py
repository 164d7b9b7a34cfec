"""Worktree state (``.agent/state.json``, ``.agent/heartbeat.json``): real files, real processes.

The agentfactory compatibility fixtures below are written by hand, byte for byte,
as Go's ``json.MarshalIndent(st, "", "  ")`` of agentfactory's ``runtime/state.State``
and as TypeScript's ``JSON.stringify(state, null, 2)`` in ``state-recovery.ts`` /
``heartbeat-writer.ts`` would produce them — neither runtime runs here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tether.agent import worktree as wt
from tether.agent.worktree import (
    HeartbeatState,
    IdentifierMismatch,
    Malformed,
    NotFound,
    WorktreeError,
    WorktreeState,
)

GO_KEYS = [
    "issueId",
    "issueIdentifier",
    "sessionId",
    "providerName",
    "providerSessionId",
    "workType",
    "currentStep",
    "attemptCount",
    "startedAt",
    "lastUpdatedAt",
    "lastHeartbeat",
    "pid",
    "workerId",
]
ALL_KEYS = [*GO_KEYS, "status", "recoveryAttempts", "tetherLineage", "tetherHome"]

# Go MarshalIndent of a fully populated State: omitempty fields present, HTML
# characters escaped as \u003c \u003e \u0026, non-ASCII raw, no trailing newline.
GO_FULL = (
    b"{\n"
    b'  "issueId": "0b6c1f0e-3f7a-4c1e-9d0a-6a2b4c8e1f00",\n'
    b'  "issueIdentifier": "REN-1234",\n'
    b'  "sessionId": "5d1c9a2e-7b3f-4e8a-9c6d-2f4a8b1e3c57",\n'
    b'  "providerName": "claude",\n'
    b'  "providerSessionId": "sess_01HZX",\n'
    b'  "workType": "development",\n'
    b'  "currentStep": "streaming \\u003cturn 3\\u003e \\u0026 r\xc3\xa9sum\xc3\xa9",\n'
    b'  "attemptCount": 2,\n'
    b'  "startedAt": 1767225600000,\n'
    b'  "lastUpdatedAt": 1767225612345,\n'
    b'  "lastHeartbeat": 1767225610000,\n'
    b'  "pid": 4242,\n'
    b'  "workerId": "worker-7"\n'
    b"}"
)
# The same struct with every omitempty field at its zero value.
GO_MINIMAL = (
    b"{\n"
    b'  "issueId": "",\n'
    b'  "issueIdentifier": "",\n'
    b'  "attemptCount": 0,\n'
    b'  "startedAt": 0,\n'
    b'  "lastUpdatedAt": 1767225612345,\n'
    b"}"
).replace(b",\n}", b"\n}")

# What agentfactory's TS createInitialState + writeState leave behind (nulls included).
TS_STATE = """{
  "issueId": "issue-uuid",
  "issueIdentifier": "ABC-123",
  "linearSessionId": null,
  "providerSessionId": null,
  "workType": "development",
  "prompt": "Fix the <flaky> test & ship",
  "startedAt": 1767225600000,
  "status": "running",
  "currentPhase": null,
  "lastUpdatedAt": 1767225600500,
  "recoveryAttempts": 1,
  "workerId": null,
  "pid": null,
  "taskListId": "ABC-123-DEV",
  "summaryVersion": 3,
  "nested": {"a": [1, 2.5, {"b": "\\u00e9"}], "big": 123456789012345678901234567890}
}"""


def _agent(tmp_path: Path) -> Path:
    return tmp_path / ".agent"


def _put_state(tmp_path: Path, raw: bytes | str) -> Path:
    _agent(tmp_path).mkdir(exist_ok=True)
    path = _agent(tmp_path) / "state.json"
    path.write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return path


def _keys(raw: bytes) -> list[str]:
    """Top-level keys in file order (json.loads would hide duplicates)."""
    objects: list[list[str]] = []

    def hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
        objects.append([k for k, _ in items])
        return dict(items)

    json.loads(raw, object_pairs_hook=hook)
    return objects[-1]  # the outermost object is completed last


def _without_last_updated(raw: bytes) -> bytes:
    return b"\n".join(
        line for line in raw.split(b"\n") if not line.lstrip().startswith(b'"lastUpdatedAt"')
    )


def _run_py(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


# --------------------------------------------------------------------------- format


def test_go_marshalled_file_reserializes_byte_identically(tmp_path: Path) -> None:
    for doc in (GO_FULL, GO_MINIMAL):
        path = _put_state(tmp_path, doc)
        state = wt.read(tmp_path)
        before = wt.now_ms()
        written = wt.write(tmp_path, state)
        out = path.read_bytes()
        assert _without_last_updated(out) == _without_last_updated(doc)
        assert before <= written.last_updated_at <= wt.now_ms()
        assert json.loads(out)["lastUpdatedAt"] == written.last_updated_at
    full = wt.decode_state(GO_FULL)
    assert full.current_step == "streaming <turn 3> & résumé"
    assert (full.attempt_count, full.pid, full.provider_name) == (2, 4242, "claude")


def test_camel_case_keys_in_order_and_ms_timestamps(tmp_path: Path) -> None:
    state = WorktreeState(
        issue_id="u",
        issue_identifier="REN-1",
        session_id="s",
        provider_name="codex",
        provider_session_id="p",
        work_type="qa",
        current_step="spawning",
        attempt_count=3,
        started_at=1_700_000_000_123,
        last_heartbeat=1_700_000_001_456,
        pid=77,
        worker_id="w",
        status="running",
        recovery_attempts=0,
        tether_lineage="lin-1",
        tether_home="/home/x/.tether",
    )
    before = wt.now_ms()
    wt.write(tmp_path, state)
    after = wt.now_ms()
    raw = (_agent(tmp_path) / "state.json").read_bytes()
    assert _keys(raw) == ALL_KEYS
    doc = json.loads(raw)
    assert doc["startedAt"] == 1_700_000_000_123 and doc["lastHeartbeat"] == 1_700_000_001_456
    # Milliseconds, not seconds: within the wall-clock window of the write.
    assert before <= doc["lastUpdatedAt"] <= after and doc["lastUpdatedAt"] > 10**12
    assert doc["recoveryAttempts"] == 0  # explicit zero of an appended field is kept
    assert not raw.endswith(b"\n") and raw.startswith(b'{\n  "issueId": "u",\n')


def test_omitempty_like_the_go_tags(tmp_path: Path) -> None:
    wt.write(tmp_path, WorktreeState())
    raw = (_agent(tmp_path) / "state.json").read_bytes()
    assert _keys(raw) == [
        "issueId",
        "issueIdentifier",
        "attemptCount",
        "startedAt",
        "lastUpdatedAt",
    ]
    doc = json.loads(raw)
    assert (doc["issueId"], doc["issueIdentifier"], doc["attemptCount"], doc["startedAt"]) == (
        "",
        "",
        0,
        0,
    )


def test_round_trip_keeps_unknown_fields_and_order(tmp_path: Path) -> None:
    path = _put_state(tmp_path, TS_STATE)
    state = wt.read(tmp_path)
    assert state.issue_identifier == "ABC-123" and state.status == "running"
    assert state.recovery_attempts == 1
    # TS nulls read as Go zero values.
    assert (state.provider_session_id, state.worker_id, state.pid) == ("", "", 0)
    unknown = [
        "linearSessionId",
        "prompt",
        "currentPhase",
        "taskListId",
        "summaryVersion",
        "nested",
    ]
    assert list(state.extra) == unknown
    wt.write(tmp_path, state)
    raw = path.read_bytes()
    original = json.loads(TS_STATE)
    out = json.loads(raw)
    # Known keys in wire order, then the unknown ones in their original order.
    assert _keys(raw) == [
        "issueId",
        "issueIdentifier",
        "workType",
        "attemptCount",
        "startedAt",
        "lastUpdatedAt",
        "status",
        "recoveryAttempts",
        *unknown,
    ]
    for key in unknown:
        assert out[key] == original[key]
    assert out["nested"]["big"] == 123456789012345678901234567890
    assert out["prompt"] == "Fix the <flaky> test & ship"
    # A second round trip changes nothing but lastUpdatedAt.
    wt.write(tmp_path, wt.read(tmp_path))
    assert _without_last_updated(path.read_bytes()) == _without_last_updated(raw)


def test_update_keeps_unknown_fields(tmp_path: Path) -> None:
    _put_state(tmp_path, TS_STATE)

    def step(st: WorktreeState) -> WorktreeState:
        st.current_step = "backstop"
        return st

    wt.update(tmp_path, step)
    out = json.loads((_agent(tmp_path) / "state.json").read_bytes())
    assert out["currentStep"] == "backstop" and out["taskListId"] == "ABC-123-DEV"


def test_odd_strings_survive_a_round_trip(tmp_path: Path) -> None:
    """Control characters, HTML characters, U+2028 and a lone surrogate escape."""
    raw = '{"issueId": "a\\u0001\\b\\t<&>\u2028\u00e9", "x": "\\ud800"}'
    _put_state(tmp_path, raw)
    st = wt.read(tmp_path)
    assert st.issue_id == "a\x01\x08\t<&>\u2028\u00e9" and st.extra["x"] == "\ud800"
    wt.write(tmp_path, st)
    out = (_agent(tmp_path) / "state.json").read_bytes()
    assert b'"a\\u0001\\b\\t\\u003c\\u0026\\u003e\\u2028\xc3\xa9"' in out
    assert wt.read(tmp_path) == dataclasses.replace(
        st, last_updated_at=wt.read(tmp_path).last_updated_at
    )


def test_extra_must_not_shadow_a_known_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="known field"):
        wt.write(tmp_path, WorktreeState(extra={"pid": 5}))
    assert not (_agent(tmp_path) / "state.json").exists()


def test_write_does_not_mutate_its_argument(tmp_path: Path) -> None:
    state = WorktreeState(issue_identifier="REN-1", extra={"x": 1})
    written = wt.write(tmp_path, state)
    assert state.last_updated_at == 0 and written.last_updated_at > 0
    assert written.extra == {"x": 1} and written.extra is not state.extra


# --------------------------------------------------------------------------- errors


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    for call in (
        lambda: wt.read(tmp_path),
        lambda: wt.read_expect(tmp_path, "REN-1"),
        lambda: wt.read_heartbeat(tmp_path),
    ):
        with pytest.raises(NotFound) as info:
            call()
        assert isinstance(info.value, WorktreeError)
        assert info.value.path.startswith(str(tmp_path))


def test_missing_worktree_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        wt.write(tmp_path / "no-such-worktree", WorktreeState())
    assert not (tmp_path / "no-such-worktree").exists()


MALFORMED = [
    b"",
    b"{",
    GO_FULL[: len(GO_FULL) // 2],  # truncated mid-write
    GO_FULL[:-1],
    b"[]",
    b"null",
    b'"REN-1"',
    b'{"attemptCount": "3"}',
    b'{"attemptCount": 1.0}',
    b'{"pid": 1.5}',
    b'{"issueId": 5}',
    b'{"startedAt": true}',
    b'{"lastHeartbeat": NaN}',
    b'{"startedAt": 99999999999999999999}',
    b'{"other": 1e400}',
    b'\xff\xfe{"issueId": "x"}',
    b'\xef\xbb\xbf{"issueId": "x"}',
]


@pytest.mark.parametrize("raw", MALFORMED)
def test_corrupt_or_truncated_file_is_malformed(tmp_path: Path, raw: bytes) -> None:
    _put_state(tmp_path, raw)
    with pytest.raises(Malformed) as info:
        wt.read(tmp_path)
    assert isinstance(info.value, WorktreeError) and info.value.reason
    with pytest.raises(Malformed):
        wt.read_expect(tmp_path, "REN-1")


def test_update_refuses_malformed_unless_reset(tmp_path: Path) -> None:
    garbage = b'{"issueIdentifier": "REN-1", "attemptCo'
    path = _put_state(tmp_path, garbage)
    seen: list[WorktreeState] = []

    def bump(st: WorktreeState) -> WorktreeState:
        seen.append(dataclasses.replace(st))
        st.attempt_count += 1
        return st

    with pytest.raises(Malformed):
        wt.update(tmp_path, bump)
    assert path.read_bytes() == garbage and not seen
    out = wt.update(tmp_path, bump, reset_malformed=True)
    assert seen == [WorktreeState()]  # a fresh zero state, not a half-parsed one
    assert out.attempt_count == 1 and wt.read(tmp_path).attempt_count == 1
    assert (_agent(tmp_path) / "state.json.malformed").read_bytes() == garbage


def test_foreign_issue_is_identifier_mismatch_with_state(tmp_path: Path) -> None:
    _put_state(tmp_path, GO_FULL)
    with pytest.raises(IdentifierMismatch) as info:
        wt.read_expect(tmp_path, "REN-9999")
    err = info.value
    assert isinstance(err, WorktreeError)
    assert err.state.issue_identifier == "REN-1234" and err.state.pid == 4242
    assert (err.expected, err.actual) == ("REN-9999", "REN-1234")
    assert "REN-1234" in str(err) and "REN-9999" in str(err)
    # The Go guard: no expectation, or a matching one, passes.
    assert wt.read_expect(tmp_path, "").issue_identifier == "REN-1234"
    assert wt.read_expect(tmp_path, "REN-1234").pid == 4242


def test_unclaimed_file_passes_the_guard(tmp_path: Path) -> None:
    _put_state(tmp_path, GO_MINIMAL)
    assert wt.read_expect(tmp_path, "REN-1").issue_identifier == ""


# --------------------------------------------------------------------------- update


def test_update_starts_from_zero_state_and_sets_last_updated(tmp_path: Path) -> None:
    got: list[WorktreeState] = []

    def fn(st: WorktreeState) -> WorktreeState:
        got.append(dataclasses.replace(st))
        st.issue_identifier = "REN-1"
        return st

    before = wt.now_ms()
    out = wt.update(tmp_path, fn)
    assert got == [WorktreeState()]
    assert out.issue_identifier == "REN-1" and out.last_updated_at >= before
    assert wt.read(tmp_path) == out


def test_update_none_means_no_change(tmp_path: Path) -> None:
    assert wt.update(tmp_path, lambda st: None) == WorktreeState()
    assert not (_agent(tmp_path) / "state.json").exists()
    path = _put_state(tmp_path, GO_FULL)
    st = wt.update(tmp_path, lambda st: None)
    assert st.issue_identifier == "REN-1234" and path.read_bytes() == GO_FULL


def test_update_callback_errors_leave_file_alone(tmp_path: Path) -> None:
    path = _put_state(tmp_path, GO_FULL)

    def boom(st: WorktreeState) -> WorktreeState:
        st.pid = 1
        raise KeyError("boom")

    with pytest.raises(KeyError):
        wt.update(tmp_path, boom)
    assert path.read_bytes() == GO_FULL
    # The lock was released: a later update proceeds.
    assert wt.update(tmp_path, lambda st: st).issue_identifier == "REN-1234"


def test_reentrant_update_raises_instead_of_deadlocking(tmp_path: Path) -> None:
    def nested(st: WorktreeState) -> WorktreeState:
        wt.write(tmp_path, st)
        return st

    with pytest.raises(RuntimeError, match="already held"):
        wt.update(tmp_path, nested)
    assert wt.update(tmp_path, lambda st: st).attempt_count == 0


def test_writes_are_fsynced_file_then_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wt.write(tmp_path, WorktreeState())  # .agent exists: only the write is traced
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    wt.write(tmp_path, WorktreeState(issue_identifier="REN-1"))
    agent = str(_agent(tmp_path))
    assert len(synced) == 2
    assert os.path.basename(synced[0]).startswith("state.json.tmp-")  # data before rename
    assert synced[1] == agent  # the rename itself


def test_leftover_tmp_files_are_swept_by_the_next_write(tmp_path: Path) -> None:
    wt.write(tmp_path, WorktreeState())
    leftover = _agent(tmp_path) / "state.json.tmp-123abc"
    leftover.write_bytes(b'{"half": ')
    wt.update(tmp_path, lambda st: st)
    assert sorted(os.listdir(_agent(tmp_path))) == ["state.json", "state.json.lock"]


# --------------------------------------------------------------------------- concurrency

INCREMENT = """
import os, sys, time
from tether.agent import worktree as wt

worktree, go, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
while not os.path.exists(go):
    time.sleep(0.001)

def bump(st):
    st.attempt_count += 1
    st.extra[f"pid-{os.getpid()}"] = st.extra.get(f"pid-{os.getpid()}", 0) + 1
    return st

for _ in range(n):
    wt.update(worktree, bump)
"""


def test_concurrent_updates_from_processes_lose_nothing(tmp_path: Path) -> None:
    procs_n, per_proc = 8, 50
    go = tmp_path / "go"
    wt.write(tmp_path, WorktreeState(issue_identifier="REN-1", extra={"keep": True}))
    procs = [_run_py(INCREMENT, str(tmp_path), str(go), str(per_proc)) for _ in range(procs_n)]
    time.sleep(0.3)  # let every child import and reach the start line
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    final = wt.read(tmp_path)
    assert final.attempt_count == procs_n * per_proc
    per_pid = {k: v for k, v in final.extra.items() if k.startswith("pid-")}
    assert sorted(per_pid) == sorted(f"pid-{p.pid}" for p in procs)
    assert set(per_pid.values()) == {per_proc}
    assert final.extra["keep"] is True and final.issue_identifier == "REN-1"
    assert sorted(os.listdir(_agent(tmp_path))) == ["state.json", "state.json.lock"]


def test_concurrent_updates_from_threads_lose_nothing(tmp_path: Path) -> None:
    def bump(st: WorktreeState) -> WorktreeState:
        st.attempt_count += 1
        return st

    def worker() -> None:
        for _ in range(25):
            wt.update(tmp_path, bump)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wt.read(tmp_path).attempt_count == 200


HOLD_LOCK = """
import sys, time
from tether.agent import worktree as wt

def slow(st):
    print("locked", flush=True)
    time.sleep(2.0)
    st.current_step = "child"
    return st

wt.update(sys.argv[1], slow)
"""


def test_update_waits_for_another_process_holding_the_lock(tmp_path: Path) -> None:
    child = _run_py(HOLD_LOCK, str(tmp_path))
    assert child.stdout is not None
    assert child.stdout.readline() == b"locked\n"
    started = time.monotonic()
    seen: list[str] = []

    def mine(st: WorktreeState) -> WorktreeState:
        seen.append(st.current_step)
        st.attempt_count += 1
        return st

    out = wt.update(tmp_path, mine)
    waited = time.monotonic() - started
    child.communicate(timeout=30)
    assert child.returncode == 0
    assert seen == ["child"]  # read after the child's write, under the same lock
    assert out.current_step == "child" and out.attempt_count == 1
    assert waited > 0.5


WRITE_LOOP = """
import os, sys, time
from tether.agent import worktree as wt

# Write in 64 KiB pieces with a pause between them, so that most of the child's time
# is spent with a partly written tmp file: the SIGKILLs land mid-write.
real_write = os.write
def slow_write(fd, data):
    time.sleep(0.002)
    return real_write(fd, data[:65536])
os.write = slow_write

worktree = sys.argv[1]
payload = "x" * (2 * 1024 * 1024)
i = 0
while True:
    i += 1
    wt.write(worktree, wt.WorktreeState(issue_identifier="REN-1", attempt_count=i,
                                        extra={"payload": payload, "i": i}))
    if i == 1:
        print("ready", flush=True)
"""


def test_kill_9_mid_write_never_leaves_a_half_written_file(tmp_path: Path) -> None:
    rng = random.Random(4)
    killed_mid_write = 0
    for _ in range(6):
        child = _run_py(WRITE_LOOP, str(tmp_path))
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        # Readers take no lock: every read during the write storm sees a whole file.
        deadline = time.monotonic() + rng.uniform(0.05, 0.4)
        reads = 0
        while time.monotonic() < deadline:
            st = wt.read(tmp_path)
            assert st.extra["i"] == st.attempt_count and len(st.extra["payload"]) == 2 * 1024**2
            reads += 1
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL
        tmps = [n for n in os.listdir(_agent(tmp_path)) if n.startswith("state.json.tmp-")]
        killed_mid_write += bool(tmps)
        st = wt.read(tmp_path)
        assert st.extra["i"] == st.attempt_count >= 1 and reads > 0
        assert len(st.extra["payload"]) == 2 * 1024 * 1024
    assert killed_mid_write >= 1  # the scenario under test did happen
    # Whatever tmp files the kills left behind, the next write sweeps them.
    wt.update(tmp_path, lambda st: st)
    assert sorted(os.listdir(_agent(tmp_path))) == ["state.json", "state.json.lock"]


# --------------------------------------------------------------------------- claim


def test_claim_fresh_then_same_issue_again(tmp_path: Path) -> None:
    before = wt.now_ms()
    first = wt.claim_for_issue(
        tmp_path, "REN-1", issue_id="uuid-1", session_id="s1", tether_lineage="lin-1", pid=10
    )
    assert (first.issue_identifier, first.issue_id, first.attempt_count) == ("REN-1", "uuid-1", 1)
    assert first.started_at >= before and first.status == "initializing"
    assert first.recovery_attempts == 0 and first.pid == 10 and first.tether_lineage == "lin-1"
    wt.update(tmp_path, lambda st: _set(st, provider_session_id="prov-1", last_heartbeat=5))

    second = wt.claim_for_issue(tmp_path, "REN-1", session_id="s2")
    assert second.attempt_count == 2 and second.started_at == first.started_at
    assert second.session_id == "s2" and second.provider_session_id == "prov-1"
    assert (second.pid, second.last_heartbeat) == (0, 0)  # the last attempt's process
    assert second.tether_lineage == "lin-1" and second.issue_id == "uuid-1"
    assert wt.read(tmp_path) == second


def _set(st: WorktreeState, **kw: Any) -> WorktreeState:
    for k, v in kw.items():
        setattr(st, k, v)
    return st


def test_claim_refuses_another_issue_unless_forced(tmp_path: Path) -> None:
    path = _put_state(tmp_path, TS_STATE)
    with pytest.raises(IdentifierMismatch) as info:
        wt.claim_for_issue(tmp_path, "XYZ-9")
    msg = str(info.value)
    assert msg == (
        f"worktree {tmp_path} belongs to issue ABC-123; refusing to start issue XYZ-9 there; "
        "clean it or pass --force"
    )
    assert (
        info.value.state.issue_identifier == "ABC-123" and info.value.state.recovery_attempts == 1
    )
    assert path.read_text() == TS_STATE  # untouched

    forced = wt.claim_for_issue(tmp_path, "XYZ-9", force=True, work_type="qa")
    assert (forced.issue_identifier, forced.attempt_count, forced.work_type) == ("XYZ-9", 1, "qa")
    # Nothing of ABC-123 survives: not its issueId ("issue-uuid"), nor its extras.
    assert forced.issue_id == wt.derived_issue_id("XYZ-9") and forced.extra == {}
    assert wt.read_expect(tmp_path, "XYZ-9") == forced


def test_claim_always_writes_an_issue_id(tmp_path: Path) -> None:
    """agentfactory's TS reader refuses a state whose issueId is empty (invalid_state)."""
    derived = wt.derived_issue_id("REN-7")
    assert derived == str(uuid.uuid5(uuid.NAMESPACE_URL, "tether:issue:REN-7"))  # as documented
    assert derived != wt.derived_issue_id("REN-8")
    first = wt.claim_for_issue(tmp_path, "REN-7")
    again = wt.claim_for_issue(tmp_path, "REN-7")
    assert first.issue_id == again.issue_id == derived and again.attempt_count == 2
    # A file of an older tether: claimed, but with no issueId yet.
    wt.update(tmp_path, lambda st: _set(st, issue_id=""))
    assert wt.claim_for_issue(tmp_path, "REN-7").issue_id == derived
    # A tracker's own id wins, and a later claim without one keeps it.
    assert wt.claim_for_issue(tmp_path, "REN-7", issue_id="lin-uuid").issue_id == "lin-uuid"
    assert wt.claim_for_issue(tmp_path, "REN-7").issue_id == "lin-uuid"
    assert json.loads((_agent(tmp_path) / "state.json").read_text())["issueId"] == "lin-uuid"


def test_every_lineage_status_has_an_agentfactory_status() -> None:
    from tests.e2e.agentfactory_reader import WORKTREE_STATUSES
    from tether.daemon.agents.worktree import TS_STATUS
    from tether.model.states import LineageStatus

    assert set(TS_STATUS) == set(LineageStatus)
    assert set(TS_STATUS.values()) <= WORKTREE_STATUSES


def test_claim_on_malformed_file_needs_force(tmp_path: Path) -> None:
    _put_state(tmp_path, b"{truncated")
    with pytest.raises(Malformed):
        wt.claim_for_issue(tmp_path, "REN-1")
    st = wt.claim_for_issue(tmp_path, "REN-1", force=True)
    assert st.attempt_count == 1
    assert (_agent(tmp_path) / "state.json.malformed").read_bytes() == b"{truncated"


def test_claim_of_unclaimed_file_keeps_its_extras(tmp_path: Path) -> None:
    _put_state(tmp_path, '{"issueId": "", "issueIdentifier": "", "todo": [1]}')
    st = wt.claim_for_issue(tmp_path, "REN-1")
    assert st.extra == {"todo": [1]} and st.attempt_count == 1


def test_claim_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="bogus"):
        wt.claim_for_issue(tmp_path, "REN-1", bogus=1)
    with pytest.raises(ValueError):
        wt.claim_for_issue(tmp_path, "")
    assert not (_agent(tmp_path) / "state.json").exists()


# --------------------------------------------------------------------------- heartbeat

TS_HEARTBEAT = """{
  "timestamp": 1767225610000,
  "pid": 4242,
  "memoryUsageMB": 87,
  "uptime": 10,
  "lastActivityType": "tool_use",
  "lastActivityTimestamp": 1767225609000,
  "toolCallsCount": 3,
  "currentOperation": "Bash"
}"""


def test_heartbeat_write_read_remove(tmp_path: Path) -> None:
    hb = HeartbeatState(
        timestamp=wt.now_ms(),
        pid=os.getpid(),
        memory_usage_mb=42,
        uptime=12,
        last_activity_type="thinking",
        last_activity_timestamp=wt.now_ms() - 500,
        tool_calls_count=7,
        current_operation=None,
    )
    wt.write_heartbeat(tmp_path, hb)
    raw = (_agent(tmp_path) / "heartbeat.json").read_bytes()
    assert _keys(raw) == [
        "timestamp",
        "pid",
        "memoryUsageMB",
        "uptime",
        "lastActivityType",
        "lastActivityTimestamp",
        "toolCallsCount",
        "currentOperation",
    ]
    assert json.loads(raw)["currentOperation"] is None  # the TS type is string | null
    assert wt.read_heartbeat(tmp_path) == hb
    assert wt.remove_heartbeat(tmp_path) is True
    assert wt.remove_heartbeat(tmp_path) is False
    with pytest.raises(NotFound):
        wt.read_heartbeat(tmp_path)


def test_heartbeat_written_by_agentfactory_reads_and_round_trips(tmp_path: Path) -> None:
    _agent(tmp_path).mkdir()
    (_agent(tmp_path) / "heartbeat.json").write_text(TS_HEARTBEAT)
    hb = wt.read_heartbeat(tmp_path)
    assert (hb.pid, hb.memory_usage_mb, hb.tool_calls_count, hb.current_operation) == (
        4242,
        87,
        3,
        "Bash",
    )
    wt.write_heartbeat(tmp_path, hb)
    assert (_agent(tmp_path) / "heartbeat.json").read_text() == TS_HEARTBEAT


def test_malformed_heartbeat(tmp_path: Path) -> None:
    _agent(tmp_path).mkdir()
    (_agent(tmp_path) / "heartbeat.json").write_bytes(b'{"timestamp": "soon"}')
    with pytest.raises(Malformed):
        wt.read_heartbeat(tmp_path)


def test_remove_heartbeat_only_when_stale(tmp_path: Path) -> None:
    now = wt.now_ms()
    wt.write_heartbeat(tmp_path, HeartbeatState(timestamp=now, pid=1))
    assert wt.remove_heartbeat(tmp_path, stale_before=now - 90_000) is False  # fresh: kept
    assert (_agent(tmp_path) / "heartbeat.json").exists()
    assert wt.remove_heartbeat(tmp_path, stale_before=now + 1) is True
    (_agent(tmp_path) / "heartbeat.json").write_bytes(b"{")  # unreadable counts as stale
    assert wt.remove_heartbeat(tmp_path, stale_before=now) is True
    assert wt.remove_heartbeat(tmp_path, stale_before=now) is False  # nothing there


def test_remove_heartbeat_sweeps_only_old_tmp_files(tmp_path: Path) -> None:
    wt.write_heartbeat(tmp_path, HeartbeatState(timestamp=wt.now_ms(), pid=1))
    old = _agent(tmp_path) / "heartbeat.json.tmp-old"
    young = _agent(tmp_path) / "heartbeat.json.tmp-young"  # maybe a write in progress
    old.write_bytes(b"{")
    young.write_bytes(b"{")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert wt.remove_heartbeat(tmp_path) is True
    assert not old.exists() and young.exists()


def test_planted_fifos_and_symlinks_in_agent_dir_are_refused(tmp_path: Path) -> None:
    """Second review: an agent could make `.agent/state.json` a FIFO (freezing the
    daemon) or a symlink to a secret (copied into state.json.malformed)."""
    import threading

    secret = tmp_path / "secret"
    secret.write_text("key material\n")
    wt_dir = tmp_path / "wt"
    wt_dir.mkdir()
    agent = wt_dir / ".agent"
    agent.mkdir()
    os.mkfifo(agent / "state.json")
    done = threading.Event()

    def read() -> None:
        with pytest.raises(wt.WorktreeError):
            wt.read(wt_dir)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    (agent / "state.json").unlink()
    (agent / "state.json").symlink_to(secret)
    with pytest.raises(wt.WorktreeError):
        wt.read(wt_dir)
    (agent / "state.json.lock").symlink_to(tmp_path / "planted")
    with pytest.raises(wt.WorktreeError):
        wt.update(wt_dir, lambda st: st)
    assert not (tmp_path / "planted").exists()
    assert not any("key material" in p.read_text(errors="replace")
                   for p in agent.iterdir() if p.is_file() and not p.is_symlink())
