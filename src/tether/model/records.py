"""Typed durable records (category A) and journal events.

Every struct here is encoded with msgspec JSON into the store. Decoding ignores
fields it does not know (written by a newer tether) and fills defaults for fields
that are absent (written by an older one), so the store never has to rewrite old
rows to add a field. ``tests/test_store.py`` proves both directions.
"""

from __future__ import annotations

from typing import Any

import msgspec

DEFAULT_SANDBOX = "default"


class SandboxSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The resolved spec of a sandbox, as the user asked for it."""

    runtime: str = "process"
    workspace: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class SandboxRecord(msgspec.Struct, kw_only=True):
    id: str
    name: str
    state: str
    spec: SandboxSpec = msgspec.field(default_factory=SandboxSpec)
    created_at: float = 0.0
    updated_at: float = 0.0
    reason: str | None = None


class ExecSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the user asked to run. Committed before any process is started."""

    argv: list[str]
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    timeout: float | None = None
    name: str | None = None
    # Seconds between SIGTERM and SIGKILL when a timeout fires.
    kill_grace: float = 5.0
    # A PTY (``tether run -t``): output goes to ``pty.log`` and attached clients.
    tty: bool = False
    # Keep stdin open for attached clients (``-i``); implied by ``tty``.
    stdin: bool = False
    rows: int | None = None
    cols: int | None = None


class ExecRecord(msgspec.Struct, kw_only=True):
    id: str
    sandbox: str
    state: str
    spec: ExecSpec
    name: str | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    # Client-chosen key so that a retried exec.start never starts twice.
    request_key: str | None = None


class Event(msgspec.Struct, kw_only=True):
    """One entry of the journal. Every key is always present (``null`` when empty).

    ``seq`` counts from 1 per stream (a sandbox id, or ``None`` for daemon
    events); ``gseq`` is the global order across all streams.
    """

    gseq: int
    seq: int
    type: str
    time: float
    sandbox: str | None = None
    exec: str | None = None
    state: str | None = None
    reason: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


def to_builtins(obj: Any) -> Any:
    """Turn records into plain JSON-able values (for the wire and ``--json``)."""
    return msgspec.to_builtins(obj)
