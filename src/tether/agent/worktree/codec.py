"""The ``state.json`` and ``heartbeat.json`` records and their Go/TS-compatible JSON codec.

Pure: bytes in, records out and the other way round; no file is touched here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tether.agent.worktree.errors import Malformed, WorktreeError
from tether.agent.worktree.files import STATE_FILE

__all__ = ["HeartbeatState", "WorktreeState", "decode_state", "encode_state"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


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
    """The exact bytes :func:`~tether.agent.worktree.write` puts on disk (handy for tests
    and ``tether`` output)."""
    return _encode(state, _STATE_FIELDS)


def decode_state(raw: bytes, path: str = STATE_FILE) -> WorktreeState:
    """Parse ``state.json`` bytes; raises :class:`Malformed`."""
    known, extra = _parse(raw, path, _STATE_FIELDS)
    return WorktreeState(**known, extra=extra)


def encode_heartbeat(heartbeat: HeartbeatState) -> bytes:
    """The exact bytes :func:`~tether.agent.worktree.write_heartbeat` puts on disk."""
    return _encode(heartbeat, _HEARTBEAT_FIELDS)


def decode_heartbeat(raw: bytes, path: str) -> HeartbeatState:
    """Parse ``heartbeat.json`` bytes (missing keys take their zero value); raises
    :class:`Malformed`."""
    known, extra = _parse(raw, path, _HEARTBEAT_FIELDS)
    return HeartbeatState(**known, extra=extra)


class IdentifierMismatch(WorktreeError):
    """The worktree's state belongs to another issue; reusing it would mix two issues' work.

    Carries the loaded :attr:`state` so the caller can log or show whose it is.
    """

    def __init__(self, message: str, path: str, state: WorktreeState, expected: str) -> None:
        super().__init__(message, path)
        self.state = state
        self.expected = expected
        self.actual = state.issue_identifier
