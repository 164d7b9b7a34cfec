"""The provider interface. A provider is pure: it builds command lines and files,
and translates the agent's own hook payloads into tether's normalized events. It
never talks to the daemon itself (the ``tether agent hook`` command does that)."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

if TYPE_CHECKING:
    from tether.model.records import UsageCursor


@dataclass(frozen=True)
class SessionContext:
    """What a provider may use to wire an agent back to tether."""

    home: str  # the tether home
    socket: str  # the daemon socket (also in the agent's env as TETHER_SOCKET)
    session: str  # tether session id (TETHER_SESSION)
    lineage: str
    state_dir: str  # a private directory for this lineage's provider files
    # argv prefix of the hook program, e.g. [python, "-m", "tether.agent.hook", "--home", H];
    # a provider appends its name and the event name.
    hook_command: tuple[str, ...]
    # True when the runtime confines the agent (bwrap): it binds what the plan's
    # ``views`` name, so a provider may show the agent a file of its own at a host path.
    confined: bool = False
    # Whether the agent has a terminal: a CLI run without one is resumed headless.
    tty: bool = True
    # Its network is tether's egress proxy (an allow-list): the provider turns off the
    # CLI's own telemetry and update checks — nothing else — where the user has not set
    # them (``Provider.quiet_env``, or the CLI's config in the plan; docs/SECURITY.md).
    egress: bool = False
    # For a resume: what asks the session to carry on (built from the drain snapshot: the
    # last request, the handoff, why the last attempt ended). A headless resume needs a
    # prompt; an interactive one uses it only when ``interrupted``.
    continuation: str = ""
    # The last attempt ended in the middle of a turn (not at its prompt).
    interrupted: bool = False


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Files to write (path -> bytes, mode 0600) before the process starts.
    files: dict[str, bytes] = field(default_factory=dict)
    # A confining runtime only: host path the agent sees -> one of ``files``, shown there
    # read-only instead of what the host has (the agent's config with tether's hooks).
    views: dict[str, str] = field(default_factory=dict)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    # Tokens occupying the context window after the last turn, and the window size.
    context_tokens: int | None = None
    context_window: int | None = None

    @property
    def context_pct(self) -> float | None:
        if not self.context_tokens or not self.context_window:
            return None
        return 100.0 * self.context_tokens / self.context_window


@dataclass
class HookEvent:
    """One hook call, normalized.

    ``kind`` is one of: ``session_start`` (carries ``provider_session_id``),
    ``turn_start`` (a turn began: a prompt was submitted), ``turn_end`` (a completed
    turn; an interactive agent then waits for its user), ``tool_request`` (asks whether
    a tool call is allowed: ``tool_name``, ``tool_input``; also a turn in progress),
    ``turn_failed`` (a turn ended on an API error: ``error``, e.g. ``rate_limit``),
    ``status`` (what the CLI shows of its context: ``model``, ``context_window``),
    ``pre_compact``, ``session_end``, ``waiting`` (the agent needs its user: journaled
    as ``agent.waiting``), ``other`` (refreshes the heartbeat only).

    Between a ``turn_end`` and the next ``turn_start`` (or ``tool_request``) an
    interactive agent waits for its user: tether never takes that silence for a hang.
    """

    kind: str
    provider_session_id: str | None = None
    # session_start: why it started (Claude's ``source``: startup, resume, clear, compact).
    session_source: str | None = None
    transcript_path: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    model: str | None = None
    # turn_failed: the CLI's error class (``usage_limit`` for a usage or rate limit,
    # which tether waits out; else the CLI's own name) and its message, e.g. when the
    # limit resets.
    error: str | None = None
    error_message: str | None = None
    # status: the context window the CLI really uses (tokens).
    context_window: int | None = None
    usage: Usage | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class HookReply:
    """What the hook program prints and exits with, in the provider's own format."""

    stdout: bytes = b""
    exit_code: int = 0


class Provider:
    """Base class; see ``generic.py`` for the smallest complete one."""

    name = "base"
    # Names of argv[0] (basename) that select this provider in ``tether run NAME ...``.
    commands: tuple[str, ...] = ()
    # Regexes over an attempt's last output that say why it ended (tether.agent.exits):
    # usage limits, context exhaustion, a question for the user. Strings, compiled only
    # when an attempt ends (the hook program imports this module).
    usage_limit_patterns: tuple[str, ...] = ()
    out_of_context_patterns: tuple[str, ...] = ()
    waiting_patterns: tuple[str, ...] = ()
    # A CLI without hooks: a turn has ended when its output has been quiet this many
    # seconds (and, when set, its last output matches ``turn_end_pattern``). None: the
    # CLI reports its turns itself (hooks, notify, or the tether protocol).
    turn_idle_seconds: float | None = None
    turn_end_pattern: str | None = None
    # Regexes over the CLI's output: group 1 is the context used, in percent; group 1
    # the provider session id; groups 1 and 2 (or named ``input`` and ``output``) a turn's
    # input and output tokens (with an optional k/M suffix; named groups ``cache_write``
    # and ``cache_read`` the cache's).
    # Read at a turn the daemon inferred from the output.
    context_pattern: str | None = None
    session_pattern: str | None = None
    usage_pattern: str | None = None
    # Every turn of this CLI prints a ``usage_pattern`` line (one per model call): output
    # without one is no turn (a banner, a local command, a redraw).
    turn_needs_usage = False
    # A turn's end naming another session than the lineage's moves the lineage onto it
    # (a session start it missed). False: the CLI ends turns of side threads too (Codex's
    # task title), which are neither the lineage's turns nor its session; only a session
    # start moves it.
    follows_session_at_turn_end = True
    # Where this profile comes from and how deep it goes (``tether`` docs, README).
    notes = ""
    # What of the user's home a sandboxed session of this CLI sees besides every agent's
    # config (``confinement.AGENT_CONFIG_PATHS``), relative to the home: read-write (its
    # state), and read-only when they exist (its config and keys: Aider's ``~/.env``).
    home_config: tuple[str, ...] = ()
    home_config_read_only: tuple[str, ...] = ()
    # The CLI's documented variables that turn off its telemetry and its update checks,
    # and nothing else: set for an agent behind tether's egress proxy (the sandbox denies
    # those hosts anyway, and each try would be a journaled denial) unless the lineage's
    # or its sandbox's environment gives them; never with the host's network.
    quiet_env: Mapping[str, str] = MappingProxyType({})
    # Variables by which the CLI decides it has no user even on a terminal (Gemini CLI:
    # ``CI=true`` makes it headless, "No input provided via stdin", exit 42). Forwarded
    # from a shell in a CI job they describe that job, not the session: a session with a
    # terminal (``-t``) is started without them.
    headless_env: tuple[str, ...] = ()
    # True when ``settle_turn`` reads a record the CLI may write only after its turn-end
    # hook has returned: the daemon answers the hook at once and counts the turn after.
    settles_turns = False

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        raise NotImplementedError

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """The command line that resumes a session (``claude --resume ID`` …).

        ``argv`` is the original launch command; ``snapshot_path`` is the drain
        snapshot (also exported as ``TETHER_DRAIN_SNAPSHOT``).
        """
        raise NotImplementedError

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        """Translate one hook call (its event name and JSON payload)."""
        raise NotImplementedError

    def can_resume(self, provider_session_id: str | None,
                   cursor: UsageCursor | None) -> bool:
        """Whether the agent's session can be resumed (its CLI wrote its conversation
        down); when not, a revival starts the agent afresh."""
        return True

    def settle_turn(self, ev: HookEvent, cursor: UsageCursor | None) -> UsageCursor | None:
        """A ``turn_end``'s usage, model and messages from the agent's own record of its
        API calls, read from ``cursor`` once the record holds the turn's end (waiting a
        moment for it: a CLI may run its hook before it has written the turn); returns
        the cursor after what was counted, so that each call is counted exactly once.
        The default: the hook payload says it all (``parse_hook``)."""
        return cursor

    def follow_record(self, ev: HookEvent, cursor: UsageCursor | None) -> UsageCursor | None:
        """A ``session_start`` of a new session whose record is another file: what is
        left of the old one is kept as pending usage, and counting goes on in the new."""
        return cursor

    def reply(self, event: HookEvent, allowed: bool, reason: str) -> HookReply:
        """The hook program's output for a decision (deny output when not allowed)."""
        return HookReply()


def split_args(args: list[str], *, value_opts: frozenset[str],
               variadic_opts: frozenset[str] = frozenset(),
               optional_value_opts: frozenset[str] = frozenset(),
               ) -> list[tuple[str | None, list[str]]]:
    """Group a CLI's ``args`` into (option name, its words) and (None, [positional]), so
    a provider can drop or replace options when it builds a resume command line.

    ``value_opts`` take one value, ``variadic_opts`` take words up to the next option,
    ``optional_value_opts`` take a value only if the next word is not an option.
    """
    items: list[tuple[str | None, list[str]]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            items.extend((None, [rest]) for rest in args[i - 1:])
            break
        if not arg.startswith("-") or arg == "-":
            items.append((None, [arg]))
            continue
        name, eq, _ = arg.partition("=")
        words = [arg]
        if eq and arg.startswith("--"):
            items.append((name, words))
            continue
        if name in value_opts:
            if i < len(args):
                words.append(args[i])
                i += 1
        elif name in variadic_opts:
            while i < len(args) and not args[i].startswith("-"):
                words.append(args[i])
                i += 1
        elif name in optional_value_opts and i < len(args) and not args[i].startswith("-"):
            words.append(args[i])
            i += 1
        items.append((name, words))
    return items


MAX_AGENT_FILE_BYTES = 256 * 1024 * 1024  # a longer transcript or rollout is not read


@dataclass
class AgentFiles:
    """Where files an agent names (a transcript, a rollout) may be read from while one of
    its hook events is translated: ``roots`` are real directories the agent can write
    anyway (its provider config, its state dir, its workspace), so the daemon reads
    nothing for it that it could not read itself; ``refused`` collects the paths turned
    down, for the daemon to journal."""

    roots: tuple[str, ...]
    refused: list[str] = field(default_factory=list)


#: Set by the daemon around ``parse_hook`` for a sandboxed agent; None: an unsandboxed
#: agent, which runs as the user and may name any file the user can read.
AGENT_FILES: ContextVar[AgentFiles | None] = ContextVar("agent_files", default=None)
#: Set by the daemon around a read that may wait for an agent's record (``settle_turn``):
#: once set, the wait ends at once (the daemon is stopping; the turn is counted later).
SETTLE_STOP: ContextVar[threading.Event | None] = ContextVar("settle_stop", default=None)


def settle_stopped() -> bool:
    stop = SETTLE_STOP.get()
    return stop is not None and stop.is_set()


def open_agent_file(path: str) -> TextIO | None:
    """:func:`open_agent_bytes`, as text (UTF-8, errors replaced)."""
    raw = open_agent_bytes(path)
    return None if raw is None else io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def open_agent_bytes(path: str) -> BinaryIO | None:
    """Open a file an agent named (a transcript, a rollout) for reading, or None. The
    path comes from the agent: never block on a FIFO or device, never follow a planted
    symlink, never read without bound, and under :data:`AGENT_FILES` only beneath its
    roots, with no symlink at any level. (Imported here: the daemon reads agent files,
    the hook program, which loads this module, never does.)"""
    from tether.hostio.untrusted import NotRegular, open_regular

    policy = AGENT_FILES.get()
    try:
        if policy is None:
            return open_regular(os.path.expanduser(path), max_bytes=MAX_AGENT_FILE_BYTES)
        return _open_beneath(os.path.expanduser(path), policy)
    except (OSError, ValueError, NotRegular):
        return None


def agent_file_unwritten(path: str) -> bool:
    """Whether a file an agent named does not exist yet (and was not refused by
    :data:`AGENT_FILES`): worth waiting for, as a CLI writes its record after its hook."""
    policy = AGENT_FILES.get()
    if policy is not None and path in policy.refused:
        return False
    return not os.path.lexists(os.path.expanduser(path))


def _open_beneath(path: str, policy: AgentFiles) -> BinaryIO:
    import stat

    from tether.hostio.beneath import open_beneath
    from tether.hostio.paths import is_within
    from tether.hostio.untrusted import NotRegular

    full = os.path.normpath(os.path.abspath(path))
    root = next((r for r in policy.roots if is_within(full, r) and full != r), None)
    if root is None:
        policy.refused.append(path)
        raise NotRegular(path, "not where the agent keeps its files")
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_beneath(dfd, os.path.relpath(full, root), os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise  # not written yet (a CLI writes its record after its hook): not refused
    except OSError:
        policy.refused.append(path)  # a symlink on the way, or not a directory
        raise
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_AGENT_FILE_BYTES:
        os.close(fd)
        raise NotRegular(path, "not a regular file of a bounded size")
    return os.fdopen(fd, "rb")
