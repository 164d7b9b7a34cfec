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
    open_agent_file,
    split_args,
)

SETTINGS_FILE = "claude-settings.json"

# The hook events tether registers, and the normalized kind each maps to.
# Event names: HOOKS, "Hook lifecycle" table.
EVENT_KINDS: dict[str, str] = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "turn_start",  # a prompt starts a turn (the user's, or -p's)
    "PreToolUse": "tool_request",
    "Notification": "waiting",  # Claude waits for its user (permission, idle prompt)
    "PreCompact": "pre_compact",
    "Stop": "turn_end",
    "SessionEnd": "session_end",
}

# HOOKS, "Matcher patterns": "Use "*", "", or omit matcher entirely to match all
# occurrences"; tool events match on the tool name.
_TOOL_MATCHER_EVENTS = ("PreToolUse",)

# HOOKS, "Common fields": ``timeout`` is in seconds (command default 600). A short
# timeout bounds how long a stuck daemon can stall a tool call; it also raises the
# SessionEnd budget, whose default is only 1.5 s in current releases.
HOOK_TIMEOUT_S = 30

# Context window rule: 200,000 tokens unless the model name says otherwise:
# * a ``[1m]`` suffix (Claude Code's way to ask for the 1M-token window, as in
#   ``--model sonnet[1m]``) means 1,000,000;
# * models whose published context window is natively 1M: Claude Sonnet 5
#   ("now the default model in Claude Code, with a native 1M-token context
#   window", anthropics/claude-code release v2.1.197);
# * and if the transcript shows more tokens in context than 200,000, the window
#   must be the larger one, so 1,000,000.
DEFAULT_CONTEXT_WINDOW = 200_000
LARGE_CONTEXT_WINDOW = 1_000_000
_NATIVE_1M_PREFIXES = ("claude-sonnet-5",)

# Options of ``claude`` that take a value, as listed by ``claude --help`` and the
# CLI reference. Variadic ones (``<x...>``) take every following word up to the
# next option, like commander does; optional ones (``[x]``) take the next word
# unless it is an option.
_VALUE_OPTS = frozenset({
    "--agent", "--agents", "--append-system-prompt", "--append-system-prompt-file",
    "--debug-file", "--effort", "--fallback-model", "--input-format", "--json-schema",
    "--max-budget-usd", "--max-turns", "--model", "-n", "--name", "--output-format",
    "--permission-mode", "--permission-prompt-tool", "--plugin-dir", "--session-id",
    "--setting-sources", "--settings", "--system-prompt", "--system-prompt-file",
})
_VARIADIC_OPTS = frozenset({
    "--add-dir", "--allowedTools", "--allowed-tools", "--betas", "--disallowedTools",
    "--disallowed-tools", "--file", "--mcp-config", "--tools",
})
_OPTIONAL_VALUE_OPTS = frozenset({"-d", "--debug", "--from-pr", "-r", "--resume",
                                  "-w", "--worktree"})

# Dropped when resuming: the ones that pick or fork a session (we resume by id),
# ``-p/--print`` and the options that only work with it (a revived agent runs
# interactively), and ``--worktree``/``--tmux`` (they would create a new worktree).
_RESUME_DROP = frozenset({
    "-r", "--resume", "-c", "--continue", "--session-id", "--fork-session", "--from-pr",
    "-p", "--print", "--output-format", "--input-format", "--include-partial-messages",
    "--replay-user-messages", "--max-budget-usd", "--fallback-model",
    "--no-session-persistence", "--json-schema", "--max-turns", "-w", "--worktree",
    "--tmux", "--settings",
})


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
    return settings


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


def read_transcript(path: str) -> tuple[str | None, Usage | None, list[dict[str, Any]]]:
    """Model, usage and the last turn's messages from a Claude Code transcript.

    Usage: ``input_tokens``/``output_tokens``/``cache_*`` are what this turn
    spent — the sum over the assistant messages after the last prompt (each API
    message counted once: Claude Code writes one entry per content block, all with
    the same ``message.id`` and ``usage``); the daemon adds turns up. Subagents
    that keep their own transcript file are not counted. ``context_tokens`` is the
    last main-chain assistant message's
    ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens +
    output_tokens`` — the whole prompt of that request (CACHING) plus the answer,
    which the next request carries. Entries with all-zero usage (synthetic
    messages) are ignored.
    """
    f = open_agent_file(path)
    if f is None:
        return None, None, []
    per_message: dict[str, dict[str, int]] = {}
    last_usage: dict[str, int] | None = None
    model: str | None = None
    last_prompt: str | None = None
    last_answer: str | None = None
    anonymous = 0
    with f:
        for line in f:
            if '"user"' not in line and '"assistant"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            if _is_prompt(entry):
                last_prompt = _text_of(entry["message"]["content"])
                last_answer = None
                per_message = {}  # a new turn starts
                continue
            message = entry.get("message")
            if entry.get("type") != "assistant" or not isinstance(message, dict):
                continue
            raw = message.get("usage")
            usage = {k: _int(raw.get(k)) for k in (
                "input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")} if isinstance(raw, dict) else {}
            if usage and any(usage.values()):
                mid = message.get("id")
                if not isinstance(mid, str):
                    anonymous += 1
                    mid = f"#{anonymous}"
                per_message[mid] = usage
                if not entry.get("isSidechain"):
                    last_usage = usage
                    if isinstance(message.get("model"), str):
                        model = message["model"]
            if not entry.get("isSidechain"):
                text = _text_of(message.get("content"))
                if text:
                    last_answer = text
    messages: list[dict[str, Any]] = []
    if last_prompt is not None:
        messages.append({"role": "user", "content": last_prompt})
    if last_answer is not None:
        messages.append({"role": "assistant", "content": last_answer})
    if last_usage is None:
        return model, None, messages
    context = (last_usage["input_tokens"] + last_usage["cache_read_input_tokens"]
               + last_usage["cache_creation_input_tokens"] + last_usage["output_tokens"])
    total = Usage(
        input_tokens=sum(u["input_tokens"] for u in per_message.values()),
        output_tokens=sum(u["output_tokens"] for u in per_message.values()),
        cache_read_tokens=sum(u["cache_read_input_tokens"] for u in per_message.values()),
        cache_creation_tokens=sum(u["cache_creation_input_tokens"]
                                  for u in per_message.values()),
        context_tokens=context,
        context_window=context_window_for(model, context),
    )
    return model, total, messages


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


class ClaudeProvider(Provider):
    name = "claude"
    commands = ("claude",)
    # Usage limits, as Claude Code prints them (not in its reference docs; seen in
    # anthropics/claude-code issues and in "About Claude's usage limits"): older releases
    # print "Claude AI usage limit reached|<reset epoch seconds>", newer ones "5-hour
    # limit reached ∙ resets 3pm", "You've hit your limit · resets 3pm (Europe/Paris)" or
    # "Claude usage limit reached. Your limit will reset at 3pm (America/New_York)".
    usage_limit_patterns = (r"usage limit reached", r"\blimit reached\b.*\bresets?\b",
                            r"you've hit your (?:usage )?limit")
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
        if not argv:
            raise ValueError("empty command line")
        return self._plan([argv[0]], _split_args(argv[1:]), ctx, {})

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """``claude --resume ID --settings FILE`` plus the original options that still
        apply; the original prompt, ``--resume``/``--continue``, ``-p`` and the
        print-only options are dropped. Without a session id it falls back to
        ``--continue`` (the most recent conversation in the working directory)."""
        if not argv:
            raise ValueError("empty command line")
        rest = [(name, words) for name, words in _split_args(argv[1:])
                if name is not None and (name not in _RESUME_DROP or name == "--settings")]
        # CLI: ``--resume, -r`` "Resume a specific session by ID"; ``--continue, -c``
        # "Continue the most recent conversation in the current directory".
        head = [argv[0], "--resume", provider_session_id] if provider_session_id else [
            argv[0], "--continue"]
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        if provider_session_id:
            env["TETHER_PROVIDER_SESSION"] = provider_session_id
        return self._plan(head, rest, ctx, env)

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        kind = EVENT_KINDS.get(event, "other")
        # HOOKS, "Common input fields": ``session_id``, ``transcript_path``, ``cwd``,
        # ``permission_mode``, ``hook_event_name`` on every event.
        hook = HookEvent(kind=kind, provider_session_id=_str(payload, "session_id"),
                         transcript_path=_str(payload, "transcript_path"), raw=payload)
        if kind == "session_start":
            # HOOKS, "SessionStart input": ``source`` ("startup", "resume", "clear" or
            # "compact": a /clear or a compaction starts a new session id) and ``model``.
            hook.model = _str(payload, "model")
            hook.session_source = _str(payload, "source")
        elif kind == "waiting" and payload.get("notification_type") == "auth_success":
            hook.kind = "other"  # HOOKS, "Notification": a login notice, not a question
        elif kind == "tool_request":
            # HOOKS, "PreToolUse input": ``tool_name``, ``tool_input``, ``tool_use_id``.
            hook.tool_name = _str(payload, "tool_name")
            tool_input = payload.get("tool_input")
            hook.tool_input = tool_input if isinstance(tool_input, dict) else {}
        elif kind == "turn_end":
            # HOOKS, "Stop input": ``stop_hook_active`` and ``last_assistant_message``
            # ("the text content of Claude's final response").
            if hook.transcript_path:
                hook.model, hook.usage, hook.messages = read_transcript(hook.transcript_path)
            answer = _str(payload, "last_assistant_message")
            if answer is not None:
                hook.messages = [m for m in hook.messages if m["role"] != "assistant"]
                hook.messages.append({"role": "assistant", "content": answer})
        return hook

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
