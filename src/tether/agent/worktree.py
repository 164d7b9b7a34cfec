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
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeAlias

from tether.hostio.atomic import fsync_dir
from tether.hostio.untrusted import NotRegular, open_regular, replace_at

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

AGENT_DIR = ".agent"
STATE_FILE = "state.json"
HEARTBEAT_FILE = "heartbeat.json"
LOCK_FILE = "state.json.lock"
# Where a malformed state.json is kept when it is deliberately replaced (forensics).
MALFORMED_FILE = "state.json.malformed"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A heartbeat tmp file this old cannot belong to a write still in progress.
_HEARTBEAT_TMP_MIN_AGE = 60.0

PathArg: TypeAlias = str | os.PathLike[str]


# --------------------------------------------------------------------------- errors


class WorktreeError(Exception):
    """Base of this module's errors, so a caller can handle "worktree state unusable" once."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class NotFound(WorktreeError):
    """The file does not exist (a fresh worktree, or one nobody claimed yet)."""


class Malformed(WorktreeError):
    """The file exists but is not a valid document; ``reason`` says why.

    Never produced by this module's own writes (they are atomic), so it means
    another tool wrote garbage or the disk lost data: it is reported, not
    silently overwritten, unless the caller asks for that.
    """

    def __init__(self, message: str, path: str, reason: str) -> None:
        super().__init__(message, path)
        self.reason = reason


class LockTimeout(WorktreeError):
    """Another process held ``state.json.lock`` for longer than the caller would wait."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(f"{path} is locked by another process (waited {timeout:g}s)", path)


class IdentifierMismatch(WorktreeError):
    """The worktree's state belongs to another issue; reusing it would mix two issues' work.

    Carries the loaded :attr:`state` so the caller can log or show whose it is.
    """

    def __init__(self, message: str, path: str, state: WorktreeState, expected: str) -> None:
        super().__init__(message, path)
        self.state = state
        self.expected = expected
        self.actual = state.issue_identifier


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class WorktreeState:
    """The ``state.json`` document. Field order is the wire order; append only.

    The Go fields use Go's zero values ("" and 0) and its ``omitempty`` tags. The
    appended fields use ``None`` for "absent", so an explicit ``recoveryAttempts: 0``
    (which the TS reader needs) survives while a Go-written file gains nothing.
    """

    # --- agentfactory's Go struct, in order
    issue_id: str = ""
    issue_identifier: str = ""
    session_id: str = ""
    provider_name: str = ""
    provider_session_id: str = ""
    work_type: str = ""
    current_step: str = ""
    attempt_count: int = 0
    started_at: int = 0  # Unix ms
    last_updated_at: int = 0  # Unix ms, set by every write
    last_heartbeat: int = 0  # Unix ms
    pid: int = 0
    worker_id: str = ""
    # --- read by agentfactory's state-recovery.ts
    status: str | None = None
    recovery_attempts: int | None = None
    # --- tether's own
    tether_lineage: str | None = None
    tether_home: str | None = None
    # Keys written by other tools, in file order; written back after the known ones.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class HeartbeatState:
    """The ``heartbeat.json`` document, shaped like agentfactory's ``HeartbeatState``.

    Every field is always written (the TS interface has no optional ones).
    ``memoryUsageMB`` and ``uptime`` are whole numbers when the TS writer or tether
    writes them, but any JSON number is accepted on read.
    """

    timestamp: int = 0  # Unix ms of this heartbeat
    pid: int = 0
    memory_usage_mb: float = 0
    uptime: float = 0  # seconds since the agent started
    last_activity_type: str = "idle"  # tool_use | thinking | waiting | idle
    last_activity_timestamp: int = 0  # Unix ms
    tool_calls_count: int = 0
    current_operation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# (attribute, JSON key, kind, rule): kind is "str", "int" or "num"; rule is "never"
# (always written, null reads as zero — Go), "zero" (Go omitempty), "none" (appended
# fields: None is absent) or "null" (None is written as null — the TS heartbeat).
_Spec = tuple[str, str, str, str]

_STATE_FIELDS: tuple[_Spec, ...] = (
    ("issue_id", "issueId", "str", "never"),
    ("issue_identifier", "issueIdentifier", "str", "never"),
    ("session_id", "sessionId", "str", "zero"),
    ("provider_name", "providerName", "str", "zero"),
    ("provider_session_id", "providerSessionId", "str", "zero"),
    ("work_type", "workType", "str", "zero"),
    ("current_step", "currentStep", "str", "zero"),
    ("attempt_count", "attemptCount", "int", "never"),
    ("started_at", "startedAt", "int", "never"),
    ("last_updated_at", "lastUpdatedAt", "int", "never"),
    ("last_heartbeat", "lastHeartbeat", "int", "zero"),
    ("pid", "pid", "int", "zero"),
    ("worker_id", "workerId", "str", "zero"),
    ("status", "status", "str", "none"),
    ("recovery_attempts", "recoveryAttempts", "int", "none"),
    ("tether_lineage", "tetherLineage", "str", "none"),
    ("tether_home", "tetherHome", "str", "none"),
)

_HEARTBEAT_FIELDS: tuple[_Spec, ...] = (
    ("timestamp", "timestamp", "int", "never"),
    ("pid", "pid", "int", "never"),
    ("memory_usage_mb", "memoryUsageMB", "num", "never"),
    ("uptime", "uptime", "num", "never"),
    ("last_activity_type", "lastActivityType", "str", "never"),
    ("last_activity_timestamp", "lastActivityTimestamp", "int", "never"),
    ("tool_calls_count", "toolCallsCount", "int", "never"),
    ("current_operation", "currentOperation", "str", "null"),
)

_STATE_ATTRS = frozenset(spec[0] for spec in _STATE_FIELDS) | {"extra"}


# --------------------------------------------------------------------------- paths


def now_ms() -> int:
    """Wall-clock Unix milliseconds, the encoding of every timestamp here (TS ``Date.now()``)."""
    return time.time_ns() // 1_000_000


def state_path(worktree: PathArg) -> str:
    """``<worktree>/.agent/state.json``."""
    return os.path.join(os.fspath(worktree), AGENT_DIR, STATE_FILE)


def heartbeat_path(worktree: PathArg) -> str:
    """``<worktree>/.agent/heartbeat.json``."""
    return os.path.join(os.fspath(worktree), AGENT_DIR, HEARTBEAT_FILE)


def _ensure_agent_dir(worktree: PathArg) -> str:
    """Create ``.agent/`` (durably) if needed; the worktree itself must already exist.

    ``os.mkdir`` rather than ``makedirs``: a mistyped worktree path fails with
    FileNotFoundError instead of silently growing a directory tree.
    """
    agent_dir = os.path.join(os.fspath(worktree), AGENT_DIR)
    try:
        os.mkdir(agent_dir, 0o750)
    except FileExistsError:
        if os.path.islink(agent_dir):  # the agent may plant one: never write through it
            raise WorktreeError(f"{agent_dir} is a symlink; refusing to write agent state "
                                "through it", agent_dir) from None
        return agent_dir
    fsync_dir(os.fspath(worktree))
    return agent_dir


# --------------------------------------------------------------------------- encoding


def _decode_value(kind: str, key: str, value: Any, nullable: bool) -> Any:
    """Validate one known field like Go's ``json.Unmarshal`` would (``null`` = zero value)."""
    if value is None:
        if nullable:
            return None
        return "" if kind == "str" else 0
    if kind == "str":
        if isinstance(value, str):
            return value
        raise ValueError(f"{key}: expected a string, got {type(value).__name__}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: expected a number, got {type(value).__name__}")
    if kind == "int" and not isinstance(value, int):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{key}: {value} overflows a 64-bit integer")
    return value


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # 1e400 would parse to inf, which could never be written back (Go rejects it too).
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _parse(
    raw: bytes, path: str, specs: tuple[_Spec, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bytes -> (known attribute values, unknown keys in file order), or Malformed."""
    try:
        obj = json.loads(
            raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float
        )
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        by_key = {spec[1]: spec for spec in specs}
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in obj.items():
            spec = by_key.get(key)
            if spec is None:
                extra[key] = value
            else:
                attr, _, kind, omit = spec
                known[attr] = _decode_value(kind, key, value, nullable=omit in ("none", "null"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise Malformed(f"{path} is malformed ({len(raw)} bytes): {e}", path, str(e)) from None
    return known, extra


# Go's encoding/json escapes these inside strings by default (HTML safety); Python's
# does not. They can only occur inside strings in the output, so replacing them in
# the whole text is safe.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _encode(obj: Any, specs: tuple[_Spec, ...]) -> bytes:
    """Known fields in wire order (with their omit rule), then extras; Go MarshalIndent bytes."""
    doc: dict[str, Any] = {}
    for attr, key, _, omit in specs:
        value = getattr(obj, attr)
        if (omit == "zero" and not value) or (omit == "none" and value is None):
            continue
        doc[key] = value
    extra: dict[str, Any] = obj.extra
    for key, value in extra.items():
        if any(key == spec[1] for spec in specs):
            raise ValueError(f"extra key {key!r} is a known field; set the attribute instead")
        doc[key] = value
    text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
    # A lone surrogate (possible from a "\ud800" escape in a file we read) cannot be
    # UTF-8: backslashreplace writes it back as the same JSON escape.
    return text.translate(_GO_ESCAPES).encode("utf-8", "backslashreplace")


def encode_state(state: WorktreeState) -> bytes:
    """The exact bytes :func:`write` puts on disk (handy for tests and ``tether`` output)."""
    return _encode(state, _STATE_FIELDS)


def decode_state(raw: bytes, path: str = STATE_FILE) -> WorktreeState:
    """Parse ``state.json`` bytes; raises :class:`Malformed`."""
    known, extra = _parse(raw, path, _STATE_FIELDS)
    return WorktreeState(**known, extra=extra)


# --------------------------------------------------------------------------- files


def _atomic_write(path: str, data: bytes, *, durable: bool) -> None:
    """tmp in the same directory + (fsync) + rename + (fsync dir).

    Not ``monitor.files.atomic_write``: its tmp name is per process, and two threads
    of one process writing the same heartbeat would share it. The ``<name>.tmp-*``
    pattern is the Go store's, so leftovers of either are swept the same way.
    """
    directory, name = os.path.split(path)
    dfd = _dir_fd(directory)  # `.agent` is the agent's to swap: use what it is now
    try:
        replace_at(dfd, name, data, durable=durable)
    finally:
        os.close(dfd)


def _dir_fd(directory: str) -> int:
    """A descriptor of ``directory`` itself, never of what a symlink there points to."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:  # ELOOP / ENOTDIR: swapped for a symlink or a file
        raise WorktreeError(f"{directory} is not a directory ({e.strerror}); refusing to "
                            "write agent state through it", directory) from None


def _sweep_tmp(agent_dir: str, name: str, *, min_age: float = 0.0) -> None:
    """Remove ``<name>.tmp-*`` left by writers killed mid-write.

    For ``state.json`` this runs with the state lock held: every state writer holds
    it, so no tmp file seen then belongs to a live write. Heartbeat writers take no
    lock, so their tmp files are only removed once ``min_age`` seconds old.
    """
    prefix = f"{name}.tmp-"
    cutoff = time.time() - min_age
    try:
        dfd = _dir_fd(agent_dir)
    except (OSError, WorktreeError):
        return
    try:
        for entry in os.listdir(dfd):
            if not entry.startswith(prefix):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
                if min_age <= 0 or st.st_mtime < cutoff:
                    os.unlink(entry, dir_fd=dfd)
    finally:
        os.close(dfd)


MAX_STATE_BYTES = 64 * 1024 * 1024  # bounded; agentfactory's files are a few hundred bytes


def _read_bytes(path: str) -> bytes:
    """The worktree is the agent's to write: never block on a FIFO, never follow a
    planted symlink, never read a device or a huge file."""
    try:
        dfd = _dir_fd(os.path.dirname(path))
    except FileNotFoundError:
        raise NotFound(f"{path} not found", path) from None
    try:
        f = open_regular(os.path.basename(path), dir_fd=dfd, max_bytes=MAX_STATE_BYTES)
    except FileNotFoundError:
        raise NotFound(f"{path} not found", path) from None
    except NotRegular as e:
        raise Malformed(f"{path}: {e.reason}", path, e.reason) from None
    finally:
        os.close(dfd)
    with f:
        return f.read()


_held = threading.local()


@contextlib.contextmanager
def _locked(worktree: PathArg, timeout: float | None = None) -> Iterator[str]:
    """Hold ``flock(LOCK_EX)`` on ``.agent/state.json.lock``; yields the ``.agent`` dir.

    A separate lock file (never renamed) because the state file's inode changes on
    every write. With ``timeout`` (seconds) give up with :class:`LockTimeout` rather
    than wait for ever: the daemon must not hang on a lock an agent's process holds.
    Each acquisition opens its own descriptor, so threads of one process exclude each
    other too. Re-entry from the same thread (an ``update``
    callback calling ``write``) would deadlock on flock, so it raises instead.
    """
    agent_dir = _ensure_agent_dir(worktree)
    lock_path = os.path.join(os.path.realpath(agent_dir), LOCK_FILE)
    held: set[str] = getattr(_held, "paths", None) or set()
    _held.paths = held
    if lock_path in held:
        raise RuntimeError(f"{lock_path} is already held by this thread (re-entrant update?)")
    dfd = _dir_fd(agent_dir)
    try:  # not through a planted symlink, and never blocking on a FIFO
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                     | os.O_NONBLOCK, 0o600, dir_fd=dfd)
    except OSError as e:
        raise WorktreeError(f"cannot open {lock_path} safely: {e.strerror}",
                            lock_path) from None
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WorktreeError(f"{lock_path} is not a regular file", lock_path)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(lock_path, timeout) from None
                    time.sleep(0.01)
        held.add(lock_path)
        try:
            yield agent_dir
        finally:
            held.discard(lock_path)
    finally:
        os.close(fd)  # releases the flock


# --------------------------------------------------------------------------- state API


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
    above (e.g. ``session_id=``, ``provider_name=``, ``tether_lineage=``).
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
        return dataclasses.replace(st, **fields)

    return update(worktree, claim, reset_malformed=force, lock_timeout=lock_timeout)


# --------------------------------------------------------------------------- heartbeat API


def write_heartbeat(worktree: PathArg, heartbeat: HeartbeatState, *, durable: bool = False) -> None:
    """Atomically replace ``heartbeat.json`` (rewritten every 10 s while an agent runs).

    Atomic but not fsynced by default: it is momentary reality, and after a power
    cut an old, missing or empty heartbeat all mean the same thing — the agent is
    not alive — so paying an fsync per session every 10 s buys nothing.
    """
    data = _encode(heartbeat, _HEARTBEAT_FIELDS)
    _atomic_write(os.path.join(_ensure_agent_dir(worktree), HEARTBEAT_FILE), data, durable=durable)


def read_heartbeat(worktree: PathArg) -> HeartbeatState:
    """Load ``heartbeat.json``; raises :class:`NotFound` or :class:`Malformed`.

    Missing keys take their zero value (``timestamp`` 0 reads as infinitely stale).
    """
    path = heartbeat_path(worktree)
    known, extra = _parse(_read_bytes(path), path, _HEARTBEAT_FIELDS)
    return HeartbeatState(**known, extra=extra)


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
