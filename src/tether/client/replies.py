"""Typed replies of the daemon's methods, where a reply is more than a stored record.

Where a reply *is* a record (``sandbox.get``, ``events.list``'s events) the SDK decodes
it into :mod:`tether.model.records` itself. Decoding ignores fields it does not know,
so a newer daemon may add fields without breaking an older SDK; the fields a daemon
adds to a record have defaults, so an older daemon's reply decodes too.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.model.digest import DigestNode
from tether.model.hooks import HookRecord
from tether.model.records import Event, ExecRecord, SandboxRecord
from tether.model.schedule import JobRecord, RunRecord


class _Reply(msgspec.Struct, kw_only=True):
    pass


class Health(_Reply):
    status: str  # SERVING | NOT_SERVING
    state: str
    #: why it is NOT_SERVING while RUNNING (``STORE_LOST: …``), else None
    reason: str | None = None


class RuntimeStatus(_Reply):
    """A runtime's own fields: which it sends differs by runtime (``process``: only
    ``available``, and ``reason`` when it is not); a field it did not send is ``UNSET``,
    so the struct encodes back to the daemon's object."""

    available: bool | None  # None: docker not probed yet
    version: str | msgspec.UnsetType | None = msgspec.UNSET
    reason: str | msgspec.UnsetType | None = msgspec.UNSET
    connected: bool | msgspec.UnsetType | None = msgspec.UNSET  # docker only
    reconciles: int | msgspec.UnsetType | None = msgspec.UNSET  # docker only
    # docker only: each sandbox's docker_host in use, with these same fields
    hosts: dict[str, dict[str, Any]] | msgspec.UnsetType = msgspec.UNSET


class StatusCounts(_Reply):
    sandboxes: int = 0
    execs: dict[str, int] = msgspec.field(default_factory=dict)  # by state
    watched: int = 0
    connections: int = 0
    subscriptions: int = 0


class Status(_Reply):
    pid: int
    version: str
    state: str
    home: str
    instance: str | None = None
    epoch: str | None = None  # the journal's epoch: a new one means cursors were reset
    started_at: float = 0.0
    uptime: float = 0.0
    runtime: str = "process"
    runtimes: dict[str, RuntimeStatus] = msgspec.field(default_factory=dict)
    recovery: dict[str, Any] = msgspec.field(default_factory=dict)
    monitors: dict[str, Any] = msgspec.field(default_factory=dict)  # idle ones, zygotes
    counts: StatusCounts = msgspec.field(default_factory=StatusCounts)
    warnings: list[str] = msgspec.field(default_factory=list)  # e.g. it runs as root


class AgentSummary(_Reply):
    """The agent an exec is an attempt of, as ``exec.*`` replies show it."""

    lineage: str
    status: str
    lifecycle: str
    heartbeat: str | None = None  # only for the lineage's current exec
    context_pct: float | None = None
    turns: int = 0
    revivals: int = 0
    exit_reason: str | None = None  # why the lineage's last attempt ended


class ExecView(ExecRecord, kw_only=True):
    """An exec record plus what the daemon knows beside it."""

    pid: int | None = None  # while RUNNING
    stdout_path: str | None = None
    stderr_path: str | None = None
    pty_path: str | None = None  # terminal execs only
    socket: str | None = None  # the exec's monitor socket (attach)
    agent: AgentSummary | None = None


class LogChunk(_Reply):
    """One ``exec.logs`` chunk; ``offset`` is where the next read starts."""

    data: bytes  # base64 on the wire
    offset: int
    size: int = 0
    eof: bool = False
    state: str | None = None
    # stream ``all``: which of ``data``'s bytes are which, in order: [["stdout", 12], …]
    runs: list[tuple[str, int]] = msgspec.field(default_factory=list)

    def parts(self) -> list[tuple[str, bytes]]:
        """``data`` cut into (stream, bytes) by ``runs``."""
        out, at = [], 0
        for stream, n in self.runs:
            out.append((stream, self.data[at:at + n]))
            at += n
        return out


class EventPage(_Reply):
    events: list[Event]
    next: int  # the cursor to pass as ``since`` for the page after this one
    epoch: str | None = None  # pass it back with ``next``: a reset journal is refused


class CopyReport(_Reply):
    sandbox: str
    direction: str
    src: str
    dst: str
    bytes: int = 0


class EgressDenial(_Reply):
    """Requests to one host and port the egress proxy denied (host None: the sum of the
    denials beyond its per-minute lines), the last at ``last``."""

    host: str | None = None
    port: int | None = None
    count: int = 0
    last: float = 0.0
    why: str = ""


class EgressView(_Reply):
    """How an agent reaches the network (``lineage.get`` only; None elsewhere): ``proxy``
    (its egress proxy, allowing ``allow``), ``host`` (the host's network: ``network:
    host``, or a runtime that does not confine agents), ``none``, ``unknown`` (its sandbox
    is gone); and what its proxy denied it, the most recent hosts first."""

    network: str | None = None
    allow: list[str] = msgspec.field(default_factory=list)
    denied: int = 0
    denied_hosts: list[EgressDenial] = msgspec.field(default_factory=list)


class LineageView(_Reply):
    """A lineage as ``lineage.*`` show it (no token, no config beyond these fields)."""

    id: str
    name: str | None = None
    provider: str = "generic"
    status: str = "ACTIVE"
    lifecycle: str = "HEALTHY"
    exec: str | None = None  # the current attempt
    attempt: int = 0
    revivals: int = 0
    turns: int = 0
    context_pct: float | None = None
    model: str | None = None
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    provider_session_id: str | None = None
    reason: str | None = None
    revival: str = "revive"
    heartbeat: str | None = None  # ACTIVE, STALE, CRASHED, or IDLE (waits for its user)
    # Since when an interactive agent waits for its user at its prompt (None: a turn is
    # in progress, or it is not interactive).
    waiting_since: float | None = None
    revive_at: float | None = None  # ORPHANED: revival due; WAITING_LIMIT: the reset time
    exit_reason: str | None = None  # why the last attempt ended (tether.agent.exits)
    limit_waits: int = 0  # attempts that ended usage-limited (not revivals)
    fenced_exits: int = 0  # attempts its monitor fenced: its host lost its fleet lease
    has_handoff: bool = False
    snapshot: str | None = None
    worktree: str | None = None
    created_at: float = 0.0
    predecessor: str | None = None
    port_base: int | None = None  # TETHER_PORT_BASE, when its repository asks for ports
    handed_off: str | None = None  # the branch hand-off: None, "ok" or "failed"
    egress: EgressView | None = None  # its network and what its egress proxy denied


class LineageFinished(LineageView, kw_only=True):
    # This call's hand-off: ok, branch, remote, head, steps (each step's exit_code and
    # output_tail); None when the lineage had been handed off already.
    handoff: dict[str, Any] | None = None


class AgentStarted(LineageView, kw_only=True):
    exec_view: ExecView | None = None  # None: the first attempt did not start (see reason)


class TurnReply(_Reply):
    lineage: str
    turn: int
    lifecycle: str
    context_pct: float | None = None
    instructions: str | None = None
    snapshot: str | None = None
    # The budgets this turn found reached: [{"scope", "policy", "reason"}].
    budget: list[dict[str, str]] = msgspec.field(default_factory=list)


class Heartbeat(_Reply):
    lifecycle: str
    heartbeat: str


class ToolDecision(_Reply):
    allowed: bool
    reason: str
    lifecycle: str


class Handoff(_Reply):
    ok: bool
    path: str


class HookReply(_Reply):
    """What a provider's hook program prints (``stdout``) and exits with."""

    kind: str
    allowed: bool = True
    reason: str = "ok"
    stdout: bytes = b""  # base64 on the wire
    exit_code: int = 0


class ReapReport(_Reply):
    swept: int = 0
    heartbeat_files_removed: int = 0


class Removed(_Reply):
    id: str
    bytes: int


class RemoveReport(_Reply):
    removed: list[Removed]


class PrunedExec(_Reply):
    id: str
    sandbox: str
    name: str | None = None
    bytes: int = 0
    ended_at: float | None = None
    why: str = ""


class PruneReport(_Reply):
    """What ``retention.prune`` removed, or with ``dry_run`` would remove."""

    dry_run: bool
    execs: list[PrunedExec]
    log_bytes: int = 0
    run_files: int = 0
    run_bytes: int = 0
    events: int = 0
    events_floor: int = 0
    schedule_runs: int = 0  # scheduled runs' history rows (older than the journal's age)


class SpaceOf(_Reply):
    id: str
    name: str | None = None
    bytes: int = 0
    execs: int = 0


class DiskUsage(_Reply):
    """``retention.df``: apparent bytes under the home, by kind, sandbox and lineage."""

    home: str
    total: int
    kinds: dict[str, int]
    sandboxes: list[SpaceOf]
    lineages: list[SpaceOf]
    policy: dict[str, float]
    schedule_runs: int = 0  # scheduled runs kept (pruned at the journal's age)


class ExecList(_Reply):
    execs: list[ExecView]
    total: int | None = None  # how many match in all (a page holds some of them)


class SandboxList(_Reply):
    sandboxes: list[SandboxRecord]


class LineageList(_Reply):
    lineages: list[LineageView]
    total: int | None = None


class DigestBuilt(_Reply):
    built: int = 0
    failed: int = 0
    drafts: int = 0
    unchanged: int = 0
    nodes: list[str] = msgspec.field(default_factory=list)  # "<id> v<N> <STATE>"


class DigestPeriod(_Reply):
    id: str
    level: str
    label: str
    start: float
    end: float


class DigestTree(_Reply):
    """A period's node (None until a pass has seen a child) and its children's nodes."""

    period: DigestPeriod
    node: DigestNode | None = None
    children: list[DigestNode] = msgspec.field(default_factory=list)
    versions: list[DigestNode] | None = None


class DigestRecent(_Reply):
    nodes: list[DigestNode]


class CostSum(_Reply):
    """Turns and what they cost; ``cost_usd`` is None (unknown) when a turn's model has
    no price, and ``priced_usd`` is then the part that is known."""

    turns: int
    cost_usd: float | None
    priced_usd: float
    unpriced_turns: int
    tokens: dict[str, int]


class CostRow(CostSum):
    key: str  # the attempt, lineage, sandbox, day or model


class CostReport(_Reply):
    by: str
    rows: list[CostRow]
    total: CostSum
    notes: list[str]
    since: float | None = None
    price_files: list[str] = msgspec.field(default_factory=list)


class DailyBudget(_Reply):
    budget_usd: float
    policy: str


class LineageBudget(_Reply):
    lineage: str
    name: str | None
    status: str
    budget_usd: float
    policy: str
    spent_usd: float  # what its priced turns cost
    unpriced_turns: int = 0  # turns whose model has no price: their cost is unknown


class Budgets(_Reply):
    day: str
    spent_today_usd: float
    daily: DailyBudget | None
    lineages: list[LineageBudget]
    unpriced_today: int = 0


class LineageStory(_Reply):
    """One agent's story: the lineage, its attempts in order, and their journal."""

    lineage: LineageView
    attempts: list[ExecRecord]
    events: list[Event]




class DeliveryView(_Reply):
    """One delivery of a hook (an outbox row); ``key`` is its idempotency key."""

    id: int
    key: str
    gseq: int
    type: str
    state: str  # PENDING | PROCESSING | COMPLETED | FAILED | DEAD
    tries: int
    next_at: float
    last_error: str | None = None
    updated_at: float = 0.0


class WebhookView(HookRecord, kw_only=True):
    """A hook and how many of its deliveries are in each state."""

    counts: dict[str, int] = msgspec.field(default_factory=dict)


class WebhookDetail(WebhookView, kw_only=True):
    deliveries: list[DeliveryView] = msgspec.field(default_factory=list)  # newest first
    dead: list[DeliveryView] = msgspec.field(default_factory=list)  # the dead letters


class WebhookList(_Reply):
    hooks: list[WebhookView]


class WebhookRemoved(_Reply):
    name: str
    undelivered: int = 0


class WebhookRetried(_Reply):
    name: str
    retried: int = 0


class Metrics(_Reply):
    """``daemon.metrics``: the Prometheus text exposition, ready to serve."""

    text: str
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"




class JobView(JobRecord, kw_only=True):
    """A scheduled job as shown (its env's names only), with its live runs' count."""

    live: int = 0


class JobDetail(JobView, kw_only=True):
    recent: list[RunRecord] = msgspec.field(default_factory=list)  # newest first


class JobList(_Reply):
    jobs: list[JobView]


class SchedulerStatus(_Reply):
    jobs: list[JobView]  # one page
    next_due: float | None = None
    total: int | None = None  # jobs on every page (None: a daemon from before paging)
    next: str | None = None  # the next page's cursor (``after``), None after the last


__all__ = ["AgentStarted", "AgentSummary", "CopyReport", "DeliveryView", "DigestBuilt",
           "DigestPeriod", "DigestRecent", "DigestTree", "EventPage", "ExecView", "Handoff",
           "Health", "Heartbeat", "HookReply", "JobDetail", "JobList", "JobView", "LineageStory",
           "LineageView", "LogChunk", "Metrics", "ReapReport", "RuntimeStatus", "SchedulerStatus",
           "Status", "StatusCounts", "ToolDecision", "TurnReply", "WebhookDetail", "WebhookList",
           "WebhookRemoved", "WebhookRetried", "WebhookView"]
