"""Per-worktree agent state: ``<worktree>/.agent/state.json`` and ``heartbeat.json``.

A port of agentfactory's Go package ``runtime/state`` (its per-worktree state file) that keeps wire
compatibility with the two existing readers, so a worktree tether ran an agent in
can be inspected and recovered by agentfactory and the other way round:

* the Go ``state.State`` struct: the same fields in the same order, camelCase,
  Unix-millisecond timestamps, the same ``omitempty`` tags, and the same bytes
  (``json.MarshalIndent`` with two spaces, HTML characters escaped, no trailing
  newline) — a file the Go runner wrote re-serializes byte-identically apart
  from ``lastUpdatedAt``;
* the TypeScript ``state-recovery.ts`` reader, which also reads ``status`` and
  ``recoveryAttempts`` and writes ``null`` for absent values (read as zero, as Go
  does).

Fields are only ever appended (the Go rule): after the Go fields come ``status``
and ``recoveryAttempts`` (for the TS reader), then tether's own ``tetherLineage``
and ``tetherHome`` (which lineage and which tether home own the worktree, so a
``tether`` command run inside it finds its session). Unknown keys written by
other tools are kept in :attr:`WorktreeState.extra` and written back, in their
order, after the known ones — unlike the Go reader, which drops them.

Concurrency and crashes: every write is tmp file + fsync + rename + fsync of the
directory, so readers (which take no lock) see the old file or the new one, and
a SIGKILL or a power cut never leaves half a ``state.json``. Writers serialize on
``flock`` of ``.agent/state.json.lock`` — across processes, not just threads (the
Go store only had an in-process mutex) — and :func:`update` does its whole
read-modify-write under that lock, so concurrent updates never lose one another.

The package, split by responsibility: :mod:`~tether.agent.worktree.errors` (the
errors), :mod:`~tether.agent.worktree.codec` (the records, the field table and the
JSON codec: pure), :mod:`~tether.agent.worktree.files` (paths, the lock, atomic
writes, tmp sweeping and bounded reads: the host I/O) and this module (the public
state and heartbeat API, and the re-exports of every name callers use).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from tether.agent.worktree.codec import (
    _STATE_ATTRS,
    HeartbeatState,
    IdentifierMismatch,
    WorktreeState,
    decode_heartbeat,
    decode_state,
    encode_heartbeat,
    encode_state,
)
from tether.agent.worktree.errors import (
    LockTimeout as LockTimeout,  # re-exported, as before the split
)
from tether.agent.worktree.errors import (
    Malformed,
    NotFound,
    WorktreeError,
)
from tether.agent.worktree.files import (
    AGENT_DIR,
    HEARTBEAT_FILE,
    LOCK_FILE,
    MALFORMED_FILE,
    STATE_FILE,
    PathArg,
    _atomic_write,
    _ensure_agent_dir,
    _locked,
    _read_bytes,
    _sweep_tmp,
    heartbeat_path,
    state_path,
)
from tether.agent.worktree.files import (
    MAX_STATE_BYTES as MAX_STATE_BYTES,  # re-exported, as before the split
)

__all__ = [
    "AGENT_DIR",
    "HEARTBEAT_FILE",
    "LOCK_FILE",
    "STATE_FILE",
    "HeartbeatState",
    "IdentifierMismatch",
    "Malformed",
    "NotFound",
    "WorktreeError",
    "WorktreeState",
    "claim_for_issue",
    "decode_state",
    "derived_issue_id",
    "encode_state",
    "heartbeat_path",
    "now_ms",
    "read",
    "read_expect",
    "read_heartbeat",
    "remove_heartbeat",
    "state_path",
    "update",
    "write",
    "write_heartbeat",
]

# A heartbeat tmp file this old cannot belong to a write still in progress.
_HEARTBEAT_TMP_MIN_AGE = 60.0


def now_ms() -> int:
    """Wall-clock Unix milliseconds, the encoding of every timestamp here (TS ``Date.now()``)."""
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- state API


def derived_issue_id(issue_identifier: str) -> str:
    """The ``issueId`` of a claim made without a tracker's own id.

    agentfactory's TS reader refuses a state without a non-empty ``issueId``, so a claim
    always writes one: ``uuid5(NAMESPACE_URL, "tether:issue:" + identifier)`` — UUID-shaped
    like a Linear id, and the same on every claim of the issue, by any tether.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "tether:issue:" + issue_identifier))


def read(worktree: PathArg) -> WorktreeState:
    """Load ``state.json``; raises :class:`NotFound` or :class:`Malformed`.

    Takes no lock: writes are atomic renames, so a reader always sees a whole file.
    """
    path = state_path(worktree)
    return decode_state(_read_bytes(path), path)


def _check_identifier(path: str, state: WorktreeState, expected: str) -> None:
    # Same guard as Go's ReadExpect: an empty expectation or an unclaimed file passes.
    if expected and state.issue_identifier and state.issue_identifier != expected:
        raise IdentifierMismatch(
            f"{path} belongs to issue {state.issue_identifier}, not {expected}",
            path,
            state,
            expected,
        )


def read_expect(worktree: PathArg, identifier: str) -> WorktreeState:
    """:func:`read` plus the cross-issue guard: raises :class:`IdentifierMismatch`.

    As in Go, the guard is off when ``identifier`` is empty or the file names no
    issue yet.
    """
    state = read(worktree)
    _check_identifier(state_path(worktree), state, identifier)
    return state


def _write_locked(agent_dir: str, state: WorktreeState) -> WorktreeState:
    out = dataclasses.replace(state, last_updated_at=now_ms(), extra=dict(state.extra))
    data = encode_state(out)  # before touching the disk: a bad extra fails cleanly
    _sweep_tmp(agent_dir, STATE_FILE)
    _atomic_write(os.path.join(agent_dir, STATE_FILE), data, durable=True)
    return out


def write(worktree: PathArg, state: WorktreeState) -> WorktreeState:
    """Atomically and durably replace ``state.json``; returns what was written.

    ``lastUpdatedAt`` is set to now (the Go contract). The argument is not
    modified. Creates ``.agent/`` if needed (the worktree must exist).
    """
    with _locked(worktree) as agent_dir:
        return _write_locked(agent_dir, state)


def _preserve_malformed(agent_dir: str) -> None:
    """Copy the bad ``state.json`` aside before it is replaced, for a post-mortem."""
    with contextlib.suppress(FileNotFoundError):
        raw = _read_bytes(os.path.join(agent_dir, STATE_FILE))
        _atomic_write(os.path.join(agent_dir, MALFORMED_FILE), raw, durable=True)


def update(
    worktree: PathArg,
    fn: Callable[[WorktreeState], WorktreeState | None],
    *,
    reset_malformed: bool = False,
    lock_timeout: float | None = None,
) -> WorktreeState:
    """Read-modify-write ``state.json`` entirely under the cross-process lock.

    ``fn`` gets the current state (a zero :class:`WorktreeState` when there is no
    file) and returns the new state — it may mutate and return its argument — or
    ``None`` for "no change", in which case nothing is written and the current
    state is returned (a zero state that is *not* on disk if there was no file).
    ``fn`` must not call this module for the same worktree (that raises).

    A malformed file raises :class:`Malformed` (unlike Go, which silently starts
    over) unless ``reset_malformed``: then ``fn`` gets a zero state and the bad
    bytes are kept in ``.agent/state.json.malformed``.
    """
    path = state_path(worktree)
    with _locked(worktree, lock_timeout) as agent_dir:
        malformed = False
        try:
            current = read(worktree)
        except NotFound:
            current = WorktreeState()
        except Malformed:
            if not reset_malformed:
                raise
            current, malformed = WorktreeState(), True
        new = fn(current)
        if new is None:
            return current
        if not isinstance(new, WorktreeState):
            raise TypeError(f"update callback for {path} returned {type(new).__name__}")
        if malformed:
            _preserve_malformed(agent_dir)
        return _write_locked(agent_dir, new)


def claim_for_issue(
    worktree: PathArg, issue_identifier: str, *, force: bool = False,
    lock_timeout: float | None = None, **fields: Any
) -> WorktreeState:
    """Claim the worktree for ``issue_identifier`` at session start (``tether run --issue``).

    * Unclaimed (no file, or no identifier in it): a fresh claim — attempt 1,
      ``startedAt`` now, and ``status`` "initializing" / ``recoveryAttempts`` 0
      unless given, since the TS reader treats both as required.
    * Same issue again: the next attempt — ``attemptCount`` + 1, ``startedAt`` and
      extras kept (work on the issue started then), ``status`` back to
      "initializing", and ``pid`` / ``lastHeartbeat`` cleared because they describe
      the previous attempt's process (``providerSessionId`` is kept: resume needs it).
    * Another issue: :class:`IdentifierMismatch`, unless ``force``, which starts a
      fresh claim and drops the old issue's extras (e.g. the TS ``prompt``); an
      unclaimed file's extras are kept.
    * Malformed file: :class:`Malformed`, unless ``force`` (bad bytes kept aside).

    ``fields`` are :class:`WorktreeState` attribute names and override all of the
    above (e.g. ``issue_id=`` a tracker's own id, ``session_id=``, ``provider_name=``).
    ``issueId`` is never left empty (the TS reader requires it): without one given or
    already in the file, it is :func:`derived_issue_id`.
    """
    unknown = set(fields) - _STATE_ATTRS
    if unknown:
        raise TypeError(f"claim_for_issue: unknown state fields {sorted(unknown)}")
    if not issue_identifier:
        raise ValueError("claim_for_issue: empty issue identifier")
    path = state_path(worktree)
    worktree_name = os.fspath(worktree)

    def claim(st: WorktreeState) -> WorktreeState:
        if st.issue_identifier == issue_identifier:
            st.attempt_count += 1
            st.pid = 0
            st.last_heartbeat = 0
            st.status = "initializing"
            if st.recovery_attempts is None:
                st.recovery_attempts = 0
        else:
            if st.issue_identifier and not force:
                raise IdentifierMismatch(
                    f"worktree {worktree_name} belongs to issue {st.issue_identifier}; "
                    f"refusing to start issue {issue_identifier} there; "
                    "clean it or pass --force",
                    path,
                    st,
                    issue_identifier,
                )
            st = WorktreeState(
                issue_identifier=issue_identifier,
                attempt_count=1,
                started_at=now_ms(),
                status="initializing",
                recovery_attempts=0,
                # Another issue's extras would mislead its readers; an unclaimed file's stay.
                extra={} if st.issue_identifier else st.extra,
            )
        st = dataclasses.replace(st, **fields)
        if not st.issue_id:
            st.issue_id = derived_issue_id(issue_identifier)
        return st

    return update(worktree, claim, reset_malformed=force, lock_timeout=lock_timeout)


# --------------------------------------------------------------------------- heartbeat API


def write_heartbeat(worktree: PathArg, heartbeat: HeartbeatState, *, durable: bool = False) -> None:
    """Atomically replace ``heartbeat.json`` (rewritten every 10 s while an agent runs).

    Atomic but not fsynced by default: it is momentary reality, and after a power
    cut an old, missing or empty heartbeat all mean the same thing — the agent is
    not alive — so paying an fsync per session every 10 s buys nothing.
    """
    data = encode_heartbeat(heartbeat)
    _atomic_write(os.path.join(_ensure_agent_dir(worktree), HEARTBEAT_FILE), data, durable=durable)


def read_heartbeat(worktree: PathArg) -> HeartbeatState:
    """Load ``heartbeat.json``; raises :class:`NotFound` or :class:`Malformed`.

    Missing keys take their zero value (``timestamp`` 0 reads as infinitely stale).
    """
    path = heartbeat_path(worktree)
    return decode_heartbeat(_read_bytes(path), path)


def remove_heartbeat(worktree: PathArg, *, stale_before: int | None = None) -> bool:
    """Delete ``heartbeat.json`` (``tether reap``); True if a file was removed.

    With ``stale_before`` (Unix ms), only a heartbeat older than that — or an
    unreadable one — is removed, so a reap racing a new agent that just started in
    the worktree does not delete its fresh heartbeat. Tmp files of heartbeat
    writers killed mid-write (older than a minute) are swept too.
    """
    path = heartbeat_path(worktree)
    agent_dir = os.path.dirname(path)
    if os.path.isdir(agent_dir):
        _sweep_tmp(agent_dir, HEARTBEAT_FILE, min_age=_HEARTBEAT_TMP_MIN_AGE)
    if stale_before is not None:
        try:
            if read_heartbeat(worktree).timestamp >= stale_before:
                return False
        except NotFound:
            return False
        except Malformed:
            pass  # unreadable is as good as stale
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
