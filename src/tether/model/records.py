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

# The defaults of an exec and of an agent, written once: the records below, the wire
# params (rpc/messages.py), the lifecycle thresholds and the CLI's flags use these.
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
AGING_PCT = 70.0  # context % from which a turn reply asks for a handoff
DYING_PCT = 90.0  # context % from which only finalization tools are allowed
STALE_AFTER = 30.0  # seconds without a sign of life before the heartbeat is STALE
CRASHED_AFTER = 90.0  # ... and before it is CRASHED
MAX_REVIVALS = 3
CRASH_LOOP_SECONDS = 10.0


class MountSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    source: str  # absolute, symlinks resolved, must exist
    target: str  # absolute path inside the sandbox
    mode: str = "ro"  # ro | rw


class ResourceSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    memory: int | None = None  # bytes
    cpus: float | None = None
    pids: int | None = None


class HealthCheckSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    command: list[str]  # run inside the container; healthy when it exits 0
    interval: float = 1.0
    timeout: float = 5.0
    retries: int = 30
    start_period: float = 0.0


class CompanionSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str
    image: str
    env: dict[str, str] = msgspec.field(default_factory=dict)
    command: list[str] | None = None
    health: HealthCheckSpec | None = None
    required: bool = True


class SandboxSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The resolved spec of a sandbox: what the store keeps after YAML parsing,
    parameter substitution and ``--set`` overrides (source 000's sandbox-config)."""

    runtime: str = "process"  # process | bwrap | docker ("auto" is resolved at create)
    workspace: str | None = None  # host directory, mounted read-write
    workspace_target: str | None = None  # where it appears inside (default: same path)
    image: str | None = None  # docker only
    mounts: list[MountSpec] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    network: str | None = None  # none | private | host (None: the runtime's default)
    resources: ResourceSpec | None = None
    companions: list[CompanionSpec] = msgspec.field(default_factory=list)
    idle_timeout: float | None = None  # seconds with no running exec and no client
    ttl: float | None = None  # seconds after creation before it is deleted
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    # Made by `tether run` for one command: deleted once its execs have ended.
    ephemeral: bool = False
    # docker: "always" lets dockerd restart containers that exit (not those tether
    # stops), also while tether is down; "never" makes such an exit FAILED.
    restart: str = "never"


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
    kill_grace: float = KILL_GRACE
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
    # The agent lineage this exec is an attempt of, if any.
    lineage: str | None = None


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


class AgentOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What ``agent.start`` chooses about a lineage (its params refine these fields)."""

    provider: str = "generic"
    argv: list[str]
    sandbox: str = DEFAULT_SANDBOX
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    tty: bool = False
    revival: str = "revive"  # revive | reap | ask
    max_revivals: int = MAX_REVIVALS
    crash_loop_seconds: float = CRASH_LOOP_SECONDS
    successor: str = "none"  # none | auto
    aging_pct: float = AGING_PCT
    dying_pct: float = DYING_PCT
    stale_after: float = STALE_AFTER
    crashed_after: float = CRASHED_AFTER
    worktree: str | None = None
    issue: str | None = None


class AgentConfig(AgentOptions, kw_only=True, omit_defaults=True):
    """How a lineage is run and revived; fixed for the lineage's life."""

    # The worktree's git common dir, found once at start (a sandboxed agent's commits
    # write there; its worktree's .git file is the agent's to rewrite).
    git_dir: str | None = None


class LineageRecord(msgspec.Struct, kw_only=True):
    """An agent's stable identity across revivals (category A).

    ``status`` is the lineage's own state machine (model/states.py); ``lifecycle``
    is the agent's context lifecycle (agent/lifecycle.py).
    """

    id: str
    name: str | None = None
    config: AgentConfig
    status: str = "ACTIVE"
    lifecycle: str = "HEALTHY"
    exec_id: str | None = None
    attempt: int = 0  # execs started so far; revivals = attempt - 1
    token: str = ""  # the current attempt's TETHER_TOKEN; rotated at every revival
    provider_session_id: str | None = None
    turns: int = 0
    context_pct: float | None = None
    model: str | None = None
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    handoff: str | None = None
    revive_at: float | None = None  # when an ORPHANED lineage is due for revival
    recent_starts: list[float] = msgspec.field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0
    last_turn_at: float | None = None
    reason: str | None = None
    predecessor: str | None = None  # the lineage whose handoff seeded this one
    request_key: str | None = None  # the agent.start that created it (retries are no-ops)


def to_builtins(obj: Any) -> Any:
    """Turn records into plain JSON-able values (for the wire and ``--json``)."""
    return msgspec.to_builtins(obj)
