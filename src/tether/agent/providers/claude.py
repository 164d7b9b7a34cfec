"""The Claude Code provider.

tether hands Claude Code an extra settings file (``--settings``) whose ``hooks``
section calls back into tether (``<hook_command...> claude <EventName>``) on
``SessionStart``, ``UserPromptSubmit``, ``PreToolUse``, ``Notification``,
``PreCompact``, ``Stop`` and ``SessionEnd``. The hook program feeds the JSON
Claude Code writes on its stdin to :meth:`ClaudeProvider.parse_hook` and prints
what :meth:`ClaudeProvider.reply` returns.

Every field name below was checked against Anthropic's published documentation;
the comments next to the code cite the page. The main references are:

* HOOKS — "Hooks reference", https://code.claude.com/docs/en/hooks (formerly
  https://docs.anthropic.com/en/docs/claude-code/hooks): configuration schema,
  the common input fields, each event's input, the ``PreToolUse`` decision
  control and exit codes.
* CLI — "CLI reference", https://code.claude.com/docs/en/cli-reference:
  ``--settings <file-or-json>`` ("Path to a settings JSON file or a JSON string
  to load additional settings from") and ``--resume, -r`` ("Resume a specific
  session by ID or name"), ``claude --resume abc123``.
* CACHING — "Prompt caching", https://platform.claude.com/docs/en/build-with-claude/prompt-caching
  (and the "Rate limits" page): ``total_input_tokens = cache_read_input_tokens +
  cache_creation_input_tokens + input_tokens`` for a Messages API ``usage`` object.

The transcript (``transcript_path``) is a JSON-lines file. Anthropic documents
where it lives but not its record format; tether reads only the envelope fields
that Anthropic's own Agent SDK reads (``type`` ``"user"``/``"assistant"``,
``message``, ``isSidechain``, ``isMeta``, ``isCompactSummary`` — see ``_internal/sessions.py`` in
github.com/anthropics/claude-agent-sdk-python), and the ``message`` object of an
assistant entry is a Messages API message (``model``, ``content`` blocks,
``usage``). Anything it cannot read is skipped: usage is then ``None``.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from tether.agent.providers.base import (
    HookEvent,
    HookReply,
    LaunchPlan,
    Provider,
    SessionContext,
    Usage,
    agent_file_unwritten,
    open_agent_bytes,
    settle_stopped,
    split_args,
)
from tether.model.records import UsageCursor

SETTINGS_FILE = "claude-settings.json"
#: The prompt of a headless resume when there is no continuation to give.
CONTINUE = "Continue where you left off."
#: A context window reported by the CLI beyond this is not believed (a status line
#: command's input comes from inside the sandbox).
MAX_CONTEXT_WINDOW = 100_000_000

# The hook events tether registers, and the normalized kind each maps to.
# Event names: HOOKS, "Hook lifecycle" table.
EVENT_KINDS: dict[str, str] = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "turn_start",  # a prompt starts a turn (the user's, or -p's)
    "PreToolUse": "tool_request",
    "Notification": "waiting",  # Claude waits for its user (permission, idle prompt)
    "PreCompact": "pre_compact",
    "Stop": "turn_end",
    # HOOKS, "StopFailure": "fires instead of Stop when an API error (rate limit, auth
    # failure, etc.) ended the turn"; input ``error`` (``rate_limit``, ``billing_error``,
    # ``overloaded`` …), ``error_details`` and ``last_assistant_message`` (the message
    # Claude Code shows: "You've hit your session limit · resets 8:56pm (UTC)").
    "StopFailure": "turn_failed",
    "SessionEnd": "session_end",
}
#: tether's ``statusLine`` command (not a hook): Claude Code runs it with the session's
#: state as JSON on stdin — "Status line" (https://code.claude.com/docs/en/statusline):
#: ``model.id``, ``context_window.context_window_size``: the window the CLI really uses.
STATUS_EVENT = "StatusLine"
#: ``StopFailure`` errors that are a usage or rate limit: wait for the reset.
LIMIT_ERRORS = frozenset({"rate_limit", "billing_error"})

# HOOKS, "Matcher patterns": "Use "*", "", or omit matcher entirely to match all
# occurrences"; tool events match on the tool name.
_TOOL_MATCHER_EVENTS = ("PreToolUse",)

# HOOKS, "Common fields": ``timeout`` is in seconds (command default 600). A short
# timeout bounds how long a stuck daemon can stall a tool call; it also raises the
# SessionEnd budget, whose default is only 1.5 s in current releases.
HOOK_TIMEOUT_S = 30

# The context window is the one Claude Code reports in its status line's JSON
# (``context_window.context_window_size``), learned when it runs (an interactive
# session). Else (``-p``, or a status line of the user's own) this rule, by model:
# 200,000 tokens unless the model name says otherwise:
# * a ``[1m]`` suffix (Claude Code's way to ask for the 1M-token window, as in
#   ``--model sonnet[1m]``) means 1,000,000;
# * models whose context window is natively 1M in Claude Code's own model catalog
#   (2.1.332: ``context: {window: 1e6, native_1m: true}`` for claude-opus-4-7,
#   -4-8, -5, -5-5, claude-sonnet-5, -5-5 and claude-fable-5*; Opus 4.8 shows as
#   "Opus 4.8 (1M context)", ``/context`` "…/1m tokens");
# * and if the transcript shows more tokens in context than 200,000, the window
#   must be the larger one, so 1,000,000.
DEFAULT_CONTEXT_WINDOW = 200_000
LARGE_CONTEXT_WINDOW = 1_000_000
_NATIVE_1M_PREFIXES = ("claude-sonnet-5", "claude-opus-5", "claude-opus-4-7",
                       "claude-opus-4-8", "claude-fable-5")
#: How long the count of a turn waits for the transcript to hold the turn's end, polling
#: this often: Claude Code runs ``Stop`` before it has written the turn's last entries,
#: and a new session's transcript was seen written 6-10 s after its first turn's ``Stop``
#: on a loaded machine (the daemon counts in the background: the hook is answered first).
SETTLE_TIMEOUT = 30.0
SETTLE_POLL = 0.05
#: Message ids whose counted usage a cursor remembers (a message's entries straddle).
SEEN_IDS = 16
#: How much of a transcript's start is read to see whether it holds a prompt.
RESUME_PROBE_BYTES = 1024 * 1024

# Options of ``claude`` that take a value, as listed by ``claude --help`` and the
# CLI reference. Variadic ones (``<x...>``) take every following word up to the
# next option, like commander does; optional ones (``[x]``) take the next word
# unless it is an option.
_VALUE_OPTS = frozenset({
    "--agent", "--agents", "--append-system-prompt", "--append-system-prompt-file",
    "--autocompact", "--debug-file", "--effort", "--environment", "--fallback-model",
    "--input-format", "--json-schema", "--max-budget-usd", "--max-turns", "--model", "-n",
    "--name", "--output-format", "--permission-mode", "--permission-prompt-tool",
    "--permission-prompts", "--plugin-dir", "--plugin-url",
    "--remote-control-session-name-prefix", "--session-id", "--setting-sources",
    "--settings", "--system-prompt", "--system-prompt-file", "--system-prompt-snapshot",
})
_VARIADIC_OPTS = frozenset({
    "--add-dir", "--allowedTools", "--allowed-tools", "--betas", "--disallowedTools",
    "--disallowed-tools", "--file", "--mcp-config", "--tools",
})
_OPTIONAL_VALUE_OPTS = frozenset({"-d", "--debug", "--from-pr", "-r", "--resume",
                                  "-w", "--worktree", "--cloud", "--prompt-suggestions",
                                  "--remote-control", "--teleport"})

# Dropped when resuming: the ones that pick or fork a session (we resume by id), and
# ``--worktree``/``--tmux`` (they would create a new worktree). A headless attempt
# (``-p``) is resumed headless, with its print options; an interactive one drops them.
_RESUME_DROP = frozenset({
    "-r", "--resume", "-c", "--continue", "--session-id", "--fork-session", "--from-pr",
    "-w", "--worktree", "--tmux", "--settings", "--bg", "--background", "--teleport",
    "--cloud",
})
_PRINT_OPTS = frozenset({
    "-p", "--print", "--output-format", "--input-format", "--include-partial-messages",
    "--replay-user-messages", "--max-budget-usd", "--fallback-model",
    "--no-session-persistence", "--json-schema", "--max-turns", "--permission-prompts",
    "--forward-subagent-text", "--include-hook-events",
})
_PRINT_FLAGS = frozenset({"-p", "--print"})


def _split_args(args: list[str]) -> list[tuple[str | None, list[str]]]:
    return split_args(args, value_opts=_VALUE_OPTS, variadic_opts=_VARIADIC_OPTS,
                      optional_value_opts=_OPTIONAL_VALUE_OPTS)


def _hook_command(ctx: SessionContext, event: str) -> str:
    # HOOKS, "Command hook fields": ``command`` is a "Shell command to execute",
    # so every word is shell-quoted.
    return shlex.join([*ctx.hook_command, "claude", event])


def _load_user_settings(value: str) -> dict[str, Any]:
    """The settings a user passed with ``--settings`` (a file or a JSON string)."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            with open(os.path.expanduser(value), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"cannot read the --settings file {value!r}: {e}") from e
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--settings {value!r} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"--settings {value!r} is not a JSON object")
    return data


def _settings(ctx: SessionContext, user: list[dict[str, Any]]) -> dict[str, Any]:
    """Claude Code settings whose hooks call tether, merged over the user's own."""
    settings: dict[str, Any] = {}
    hooks: dict[str, list[Any]] = {}
    for extra in user:
        for key, value in extra.items():
            if key == "hooks" and isinstance(value, dict):
                for event, groups in value.items():
                    if isinstance(groups, list):
                        hooks.setdefault(event, []).extend(groups)
            else:
                settings[key] = value
    for event in EVENT_KINDS:
        # HOOKS, "Configuration": event -> list of matcher groups -> list of hook
        # handlers ``{"type": "command", "command": ..., "timeout": ...}``.
        group: dict[str, Any] = {
            "hooks": [{"type": "command", "command": _hook_command(ctx, event),
                       "timeout": HOOK_TIMEOUT_S}],
        }
        if event in _TOOL_MATCHER_EVENTS:
            group = {"matcher": "*", **group}
        hooks.setdefault(event, []).append(group)
    settings["hooks"] = hooks
    if "statusLine" not in settings and not _user_status_line():
        # Status line (https://code.claude.com/docs/en/statusline): ``type: command``,
        # run with the session's JSON on stdin; what it prints is shown (nothing here).
        settings["statusLine"] = {"type": "command",
                                  "command": _hook_command(ctx, STATUS_EVENT)}
    return settings


def _user_status_line() -> bool:
    """Whether the user's own settings (``~/.claude/settings.json``) have a status line:
    ours (``--settings``) would replace it, so none is installed and the context window
    comes from the model rule instead."""
    try:
        data = _load_user_settings(os.path.expanduser("~/.claude/settings.json"))
    except ValueError:
        return False
    return bool(data.get("statusLine"))


def context_window_for(model: str | None, context_tokens: int | None = None) -> int:
    """The context window of ``model`` (see the rule at ``DEFAULT_CONTEXT_WINDOW``)."""
    name = (model or "").lower()
    if "[1m]" in name or name.startswith(_NATIVE_1M_PREFIXES):
        return LARGE_CONTEXT_WINDOW
    if context_tokens is not None and context_tokens > DEFAULT_CONTEXT_WINDOW:
        return LARGE_CONTEXT_WINDOW
    return DEFAULT_CONTEXT_WINDOW


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text_of(content: Any) -> str | None:
    """The text of a message ``content`` (a string or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [b["text"] for b in content
             if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
    return "\n".join(texts) if texts else None


def _is_prompt(entry: dict[str, Any]) -> bool:
    """A user entry that is a prompt (not a tool result, meta or side-chain entry)."""
    if entry.get("type") != "user" or any(
            entry.get(k) for k in ("isMeta", "isSidechain", "isCompactSummary")):
        return False
    message = entry.get("message")
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return False
    return _text_of(content) is not None


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens")
#: The turn has ended when the last main-chain message stopped for one of these (Messages
#: API ``stop_reason``), not for ``tool_use``.
_FINAL_STOPS = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal", "pause_turn"})


class _Counter:
    """What a transcript holds past a cursor, read in steps (Claude Code appends).

    Usage is counted per API message (``message.id``): Claude Code writes one entry per
    content block, each with the message's ``usage``, so a message is counted once, at
    the highest count any of its entries shows (a later entry may carry the final
    output count), across steps and across turns (the cursor keeps the last messages'
    counted usage). Only complete lines are read: the offset stops after the last one.
    """

    def __init__(self, cursor: UsageCursor) -> None:
        self.path = cursor.path
        self.offset = cursor.offset
        self.seen: dict[str, dict[str, int]] = {k: dict(v) for k, v in cursor.seen.items()}
        self.total = dict.fromkeys(_USAGE_KEYS, 0)
        self.any_usage = False
        self.model: str | None = None
        self.last_usage: dict[str, int] | None = None
        self.last_stop: str | None = None
        self.prompt: str | None = None
        self.answer: str | None = None
        self.answers: list[str] = []
        self._anonymous = 0

    def read(self) -> bool:
        """Read what was appended since the last step; False if the file is unreadable."""
        f = open_agent_bytes(self.path)
        if f is None:
            return False
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:  # replaced by a shorter file: a new record
                self.offset = 0
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            self._entry(line)
        self.offset += end
        return True

    def _entry(self, line: bytes) -> None:
        if b'"user"' not in line and b'"assistant"' not in line:
            return
        try:
            entry = json.loads(line)
        except ValueError:
            return
        if not isinstance(entry, dict):
            return
        if _is_prompt(entry):
            self.prompt = _text_of(entry["message"]["content"])
            self.answer = None
            return
        message = entry.get("message")
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            return
        raw = message.get("usage")
        usage = {k: _int(raw.get(k)) for k in _USAGE_KEYS} if isinstance(raw, dict) else {}
        main = not entry.get("isSidechain")
        if usage and any(usage.values()):  # all zero: a synthetic message, no API call
            self.any_usage = True
            mid = message.get("id")
            if not isinstance(mid, str):
                self._anonymous += 1
                prev = dict.fromkeys(_USAGE_KEYS, 0)
            else:
                prev = self.seen.pop(mid, dict.fromkeys(_USAGE_KEYS, 0))
            now = {k: max(prev.get(k, 0), usage[k]) for k in _USAGE_KEYS}
            for k in _USAGE_KEYS:
                self.total[k] += now[k] - prev.get(k, 0)
            if isinstance(mid, str):
                self.seen[mid] = now  # most recent last
                while len(self.seen) > SEEN_IDS:
                    self.seen.pop(next(iter(self.seen)))
            if main:
                self.last_usage = now
                if isinstance(message.get("model"), str):
                    self.model = message["model"]
        if main:
            stop = message.get("stop_reason")
            self.last_stop = stop if isinstance(stop, str) else self.last_stop
            text = _text_of(message.get("content"))
            if text:
                self.answer = text
                self.answers.append(text.strip())

    def settled(self, answer: str | None) -> bool:
        """Whether the turn's end is in what was read: its final answer (the ``Stop``
        payload's ``last_assistant_message``), or without one a final stop reason."""
        if answer:
            return answer.strip() in self.answers
        return self.last_stop in _FINAL_STOPS

    def cursor(self, pending: dict[str, int] | None = None) -> UsageCursor:
        return UsageCursor(path=self.path, offset=self.offset, seen=self.seen,
                           pending=pending or {})

    def usage(self, pending: dict[str, int]) -> Usage | None:
        """This read's usage plus what was pending, or None when there is none at all."""
        if not self.any_usage and not pending:
            return None
        total = {k: self.total[k] + int(pending.get(k, 0)) for k in _USAGE_KEYS}
        context = None
        if self.last_usage is not None:
            u = self.last_usage
            context = (u["input_tokens"] + u["cache_read_input_tokens"]
                       + u["cache_creation_input_tokens"] + u["output_tokens"])
        return Usage(input_tokens=total["input_tokens"], output_tokens=total["output_tokens"],
                     cache_read_tokens=total["cache_read_input_tokens"],
                     cache_creation_tokens=total["cache_creation_input_tokens"],
                     context_tokens=context,
                     context_window=context_window_for(self.model, context)
                     if context is not None else None)

    def messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.prompt is not None:
            out.append({"role": "user", "content": self.prompt})
        if self.answer is not None:
            out.append({"role": "assistant", "content": self.answer})
        return out


def read_transcript(path: str) -> tuple[str | None, Usage | None, list[dict[str, Any]]]:
    """Model, usage and the last turn's messages from a whole Claude Code transcript
    (every API message counted once; see :class:`_Counter`)."""
    counter = _Counter(UsageCursor(path=path))
    if not counter.read():
        return None, None, []
    return counter.model, counter.usage({}), counter.messages()


def count_turn(path: str, cursor: UsageCursor | None, answer: str | None, *,
               settle: float = SETTLE_TIMEOUT,
               ) -> tuple[str | None, Usage | None, list[dict[str, Any]], UsageCursor]:
    """A turn's model, usage and messages: what the transcript at ``path`` holds past
    ``cursor`` (its end, waiting up to ``settle`` seconds for the turn's final answer to
    be written), plus the usage ``cursor`` kept from an earlier file; and the cursor
    after it. A cursor of another file is first read to its end (kept as pending)."""
    cursor = _follow(cursor, path)
    counter = _Counter(cursor)
    deadline = time.monotonic() + settle
    while True:
        if counter.read():
            if counter.settled(answer):
                break
        elif not agent_file_unwritten(path):
            break  # unreadable (refused, not a regular file): waiting changes nothing
        # (A transcript not yet on disk is waited for too: under load the CLI writes it
        # after its Stop hook has run, a new session's file included.)
        if time.monotonic() >= deadline or settle_stopped():
            break
        time.sleep(SETTLE_POLL)
    usage = counter.usage(cursor.pending)
    return counter.model, usage, counter.messages(), counter.cursor()


def _follow(cursor: UsageCursor | None, path: str, *, from_end: bool = False) -> UsageCursor:
    """A cursor on ``path``: the same one, or a new one whose pending usage is what the
    old file held past the old cursor (read to its end, without waiting). Without a
    cursor, ``from_end`` starts after what the file already holds (a session resumed
    from outside tether: its history is not this lineage's spending)."""
    if cursor is None:
        return UsageCursor(path=path, offset=_complete_size(path) if from_end else 0)
    if cursor.path == path:
        return cursor
    old = _Counter(cursor)
    old.read()
    pending = dict(cursor.pending)
    for k in _USAGE_KEYS:
        pending[k] = pending.get(k, 0) + old.total[k]
    return UsageCursor(path=path, pending={k: v for k, v in pending.items() if v})


def _complete_size(path: str) -> int:
    """The size of ``path`` up to its last complete line (0 if it cannot be read)."""
    f = open_agent_bytes(path)
    if f is None:
        return 0
    with f:
        data = f.read()
    return data.rfind(b"\n") + 1


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


class ClaudeProvider(Provider):
    name = "claude"
    commands = ("claude",)
    # Usage limits, as Claude Code prints them (not in its reference docs; seen in
    # anthropics/claude-code issues, "About Claude's usage limits", and 2.1.332 against a
    # server answering 429): older releases print "Claude AI usage limit reached|<reset
    # epoch seconds>", newer ones "5-hour limit reached ∙ resets 3pm", "Claude usage limit
    # reached. Your limit will reset at 3pm (America/New_York)", to a subscription "You've
    # hit your session limit · resets 8:56pm (UTC)" / "You've hit your 5-hour limit ·
    # resets 11:15pm (UTC)", and to an API key, once its retries are spent, "API Error:
    # Request rejected (429) · <the server's message>".
    usage_limit_patterns = (r"usage limit reached", r"\blimit reached\b.*\bresets?\b",
                            r"you've hit your (?:[\w-]+ )?limit",
                            r"api error: request rejected \(429\)")
    # The Messages API's "prompt is too long" error, and Claude Code's own wording.
    out_of_context_patterns = (r"prompt is too long", r"context (?:limit|window) (?:reached|"
                               r"exceeded)")
    # Its permission prompt ("Do you want to proceed?", "Do you want to make this edit").
    waiting_patterns = (r"do you want to (?:proceed|make this edit|create)",)
    notes = "hooks (documented): launch, resume, turns, tool fencing, usage, session forks"
    # Behind the egress proxy: no error reports (``DISABLE_ERROR_REPORTING``) and no
    # self-update (``DISABLE_AUTOUPDATER``: its install is read-only in the sandbox, its
    # download hosts not allowed). Not ``DISABLE_TELEMETRY`` nor
    # ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``: they also turn off its feature flags
    # (the one-hour prompt cache, ``/usage``, some models and tools), and its telemetry
    # goes to its API host, which the sandbox allows anyway (docs/SECURITY.md).
    quiet_env: Mapping[str, str] = MappingProxyType({"DISABLE_ERROR_REPORTING": "1",
                                                     "DISABLE_AUTOUPDATER": "1"})
    # Its Stop hook runs before the transcript holds the turn, which may be written only
    # once the hook has returned: counted in the background (``settle_turn``).
    settles_turns = True

    def settings_path(self, ctx: SessionContext) -> str:
        return os.path.join(ctx.state_dir, SETTINGS_FILE)

    def _plan(self, head: list[str], rest: Sequence[tuple[str | None, list[str]]],
              ctx: SessionContext, env: dict[str, str]) -> LaunchPlan:
        user: list[dict[str, Any]] = []
        kept: list[str] = []
        for name, words in rest:
            if name == "--settings":
                # A second ``--settings`` would replace ours (the option holds one
                # value), so the user's settings are merged into our file instead.
                value = words[0].partition("=")[2] if "=" in words[0] else (
                    words[1] if len(words) > 1 else "")
                user.append(_load_user_settings(value))
            else:
                kept.extend(words)
        path = self.settings_path(ctx)
        data = json.dumps(_settings(ctx, user), indent=2).encode() + b"\n"
        # CLI: ``--settings <file-or-json>``.
        argv = [*head, "--settings", path, *kept]
        return LaunchPlan(argv=argv, env=env, files={path: data})

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        """``claude --settings FILE <args>``. A revival that must start afresh (its session
        has nothing to resume) after an interrupted turn, interactively and without a
        prompt of its own, is given ``ctx.continuation`` as its first prompt."""
        if not argv:
            raise ValueError("empty command line")
        items = _split_args(argv[1:])
        plan = self._plan([argv[0]], items, ctx, {})
        positional = any(name is None for name, _ in items)
        headless = any(name in _PRINT_FLAGS for name, _ in items)
        if ctx.interrupted and ctx.continuation and not positional and not headless:
            plan.argv += ["--", ctx.continuation]
        return plan

    def can_resume(self, provider_session_id: str | None,
                   cursor: UsageCursor | None) -> bool:
        """Only a session whose transcript holds a prompt: Claude Code writes it lazily,
        and a session stopped before it did cannot be resumed ("No conversation found
        with session ID")."""
        if cursor is None:
            return True  # nothing known of it: try (as before)
        f = open_agent_bytes(cursor.path)
        if f is None:
            return False
        with f:
            head = f.read(RESUME_PROBE_BYTES)
        return b'"type":"user"' in head or b'"type": "user"' in head

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """``claude --resume ID --settings FILE`` plus the original options that still
        apply (the original prompt and ``--resume``/``--continue`` dropped).

        A headless attempt (``-p``) is resumed headless — CLI: ``claude -p --resume ID
        "query"`` continues a session non-interactively — with its print options and
        ``ctx.continuation`` as the prompt (``-p --resume`` without one fails: "No
        deferred tool marker found … Provide a prompt to continue the conversation").
        An interactive attempt drops the print options, and is given the continuation
        as its first prompt only when it was interrupted in the middle of a turn (at its
        prompt it simply waits for its user again). Without a session id it falls back
        to ``--continue`` (the most recent conversation in the working directory)."""
        if not argv:
            raise ValueError("empty command line")
        items = _split_args(argv[1:])
        headless = any(name in _PRINT_FLAGS for name, _ in items)
        rest = [(name, words) for name, words in items
                if name is not None and (name not in _RESUME_DROP or name == "--settings")
                and (headless or name not in _PRINT_OPTS) and name not in _PRINT_FLAGS]
        # CLI: ``--resume, -r`` "Resume a specific session by ID"; ``--continue, -c``
        # "Continue the most recent conversation in the current directory".
        head = [argv[0], *(["-p"] if headless else []),
                *(["--resume", provider_session_id] if provider_session_id else ["--continue"])]
        prompt = ctx.continuation if headless or ctx.interrupted else ""
        if headless and not prompt:
            prompt = CONTINUE
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        if provider_session_id:
            env["TETHER_PROVIDER_SESSION"] = provider_session_id
        plan = self._plan(head, rest, ctx, env)
        if prompt:  # the prompt after every option ("--" ends them: it may start with -)
            plan.argv += ["--", prompt]
        return plan

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        kind = "status" if event == STATUS_EVENT else EVENT_KINDS.get(event, "other")
        # HOOKS, "Common input fields": ``session_id``, ``transcript_path``, ``cwd``,
        # ``permission_mode``, ``hook_event_name`` on every event.
        hook = HookEvent(kind=kind, provider_session_id=_str(payload, "session_id"),
                         transcript_path=_str(payload, "transcript_path"), raw=payload)
        if kind == "session_start":
            # HOOKS, "SessionStart input": ``source`` ("startup", "resume", "clear" or
            # "compact": a /clear or a compaction starts a new session id) and ``model``.
            hook.model = _str(payload, "model")
            hook.session_source = _str(payload, "source")
        elif kind == "turn_start":
            # HOOKS, "UserPromptSubmit input": ``prompt``.
            prompt = _str(payload, "prompt")
            if prompt is not None:
                hook.messages = [{"role": "user", "content": prompt}]
        elif kind == "waiting" and payload.get("notification_type") == "auth_success":
            hook.kind = "other"  # HOOKS, "Notification": a login notice, not a question
        elif kind == "tool_request":
            # HOOKS, "PreToolUse input": ``tool_name``, ``tool_input``, ``tool_use_id``.
            hook.tool_name = _str(payload, "tool_name")
            tool_input = payload.get("tool_input")
            hook.tool_input = tool_input if isinstance(tool_input, dict) else {}
        elif kind == "turn_end":
            # HOOKS, "Stop input": ``stop_hook_active`` and ``last_assistant_message``
            # ("the text content of Claude's final response"). The usage is read from
            # the transcript once it holds the turn's end: ``settle_turn``.
            answer = _str(payload, "last_assistant_message")
            if answer is not None:
                hook.messages = [{"role": "assistant", "content": answer}]
        elif kind == "turn_failed":
            error = _str(payload, "error")
            hook.error = "usage_limit" if error in LIMIT_ERRORS else error
            hook.error_message = (_str(payload, "last_assistant_message")
                                  or _str(payload, "error_details"))
        elif kind == "status":
            # Status line input: ``model: {id, display_name}``, ``context_window:
            # {context_window_size, …}``.
            model, window = payload.get("model"), payload.get("context_window")
            if isinstance(model, dict):
                hook.model = _str(model, "id")
            if isinstance(window, dict):
                size = _int(window.get("context_window_size"))
                hook.context_window = size if 0 < size <= MAX_CONTEXT_WINDOW else None
        return hook

    def settle_turn(self, ev: HookEvent, cursor: UsageCursor | None) -> UsageCursor | None:
        """The turn's usage from the transcript past ``cursor``, once the transcript holds
        the turn's final answer (waiting at most :data:`SETTLE_TIMEOUT` s: Claude Code
        runs ``Stop`` before it has written the turn's last entries); whatever is written
        later is counted at the next turn, from the cursor, never twice."""
        if not ev.transcript_path:
            return cursor
        answer = next((m["content"] for m in ev.messages if m["role"] == "assistant"), None)
        ev.model, ev.usage, messages, cursor = count_turn(ev.transcript_path, cursor, answer,
                                                          settle=SETTLE_TIMEOUT)
        if answer is not None:
            messages = [m for m in messages if m["role"] != "assistant"]
            messages.append({"role": "assistant", "content": answer})
        ev.messages = messages
        return cursor

    def follow_record(self, ev: HookEvent, cursor: UsageCursor | None) -> UsageCursor | None:
        if not ev.transcript_path:
            return cursor
        # A lineage that begins by resuming a session started outside tether counts
        # from where that session is, not its history.
        return _follow(cursor, ev.transcript_path, from_end=ev.session_source == "resume")

    def reply(self, event: HookEvent, allowed: bool, reason: str) -> HookReply:
        """Deny a fenced tool call with Claude Code's documented JSON; otherwise say
        nothing and exit 0.

        HOOKS, "PreToolUse decision control": ``hookSpecificOutput`` with
        ``hookEventName: "PreToolUse"``, ``permissionDecision: "deny"`` ("prevents
        the tool call") and ``permissionDecisionReason`` ("For "deny", shown to
        Claude"); HOOKS, "JSON output": "Claude Code only processes JSON on exit
        0" and stdout "must contain only the JSON object". An allowed call prints
        nothing ("exit 0 ... tells Claude Code to allow the tool call with no
        further action"), so Claude Code's own permission rules still apply — an
        ``"allow"`` decision would bypass them. Empty output also matters for
        ``SessionStart`` and ``UserPromptSubmit``, whose stdout is added to Claude's
        context.
        """
        if event.kind != "tool_request" or allowed:
            return HookReply()
        out = {"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}
        return HookReply(stdout=json.dumps(out).encode() + b"\n", exit_code=0)
