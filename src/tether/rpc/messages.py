"""Typed params of every JSON-RPC method (docs/PROTOCOL.md mirrors this file).

Unknown fields are refused (``forbid_unknown_fields``) so that a typo in a param
name is an error, not a silently ignored option. Where params carry a record
(``exec.start`` an ``ExecSpec``, ``agent.start`` an ``AgentOptions``) they subclass
it: the record gives the fields and their defaults, the params add the checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from tether.model.records import (
    AGING_PCT,
    CRASH_LOOP_SECONDS,
    CRASHED_AFTER,
    DEFAULT_SANDBOX,
    DYING_PCT,
    KILL_GRACE,
    MAX_REVIVALS,
    STALE_AFTER,
    AgentOptions,
    ExecSpec,
)

NonEmpty = Annotated[str, Meta(min_length=1, max_length=4096)]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
Seconds = Annotated[float, Meta(ge=0, le=10 * 365 * 86400)]
# Journal cursors and log offsets are SQLite integers and file offsets: 64-bit signed.
Cursor = Annotated[int, Meta(ge=0, le=2**63 - 1)]
# What ends up in a process's argv, environment or path: a C string, so no NUL byte;
# an environment name is also neither empty nor holds "=". Checked here, on the wire,
# and not on the records, so that no stored row can become undecodable.
Arg = Annotated[str, Meta(max_length=131072, pattern=r"^[^\x00]*\Z")]
EnvName = Annotated[str, Meta(min_length=1, max_length=4096, pattern=r"^[^=\x00]*\Z")]
Env = dict[EnvName, Arg]
HostPath = Annotated[str, Meta(max_length=4096, pattern=r"^[^\x00]*\Z")]


class _P(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class Empty(_P):
    pass


#: The runtime of a sandbox created from flat params that name none. (A plain string on
#: the wire: the daemon's registry refuses an unknown one with the list of known ones.)
FLAT_RUNTIME = "process"


class SandboxCreate(_P):
    name: Name
    runtime: NonEmpty = FLAT_RUNTIME
    workspace: HostPath | None = None
    env: Env = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    network: Literal["none", "private", "host"] | None = None
    idle_timeout: Annotated[float, Meta(gt=0)] | None = None  # seconds
    ttl: Annotated[float, Meta(gt=0)] | None = None  # seconds
    # A YAML spec file's text (docs/examples/sandbox.yaml), or the same spec as an
    # object (what the CLI's flags build); when given it is the whole spec and the
    # fields above must be left at their defaults.
    spec: Annotated[str, Meta(max_length=1024 * 1024)] | dict[str, Any] | None = None
    set: list[Annotated[str, Meta(max_length=4096)]] = msgspec.field(default_factory=list)
    spec_name: Annotated[str, Meta(max_length=4096)] = "<spec>"  # for error messages
    base_dir: str | None = None  # relative paths in the spec resolve against it
    # Deleted once its execs have ended (`tether run` with sandbox flags).
    ephemeral: bool = False


class SandboxRef(_P):
    sandbox: NonEmpty


class SandboxCopy(_P):
    """Copy between the host and a sandbox. Host paths are absolute; ``docker cp``'s
    rule applies: into the destination if it is a directory, else as it."""

    sandbox: NonEmpty
    direction: Literal["in", "out"]
    src: Annotated[str, Meta(min_length=1, max_length=4096)]
    dst: Annotated[str, Meta(min_length=1, max_length=4096)]


class SandboxStop(_P):
    sandbox: NonEmpty
    grace: Seconds = 5.0
    # sandbox.delete: record DELETED even when dockerd cannot remove its containers
    # now; they are removed as labelled leftovers once it answers again.
    force: bool = False


class SandboxList(_P):
    all: bool = False


Argv = Annotated[list[Arg], Meta(min_length=1)]
RequestKey = Annotated[str, Meta(min_length=8, max_length=128)]


class ExecStart(_P, ExecSpec, kw_only=True):
    """An ``ExecSpec`` (env, cwd, tty, stdin as it has them), where, and a request key."""

    argv: Argv
    env: Env = msgspec.field(default_factory=dict)
    cwd: HostPath | None = None
    timeout: Annotated[float, Meta(gt=0, le=10 * 365 * 86400)] | None = None
    name: Name | None = None
    kill_grace: Seconds = KILL_GRACE
    rows: Annotated[int, Meta(ge=1, le=10000)] | None = None
    cols: Annotated[int, Meta(ge=1, le=10000)] | None = None
    sandbox: NonEmpty = DEFAULT_SANDBOX
    request_key: RequestKey | None = None
    #: Where the ``auto`` default sandbox cannot confine the command (a system or home
    #: cwd), run it unsandboxed with a notice instead of refusing: ``tether run`` only.
    unconfined_ok: bool = False


class ExecRef(_P):
    exec: NonEmpty


ExecStateName = Literal["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"]
LineageStatusName = Literal["ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT",
                            "FINISHED", "REAPED", "FAILED"]
PageLimit = Annotated[int, Meta(ge=1, le=1000)]
Query = Annotated[str, Meta(max_length=256, pattern=r"^[^\x00]*\Z")]


class ExecList(_P):
    sandbox: str | None = None
    all: bool = False
    #: Only these states (instead of what ``all`` says).
    states: Annotated[list[ExecStateName], Meta(min_length=1, max_length=5)] | None = None
    query: Query | None = None  # in the id, name or command line, ignoring ASCII case
    limit: PageLimit | None = None  # a page of at most this many (None: every match)
    offset: Annotated[int, Meta(ge=0, le=2**31)] = 0
    newest_first: bool = False


class ExecWait(_P):
    exec: NonEmpty
    timeout: Seconds | None = None


class ExecCancel(_P):
    exec: NonEmpty
    signal: int | Annotated[str, Meta(max_length=64)] = "TERM"
    grace: Seconds = 5.0
    reason: Annotated[str, Meta(max_length=1024)] = ""


class ExecLogs(_P):
    exec: NonEmpty
    stream: Literal["stdout", "stderr", "pty", "all"] = "stdout"
    offset: Cursor = 0
    limit: Annotated[int, Meta(gt=0, le=1024 * 1024)] = 256 * 1024
    wait: Annotated[float, Meta(ge=0, le=60)] = 0.0


class ExecRemove(_P):
    execs: Annotated[list[NonEmpty], Meta(min_length=1, max_length=1000)]


class RetentionPrune(_P):
    #: Seconds: remove ended execs' logs and run files, and journal events, older than
    #: this; null applies the daemon's policy (ages and the logs/ size cap).
    older_than: Seconds | None = None
    dry_run: bool = False


class EventsList(_P):
    since: Cursor = 0
    sandbox: NonEmpty | None = None
    epoch: NonEmpty | None = None  # the journal epoch ``since`` was read in
    limit: Annotated[int, Meta(gt=0, le=10000)] = 1000
    #: The newest ``limit`` events after ``since`` (still in cursor order), not the oldest.
    last: bool = False


class EventsSubscribe(_P):
    since: Cursor = 0
    sandbox: NonEmpty | None = None
    epoch: NonEmpty | None = None  # the journal epoch ``since`` was read in


class EventsUnsubscribe(_P):
    subscription: NonEmpty


Pct = Annotated[float, Meta(ge=0, le=100)]


class AgentStart(_P, AgentOptions, kw_only=True):
    """An ``AgentOptions`` (env, cwd, tty, worktree as it has them), a name, and a
    request key: a retried agent.start with the same key returns the same lineage."""

    argv: Argv
    env: Env = msgspec.field(default_factory=dict)
    cwd: HostPath | None = None
    worktree: HostPath | None = None
    # None: from argv[0] (claude, codex), else generic.
    provider: str | None = None  # type: ignore[assignment]
    sandbox: NonEmpty = DEFAULT_SANDBOX
    revival: Literal["revive", "reap", "ask"] = "revive"
    max_revivals: Annotated[int, Meta(ge=0, le=1000)] = MAX_REVIVALS
    crash_loop_seconds: Annotated[float, Meta(ge=0, le=86400)] = CRASH_LOOP_SECONDS
    successor: Literal["none", "auto"] = "none"
    aging_pct: Pct = AGING_PCT
    dying_pct: Pct = DYING_PCT
    stale_after: Annotated[float, Meta(gt=0, le=86400)] = STALE_AFTER
    crashed_after: Annotated[float, Meta(gt=0, le=86400)] = CRASHED_AFTER
    issue: Annotated[str, Meta(max_length=256)] | None = None
    # The tracker's own id for ``issue`` (agentfactory's issueId); derived when absent.
    issue_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    budget_usd: Annotated[float, Meta(gt=0, le=1_000_000)] | None = None
    budget_policy: Literal["pause", "stop"] = "pause"
    # More hosts its egress proxy lets it reach (tether.egress.policy entries; the
    # handler says what is wrong in one).
    allow_domains: Annotated[list[Annotated[str, Meta(max_length=300)]],
                             Meta(max_length=256)] = msgspec.field(default_factory=list)
    name: Name | None = None
    force: bool = False
    request_key: RequestKey | None = None


class _Auth(_P):
    session: NonEmpty
    token: NonEmpty


class AgentTurn(_Auth):
    context_pct: Pct | None = None
    usage: dict[str, Annotated[int, Meta(ge=0, le=2**63 - 1)]] | None = None
    model: Annotated[str, Meta(max_length=256)] | None = None
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)
    config: dict[str, Any] | None = None


class AgentHeartbeat(_Auth):
    activity: Annotated[str, Meta(max_length=256)] | None = None


class AgentAuthorize(_Auth):
    tool: Annotated[str, Meta(min_length=1, max_length=256)]
    input: Any = None


class AgentHandoff(_Auth):
    text: Annotated[str, Meta(max_length=1024 * 1024)]


class AgentHook(_Auth):
    provider: NonEmpty
    event: Annotated[str, Meta(min_length=1, max_length=64)]
    payload: dict[str, Any] = msgspec.field(default_factory=dict)


class LineageRef(_P):
    lineage: NonEmpty


class LineageList(_P):
    all: bool = False
    #: Only these statuses (instead of what ``all`` says).
    statuses: Annotated[list[LineageStatusName], Meta(min_length=1, max_length=8)] | None = None
    query: Query | None = None  # in the id, name, provider or worktree
    limit: PageLimit | None = None
    offset: Annotated[int, Meta(ge=0, le=2**31)] = 0
    newest_first: bool = False


class LineageFinish(_P):
    lineage: NonEmpty
    commit: bool = False  # commit what the agent left first, whatever the repository says


class LineageResolve(_P):
    lineage: NonEmpty
    action: Literal["revive", "reap"]


DigestLevel = Literal["hour", "day", "week", "month"]
DigestLabel = Annotated[str, Meta(min_length=1, max_length=64)]


class DigestBuild(_P):
    #: A summarizer command for this pass (shell words), instead of the daemon's own.
    summarizer: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None


class DigestShow(_P):
    level: DigestLevel = "day"
    label: DigestLabel | None = None  # None: the current period
    versions: bool = False


class DigestRecent(_P):
    level: DigestLevel = "day"
    count: Annotated[int, Meta(ge=1, le=1000)] = 7


class CostReport(_P):
    by: Literal["attempt", "lineage", "sandbox", "day", "model"] = "lineage"
    since: Annotated[float, Meta(ge=0)] | None = None  # wall time (epoch seconds)


class BudgetSet(_P):
    #: Dollars; or none with ``clear`` (a lineage's falls back to its agent.start one).
    usd: Annotated[float, Meta(gt=0, le=1_000_000)] | None = None
    clear: bool = False
    policy: Literal["pause", "stop"] = "pause"
    lineage: NonEmpty | None = None  # None: the daily budget over every agent
# ---------------------------------------------------------------- hooks (webhooks)
EventGlob = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.*?\[\]-]+$")]
HookUrl = Annotated[str, Meta(max_length=4096, pattern=r"^https?://[^\s]+$")]


class HookAdd(_P):
    name: Name
    on: Annotated[list[EventGlob], Meta(min_length=1, max_length=64)]
    url: HookUrl | None = None
    exec: Annotated[list[Arg], Meta(min_length=1)] | None = None
    cwd: HostPath | None = None
    #: A file the daemon reads once, now: its bytes become the HMAC key (stored 0600
    #: in the home, never returned).
    secret_file: HostPath | None = None
    sandbox: NonEmpty | None = None
    match_name: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    nonzero: bool = False
    max_tries: Annotated[int, Meta(ge=1, le=100)] = 8


class HookRef(_P):
    name: NonEmpty


class HookShow(_P):
    name: NonEmpty
    limit: Annotated[int, Meta(ge=1, le=10000)] = 20


class HookRetry(_P):
    name: NonEmpty
    delivery: Annotated[int, Meta(ge=1)] | None = None
Duration = Annotated[float, Meta(gt=0, le=10 * 365 * 86400)]


class ScheduleAdd(_P):
    """A ``JobSpec`` flattened: when (``cron`` in ``tz``, or ``every`` seconds), what
    (``exec.start``'s fields), and the policies; the daemon builds the record."""

    name: Name
    argv: Argv
    cron: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    every: Duration | None = None
    tz: Annotated[str, Meta(min_length=1, max_length=128)] = "UTC"
    env: Env = msgspec.field(default_factory=dict)
    cwd: HostPath | None = None
    timeout: Duration | None = None  # per run
    kill_grace: Seconds = KILL_GRACE
    sandbox: NonEmpty = DEFAULT_SANDBOX
    overlap: Literal["skip", "concurrent", "queue"] = "skip"
    queue: Annotated[int, Meta(ge=1, le=1000)] = 1
    max_concurrent: Annotated[int, Meta(ge=1, le=10000)] | None = None
    jitter: Seconds = 0.0
    missed: Literal["skip", "run-once"] = "skip"
    unconfined_ok: bool = False  # as exec.start's: each run's


class ScheduleRef(_P):
    job: NonEmpty


class ScheduleShow(_P):
    job: NonEmpty
    limit: Annotated[int, Meta(gt=0, le=10000)] = 20


class ScheduleList(_P):
    all: bool = False


#: ``scheduler.status``'s page when a caller gives no ``limit`` (one from before paging):
#: a reply stays well under a MB however many jobs there are.
STATUS_PAGE = 1000


class SchedulerStatus(_P):
    limit: Annotated[int, Meta(gt=0, le=5000)] = STATUS_PAGE
    #: The ``next`` of the previous page; none for the first.
    after: Annotated[str, Meta(min_length=1, max_length=20)] | None = None
