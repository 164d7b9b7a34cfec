"""Typed durable records (category A) and journal events.

Every struct here is encoded with msgspec JSON into the store. Decoding ignores
fields it does not know (written by a newer tether) and fills defaults for fields
that are absent (written by an older one), so the store never has to rewrite old
rows to add a field. ``tests/unit/test_store.py`` proves both directions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from tether.model.repo import GitPin, RepoConfig

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

# The sandbox spec records below are also the schema of spec files and of
# ``sandbox.create``'s spec object (tether.sandbox.spec converts them with msgspec).
# Constraints hold for every stored row too (the store decodes with them), so only
# rules that every way of making a sandbox enforces belong here. ``description``
# is what an error says was expected; ``extra["form"]`` names a shorthand a spec
# may write instead (a size "512m", a duration "30s", a command line, a
# "SRC:DST[:ro|rw]" mount); ``extra["why"]`` says why a required field is needed and
# ``extra["default_from"]`` which field a spec's value defaults to when it leaves one out;
# ``extra["not_in_spec"]`` marks a field only tether sets.

#: ``auto`` and the names in ``tether.runtime.registry.FACTORIES`` (a test keeps them equal).
RuntimeName = Literal["auto", "process", "bwrap", "docker"]
Size = Annotated[int, Meta(gt=0, description="a size like 512m or 2g (or a number of bytes)",
                           extra={"form": "size", "unit": " bytes"})]
_DURATION = "a duration like 500ms, 30s, 5m or 1h (or a number of seconds)"
Seconds = Annotated[float, Meta(gt=0, description=_DURATION, extra={"form": "duration"})]
SecondsOrZero = Annotated[float, Meta(ge=0, description=_DURATION,
                                      extra={"form": "duration"})]
Image = Annotated[str, Meta(pattern=r"^\S+\Z", description="an image reference (no spaces)")]
#: A docker engine's address, in the docker SDK's and CLI's own transports.
DockerHost = Annotated[str, Meta(
    pattern=r"^(unix:///|tcp://[^/\s]|ssh://[^/\s])\S*\Z",
    description="a docker engine address: unix:///path/to/docker.sock, tcp://HOST:PORT "
                "or ssh://[USER@]HOST[:PORT]")]


class MountSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    # absolute, symlinks resolved, must exist
    source: Annotated[str, Meta(extra={"why": "the host path to mount"})]
    # absolute path inside the sandbox; a spec may leave it out: the same as the source
    target: Annotated[str, Meta(extra={"default_from": "source"})]
    mode: Literal["ro", "rw"] = "ro"


class ResourceSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    memory: Size | None = None  # bytes
    cpus: Annotated[float, Meta(
        gt=0, description="a number of CPUs more than 0, like 1.5")] | None = None
    pids: Annotated[int, Meta(
        gt=0, description="a whole number of processes more than 0")] | None = None


class HealthCheckSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    # run inside the container; healthy when it exits 0 (a string runs with sh -c)
    command: Annotated[list[str], Meta(
        min_length=1, description="a command (a list of strings, or a string)",
        extra={"form": "shell", "why": "what to run; healthy when it exits 0"})]
    interval: Seconds = 1.0
    timeout: Seconds = 5.0
    retries: Annotated[int, Meta(gt=0, description="a whole number of retries more than 0")] = 30
    start_period: SecondsOrZero = 0.0


_COMPANION_WHY = "every companion needs a name and an image"


class CompanionSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: Annotated[str, Meta(
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}\Z",
        description="a name of lowercase letters, digits, '_', '.' and '-' (starting with a "
                    "letter or digit, at most 63 characters)",
        extra={"why": _COMPANION_WHY})]
    image: Annotated[Image, Meta(extra={"why": _COMPANION_WHY})]
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # a string is split into words like a shell would (without running one)
    command: Annotated[list[str], Meta(
        min_length=1, description="a command (a list of strings, or a string)",
        extra={"form": "words"})] | None = None
    health: HealthCheckSpec | None = None
    required: bool = True


#: An egress allow-list entry (``tether.egress.policy``: a host, ``*.domain`` or an
#: address, each optionally with ``:PORT``); the policy module says what is wrong in one.
HostPattern = Annotated[str, Meta(
    min_length=1, max_length=300, pattern=r"^[A-Za-z0-9_.*:\[\]-]+\Z",
    description="a host pattern: a host name (api.example.com), *.example.com, or an "
                "address, each optionally with :PORT")]


class NetworkPolicy(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``network: {allow: [...]}``: the sandbox's agents reach the network only through
    tether's egress proxy (the default for agents in bwrap), and may reach these hosts
    besides their provider's API hosts."""

    allow: Annotated[list[HostPattern], Meta(max_length=256,
                                             description="a list of host patterns")] = \
        msgspec.field(default_factory=list)


#: What ``network`` may say (``None``: the runtime's default).
Network = Annotated[Literal["none", "private", "host"] | NetworkPolicy, Meta(
    description="one of none, private, host, or a mapping {allow: [HOST, ...]}")]


MountItem = Annotated[MountSpec, Meta(
    description='a mount ({source, target, mode} or "SOURCE:TARGET[:ro|rw]")',
    extra={"form": "mount"})]


class SandboxSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The resolved spec of a sandbox: what the store keeps after YAML parsing,
    parameter substitution and ``--set`` overrides (source 000's sandbox-config)."""

    # "auto" is resolved at create: never stored. No default: msgspec omits a default by
    # identity, so a stored or sent spec could silently lose its runtime.
    runtime: RuntimeName
    workspace: str | None = None  # host directory, mounted read-write
    workspace_target: str | None = None  # where it appears inside (default: same path)
    image: Image | None = None  # docker only
    mounts: Annotated[list[MountItem], Meta(description="a list of mounts")] = \
        msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # None: the runtime's default (bwrap: agents through the egress proxy, other execs
    # loopback only); a NetworkPolicy: the proxy, with more hosts allowed for agents.
    network: Network | None = None
    resources: ResourceSpec | None = None
    companions: Annotated[list[CompanionSpec], Meta(description="a list of companions")] = \
        msgspec.field(default_factory=list)
    idle_timeout: Seconds | None = None  # seconds with no running exec and no client
    ttl: Seconds | None = None  # seconds after creation before it is deleted
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    # Made by `tether run` for one command: deleted once its execs have ended.
    ephemeral: Annotated[bool, Meta(extra={"not_in_spec": True})] = False
    # docker: "always" lets dockerd restart containers that exit (not those tether
    # stops), also while tether is down; "never" makes such an exit FAILED.
    restart: Literal["never", "always"] = "never"
    # docker: the engine that runs the sandbox; None is the daemon's own (DOCKER_HOST or
    # the local socket). Every engine call, docker exec and cp for it goes there.
    docker_host: DockerHost | None = None
    # docker with tcp://: a directory holding ca.pem, cert.pem and key.pem; verified TLS.
    docker_cert_path: str | None = None


class SandboxRecord(msgspec.Struct, kw_only=True):
    id: str
    name: str
    state: str
    spec: SandboxSpec
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

    def without_env_values(self) -> ExecSpec:
        """The spec as stored and shown: the names of ``env`` with every value ``""``.
        Values are secrets (an ``API_KEY``, an agent's ``TETHER_TOKEN``) that only the
        monitor, in memory, needs; tether.db is readable by every process of its user."""
        return msgspec.structs.replace(self, env=dict.fromkeys(self.env, ""))


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
    # FAILED before its command was ever spawned, through no fault of the command (the
    # daemon or its monitor died or failed first): an agent attempt is started again.
    never_started: bool = False
    # Why the default sandbox ran it unconfined (its runtime could not sandbox it there):
    # the one-line notice ``tether run`` prints. None: it ran in its sandbox's runtime.
    notice: str | None = None


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
    # Commit what the agent left, push and run the hand-off command when it finishes
    # (``--commit-on-finish``; the repository's ``handoff:`` says where to push).
    commit_on_finish: bool = False
    # Dollars this lineage may spend (None: no budget of its own) and what reaching it
    # does: pause (tool calls denied) or stop (the agent stopped, lineage FINISHED).
    budget_usd: float | None = None
    budget_policy: str = "pause"
    # Hosts its sandbox's egress proxy lets it reach besides its provider's API hosts and
    # the sandbox's ``network.allow`` (``--allow-domain``; tether.egress.policy).
    allow_domains: list[str] = msgspec.field(default_factory=list)


class AgentConfig(AgentOptions, kw_only=True, omit_defaults=True):
    """How a lineage is run and revived; fixed for the lineage's life."""

    # The worktree's git common dir, found once at start (a sandboxed agent's commits
    # write there; its worktree's .git file is the agent's to rewrite).
    git_dir: str | None = None
    # The repository's .tether.yaml as read once, when the user started the lineage, from
    # a place its agent cannot write (tether.agent.repoconfig); a successor inherits it.
    repo: RepoConfig | None = None
    # Where that was: the repository's main checkout (files to ``copy`` come from it), the
    # file and its SHA-256 (a successor whose tree holds another one journals agent.refused).
    repo_root: str | None = None
    repo_file: str | None = None
    repo_sha256: str | None = None
    # The worktree's git directories at start: the daemon's own git runs use these, never
    # what the tree's .git says later (tether.agent.gitpin).
    git_pin: GitPin | None = None
    # The first of the ports leased to this lineage (TETHER_PORT_BASE), if the repository
    # asks for ports; the lease itself is the store's (port_leases, migration 12).
    port_base: int | None = None


class EgressDenial(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Requests to one host and port its egress proxy denied (host None: the sum of those
    beyond the proxy's per-minute lines), the last at ``last``."""

    host: str | None = None
    port: int | None = None
    count: int = 0
    last: float = 0.0
    why: str = ""


class EgressLog(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the egress proxy denied a lineage: ``n`` is the number of the last line of the
    proxy's denial log applied (each is journaled once), ``denied`` the requests in all,
    ``hosts`` the most recent by host and port (at most ``MAX_DENIED_HOSTS``)."""

    n: int = 0
    denied: int = 0
    hosts: list[EgressDenial] = msgspec.field(default_factory=list)


MAX_DENIED_HOSTS = 20


class UsageCursor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """How far a lineage's agent's own record of its API calls (Claude Code's transcript)
    has been counted, so that every call is counted exactly once, whenever it is
    written: the file, the byte offset after its last complete line read, the usage
    counted for the messages seen last (a message's entries may straddle the offset),
    and usage read from an earlier file (a session left by ``/clear``) not yet in a
    turn."""

    path: str
    offset: int = 0
    seen: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    pending: dict[str, int] = msgspec.field(default_factory=dict)


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
    # Attempts begun so far; revivals = attempt - 1 - limit_waits - fenced_exits.
    attempt: int = 0
    # The current attempt's TETHER_TOKEN is never stored (tether.db is readable by every
    # process of its user, a process-runtime agent's too): only its SHA-256, hex.
    token_sha256: str = ""
    token: str = ""  # rows of older daemons: the token itself; cleared at the next attempt
    # Times the current attempt was started again because its exec never started (not a
    # death: no revival, no crash-loop start); 0 at every new attempt.
    restarts: int = 0
    provider_session_id: str | None = None
    turns: int = 0
    context_pct: float | None = None
    model: str | None = None
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    handoff: str | None = None
    # When an ORPHANED lineage is due for revival (wall time), or a WAITING_LIMIT one's
    # usage limit resets (the daemon's clock, which tests may move).
    revive_at: float | None = None
    # Why the last attempt ended (tether.agent.exits.ExitReason), None while it runs.
    exit_reason: str | None = None
    # Attempts that ended usage-limited: not revivals (see `attempt`).
    limit_waits: int = 0
    # Attempts its monitor fenced (its host lost its fleet lease): not revivals either.
    fenced_exits: int = 0
    recent_starts: list[float] = msgspec.field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0
    last_turn_at: float | None = None
    # Since when an interactive (tty) attempt waits for its user at its prompt: set when
    # a turn ends (and when its attempt starts), cleared when the next turn starts (a
    # prompt submitted, a tool called). Hang detection applies only while it is None.
    waiting_since: float | None = None
    # Whether the provider session has a conversation to resume (a turn started in it);
    # a revival of a session without one starts the agent afresh. None: not known (a
    # lineage of an older daemon), resumed as before.
    conversation: bool | None = None
    # The provider session the last turn started in (a hook's session id): a session_start
    # of that session, delivered after its first prompt's hook, does not clear the above.
    turn_session: str | None = None
    # The prompt of the turn last started (a turn_start hook's, at most 4,000 characters):
    # a revival's continuation names it, even when the turn never ended.
    last_prompt: str | None = None
    # Why the last attempt ended, when it ended in the middle of a turn (a conversation
    # started, not waiting at its prompt): its revival is asked to continue the turn.
    interrupted: str | None = None
    # The context window the agent's CLI reports it uses (tokens), when it reports one
    # (Claude Code's status line); else the provider's rule for the model is used.
    context_window: int | None = None
    # How far the agent's transcript has been counted (providers that read one).
    usage_cursor: UsageCursor | None = None
    reason: str | None = None
    predecessor: str | None = None  # the lineage whose handoff seeded this one
    request_key: str | None = None  # the agent.start that created it (retries are no-ops)
    # The branch hand-off's outcome: None (none yet, or none configured), "ok", "failed".
    handed_off: str | None = None
    # Requests its egress proxy denied (agent.egress_denied), None before the first.
    egress: EgressLog | None = None
    # The attempt whose implausible usage report was journaled (agent.refused): once each.
    usage_capped_attempt: int = 0


def to_builtins(obj: Any) -> Any:
    """Turn records into plain JSON-able values (for the wire and ``--json``)."""
    return msgspec.to_builtins(obj)
