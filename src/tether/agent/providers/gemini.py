"""The Gemini CLI provider (google-gemini/gemini-cli), through its command hooks.

References (the comments next to the code cite them):

* HOOKS — "Hooks reference", https://geminicli.com/docs/hooks/reference (``docs/hooks/``
  in the repository): hooks live in ``settings.json`` under ``hooks``, event → list of
  definitions ``{"matcher", "hooks": [{"type": "command", "command", "name",
  "timeout"}]}``; the hook reads JSON on stdin (``session_id``, ``transcript_path``,
  ``cwd``, ``hook_event_name``, ``timestamp``) and may print one JSON object; exit 0.
  Events used: ``SessionStart`` (``source``: startup, resume, clear), ``BeforeAgent``
  (a prompt was submitted: a turn starts), ``BeforeTool`` (``tool_name``,
  ``tool_input``; ``{"decision": "deny", "reason": …}`` blocks the call), ``AfterAgent``
  (the agent loop of a turn completed: once per user turn, after every tool call of
  it), ``Notification`` (``ToolPermission``: it asks its user), ``PreCompress``,
  ``SessionEnd``. ``hooksConfig.enabled`` turns hooks on.
* CONFIG — "Gemini CLI configuration", https://geminicli.com/docs/reference/configuration:
  settings come from the system defaults file (``GEMINI_CLI_SYSTEM_DEFAULTS_PATH``), the
  user's ``~/.gemini/settings.json``, the workspace's and the system settings file; arrays
  and objects merge. Since 0.5x the CLI loads a system file only when it and every
  directory above it are owned by root and writable by no one else (``Security Warning:
  Skipping system defaults file … is not owned by root``): for a user's tether home that
  never holds. So in a confining sandbox (bwrap) tether shows the agent, read-only at
  ``~/.gemini/settings.json``, the user's own settings with tether's hooks added
  (``LaunchPlan.views``); unconfined (``--runtime process``) it can only offer the system
  defaults file, which the CLI loads when tether's home is root's.
* SESSIONS — "Session Management", https://geminicli.com/docs/cli/session-management:
  ``gemini --resume <session UUID>``; ``-p`` runs headless ("Run in non-interactive
  (headless) mode with the given prompt"). ``--resume ID`` without a terminal and without
  ``-p`` fails ("No input provided via stdin", exit 42); resuming a session that has no
  prompt yet fails ("No previous sessions found for this project", exit 42).
* TRANSCRIPT — the session file ``transcript_path`` names
  (``packages/core/src/services/chatRecordingService.ts``, ``chatRecordingTypes.ts``):
  JSON lines — a metadata line, message records ``{"id", "type": "user"|"gemini"|…,
  "content", "tokens": {"input", "output", "cached", "thoughts", "tool", "total"},
  "model"}`` (a record with a known ``id`` replaces it), ``{"$set": {…}}`` metadata
  updates (``messages``: a checkpoint of the whole list) and ``{"$rewindTo": id}``.
  ``tokens`` are one API response's ``usageMetadata`` (``promptTokenCount``,
  ``candidatesTokenCount``, ``cachedContentTokenCount``, ``thoughtsTokenCount``,
  ``toolUsePromptTokenCount``, ``totalTokenCount``), written synchronously before
  ``AfterAgent`` fires.
* WINDOW — ``tokenLimit(model)`` (``packages/core/src/core/tokenLimits.ts``): 1,048,576
  tokens for every Gemini model, 256,000 for Gemma 4 (Google's model table,
  https://ai.google.dev/gemini-api/docs/models); the CLI's "context left" is
  ``promptTokenCount / tokenLimit``.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import stat
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

DEFAULTS_FILE = "gemini-system-defaults.json"
SETTINGS_FILE = "gemini-settings.json"  # the user's settings and tether's hooks (a view)
SETTINGS_ENV = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"  # CONFIG
MAX_SETTINGS_BYTES = 1024 * 1024

EVENT_KINDS: dict[str, str] = {  # HOOKS, the event table
    "SessionStart": "session_start",
    "BeforeAgent": "turn_start",
    "BeforeTool": "tool_request",
    "AfterAgent": "turn_end",
    "Notification": "waiting",  # ToolPermission: it asks its user
    "PreCompress": "pre_compact",
    "SessionEnd": "session_end",
}
HOOK_TIMEOUT_MS = 30_000  # HOOKS: ``timeout`` is in milliseconds

DEFAULT_CONTEXT_WINDOW = 1_048_576  # WINDOW
_SMALL_WINDOWS = {"gemma-4-31b-it": 256_000, "gemma-4-26b-a4b-it": 256_000}

# ``gemini --help`` (0.61.0): options that take one value, arrays (yargs: words up to the
# next option) and ``-w`` (an optional value).
_VALUE_OPTS = frozenset({"-m", "--model", "-p", "--prompt", "-i", "--prompt-interactive",
                         "--approval-mode", "-r", "--resume", "--session-file", "--session-id",
                         "--delete-session", "-o", "--output-format"})
_VARIADIC_OPTS = frozenset({"--policy", "--admin-policy", "--allowed-mcp-server-names",
                            "--allowed-tools", "-e", "--extensions", "--include-directories"})
_OPTIONAL_VALUE_OPTS = frozenset({"-w", "--worktree"})
_PROMPT_OPTS = frozenset({"-p", "--prompt"})
# Dropped when resuming: the prompt (the resumed session has it), what picks or makes a
# session (we resume by id), and ``--worktree`` (it would make a new worktree).
_RESUME_DROP = frozenset({"-p", "--prompt", "-i", "--prompt-interactive", "-r", "--resume",
                          "--session-file", "--session-id", "--delete-session",
                          "--list-sessions", "-w", "--worktree"})


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _split(args: list[str]) -> list[tuple[str | None, list[str]]]:
    return split_args(args, value_opts=_VALUE_OPTS, variadic_opts=_VARIADIC_OPTS,
                      optional_value_opts=_OPTIONAL_VALUE_OPTS)


def _value(words: list[str]) -> str:
    """The value of an option as :func:`split_args` grouped it (``-p X`` or ``--prompt=X``)."""
    return words[0].partition("=")[2] if "=" in words[0] else (words[1] if len(words) > 1
                                                                else "")


def context_window_for(model: str | None) -> int:
    """WINDOW: the context window the CLI itself uses for ``model``."""
    return _SMALL_WINDOWS.get((model or "").lower(), DEFAULT_CONTEXT_WINDOW)


# ---------------------------------------------------------------------- settings
def strip_json_comments(text: str) -> str:
    """``//`` and ``/* */`` comments out of JSON, as the CLI's settings loader does
    (``strip-json-comments``), strings left alone."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_user_settings(path: str) -> dict[str, Any] | None:
    """The user's ``settings.json``: ``{}`` when there is none, None when it cannot be
    read as a JSON object (the CLI then reports its own error). A symlink is followed
    (dotfiles often are links; a sandboxed agent sees this path read-only, made first when
    missing), but only to a regular file of the daemon's own user: its content is shown to
    the agent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        raw = f.read(MAX_SETTINGS_BYTES + 1)
    if len(raw) > MAX_SETTINGS_BYTES:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(strip_json_comments(text)) if text.strip() else {}
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _tether_hooks(ctx: SessionContext) -> dict[str, list[dict[str, Any]]]:
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event in EVENT_KINDS:
        command = shlex.join([*ctx.hook_command, "gemini", event])
        group: dict[str, Any] = {"hooks": [{"type": "command", "name": f"tether-{event}",
                                            "command": command, "timeout": HOOK_TIMEOUT_MS}]}
        if event == "BeforeTool":
            group = {"matcher": ".*", **group}  # HOOKS: a regex over tool names
        hooks[event] = [group]
    return hooks


def merged_settings(user: dict[str, Any], ctx: SessionContext) -> dict[str, Any]:
    """The user's settings with tether's hooks added after theirs, hooks enabled. A user
    who turned hooks off (``hooksConfig.enabled: false``) keeps theirs off: only
    tether's run."""
    settings = dict(user)
    config = settings.get("hooksConfig")
    config = dict(config) if isinstance(config, dict) else {}
    theirs = settings.get("hooks")
    hooks: dict[str, Any] = dict(theirs) if isinstance(theirs, dict) else {}
    if config.get("enabled") is False:
        hooks = {k: v for k, v in hooks.items() if not isinstance(v, list)}
    for event, groups in _tether_hooks(ctx).items():
        mine = hooks.get(event)
        hooks[event] = [*(mine if isinstance(mine, list) else []), *groups]
    settings["hooks"] = hooks
    settings["hooksConfig"] = {**config, "enabled": True}
    if ctx.egress:
        quiet(settings)
    return settings


#: Behind the egress proxy (CONFIG): no usage statistics (its Clearcut logging to
#: play.googleapis.com) and no update check or self-update (registry.npmjs.org; its
#: install is read-only in the sandbox) — each only where the user's settings say
#: nothing of it (``disableAutoUpdate``/``disableUpdateNag`` are the older names).
QUIET: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("privacy", "usageStatisticsEnabled", ()),
    ("general", "enableAutoUpdate", ("disableAutoUpdate",)),
    ("general", "enableAutoUpdateNotification", ("disableUpdateNag",)),
)


def quiet(settings: dict[str, Any]) -> None:
    """Set :data:`QUIET`'s settings to false where the user's ``settings`` do not set
    them (nor their older names)."""
    for section, key, older in QUIET:
        theirs = settings.get(section, {})
        if not isinstance(theirs, dict):
            continue  # not an object: the CLI says so, as it would without tether
        if key not in theirs and not any(o in theirs for o in older):
            settings[section] = {**theirs, key: False}


# ---------------------------------------------------------------------- transcript
def _text(content: Any) -> str | None:
    """The text of a message's ``content`` (a string, a part, or a list of parts)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "".join(texts) if texts else None


def _is_prompt(record: dict[str, Any]) -> bool:
    """A user message that is a prompt: text, not a tool's result, not the CLI's own
    context or a command (``isIgnoredUserContent`` in the CLI)."""
    if record.get("type") != "user":
        return False
    content = record.get("content")
    parts = content if isinstance(content, list) else [content]
    if any(isinstance(p, dict) and "functionResponse" in p for p in parts):
        return False
    text = (_text(content) or "").strip()
    return bool(text) and not text.startswith(("/", "?", "<session_context>",
                                               "<hook_context>"))


def read_transcript(path: str) -> tuple[str | None, Usage | None, list[dict[str, Any]], bool]:
    """Model, the last turn's usage and messages, and whether the session has a prompt.

    Usage: every API response of the turn (the ``gemini`` records after its prompt, each
    ``id`` once, its last version) — ``input_tokens`` is the uncached prompt plus the
    tool-use prompt (``input - cached + tool``: the API counts cached tokens inside the
    prompt), ``cache_read_tokens`` the cached part, ``output_tokens`` the answer and
    its thoughts (billed as output). ``context_tokens`` is the last response's prompt,
    tool-use prompt and answer: what the next request carries. A checkpoint
    (``$set.messages``) and a rewind spend nothing: tokens already counted stay counted.

    "Has a prompt" is about the conversation as the file leaves it (checkpoints and
    rewinds applied): a turn that failed (a quota error) is taken back by a checkpoint
    without its prompt, and ``--resume`` then finds nothing to resume.
    """
    f = open_agent_file(path)
    if f is None:
        return None, None, [], False
    seen: set[str] = set()
    current: dict[str, bool] = {}  # the conversation now: message id -> is a prompt
    spent: dict[str, dict[str, int]] = {}
    last: dict[str, int] | None = None
    model: str | None = None
    prompt: str | None = None
    answer: str | None = None
    with f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            update = record.get("$set")
            if isinstance(update, dict):
                if isinstance(update.get("messages"), list):  # a checkpoint: the whole list
                    current = {m["id"]: _is_prompt(m) for m in update["messages"]
                               if isinstance(m, dict) and isinstance(m.get("id"), str)}
                    seen.update(current)
                continue
            rewind = record.get("$rewindTo")
            if isinstance(rewind, str):
                ids = list(current)  # the rewound message and those after it go
                current = ({i: current[i] for i in ids[:ids.index(rewind)]}
                           if rewind in ids else {})
                continue
            mid = record.get("id")
            if not isinstance(mid, str):
                continue
            new = mid not in seen
            seen.add(mid)
            current[mid] = _is_prompt(record)
            if current[mid]:
                if new:
                    prompt, answer, spent = _text(record.get("content")), None, {}
                continue
            if record.get("type") != "gemini":
                continue
            tokens = record.get("tokens")
            if isinstance(tokens, dict):
                usage = {k: _int(tokens.get(k)) for k in
                         ("input", "output", "cached", "thoughts", "tool")}
                if any(usage.values()):
                    spent[mid] = usage
                    last = usage
                    if isinstance(record.get("model"), str):
                        model = record["model"]
            text = _text(record.get("content"))
            if text:
                answer = text
    prompted = any(current.values())
    messages: list[dict[str, Any]] = []
    if prompt is not None:
        messages.append({"role": "user", "content": prompt})
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    if last is None:
        return model, None, messages, prompted
    total = Usage(
        input_tokens=sum(max(u["input"] - u["cached"], 0) + u["tool"] for u in spent.values()),
        output_tokens=sum(u["output"] + u["thoughts"] for u in spent.values()),
        cache_read_tokens=sum(u["cached"] for u in spent.values()),
        cache_creation_tokens=0,
        context_tokens=last["input"] + last["tool"] + last["output"],
        context_window=context_window_for(model))
    return model, total, messages, prompted


def find_transcripts(session_id: str, gemini_dir: str | None = None) -> list[str]:
    """The session files of ``session_id`` (``~/.gemini/tmp/<project>/chats/
    session-<time>-<first 8 of the id>.jsonl``, TRANSCRIPT), checked by their
    ``sessionId``. There may be several: a resumed session (0.61.0) starts a new file,
    holding no message, while its messages go on in the first one."""
    base = gemini_dir or os.path.join(os.path.expanduser("~"), ".gemini")
    pattern = os.path.join(glob.escape(base), "tmp", "*", "chats",
                           f"session-*-{glob.escape(session_id[:8])}.json*")
    found: list[str] = []
    for path in sorted(glob.glob(pattern)):
        f = open_agent_file(path)
        if f is None:
            continue
        with f:
            head = f.readline(64 * 1024)
        try:
            meta = json.loads(head)
        except ValueError:
            continue
        if isinstance(meta, dict) and meta.get("sessionId") == session_id:
            found.append(path)
    return found


def has_conversation(session_id: str, gemini_dir: str | None = None) -> bool:
    """Whether ``gemini --resume session_id`` has something to resume (a prompt)."""
    return any(read_transcript(p)[3] for p in find_transcripts(session_id, gemini_dir))


class GeminiProvider(Provider):
    name = "gemini"
    commands = ("gemini",)
    # Gemini API quota errors as the CLI shows them: HTTP 429 ``RESOURCE_EXHAUSTED``,
    # "Quota exceeded for quota metric …", "You exceeded your current quota" (the API's
    # message), and the CLI's own: a daily quota (a ``QuotaFailure`` whose ``quotaId``
    # says ``PerDay``) is a ``TerminalQuotaError`` "You have exhausted your daily quota on
    # this model." on which it gives up (0.61.0, utils/googleQuotaErrors.ts); older ones
    # say "You have reached your daily quota limit". No reset time is printed: tether
    # tries again after 30 minutes (DEFAULT_LIMIT_WAIT).
    usage_limit_patterns = (r"RESOURCE_EXHAUSTED", r"quota exceeded",
                            r"exceeded your current quota", r"exhausted your daily quota",
                            r"TerminalQuotaError",
                            r"reached your daily .*(?:quota|limit)", r"usage limit reached")
    out_of_context_patterns = (r"exceeds the maximum number of tokens",
                               r"context window (?:exceeded|is full)")
    waiting_patterns = (r"Allow execution\??", r"Apply this change\??")
    # utils/headless.ts ``isHeadlessMode``: ``CI=true`` or ``GITHUB_ACTIONS=true`` is
    # headless even with a terminal on stdin and stdout.
    headless_env = ("CI", "GITHUB_ACTIONS")
    notes = ("hooks (documented): launch, resume (headless too), turns, tool fencing, usage "
             "from its session file, session forks")

    def __init__(self, gemini_dir: str | None = None) -> None:
        #: ``~/.gemini`` (tests point it elsewhere).
        self.gemini_dir = gemini_dir

    def _gemini_dir(self) -> str:
        return self.gemini_dir or os.path.join(os.path.expanduser("~"), ".gemini")

    def _plan(self, argv: list[str], ctx: SessionContext, env: dict[str, str]) -> LaunchPlan:
        """The command line as given, and tether's hooks where the CLI will load them:
        confined, a view of the user's settings with them; else the system defaults."""
        if ctx.confined:
            target = os.path.join(self._gemini_dir(), "settings.json")
            user = read_user_settings(target)
            if user is not None:
                path = os.path.join(ctx.state_dir, SETTINGS_FILE)
                data = json.dumps(merged_settings(user, ctx), indent=2).encode() + b"\n"
                return LaunchPlan(argv=argv, env=env, files={path: data},
                                  views={target: path})
        settings = {"hooksConfig": {"enabled": True}, "hooks": _tether_hooks(ctx)}
        path = os.path.join(ctx.state_dir, DEFAULTS_FILE)
        data = json.dumps(settings, indent=2).encode() + b"\n"
        return LaunchPlan(argv=argv, env={**env, SETTINGS_ENV: path}, files={path: data})

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        if not argv:
            raise ValueError("empty command line")
        return self._plan(list(argv), ctx, {})

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """``gemini --resume ID`` plus the original options, without the prompt and what
        picks a session (SESSIONS). A headless attempt (``-p``, or no terminal) is resumed
        headless, with a continuation prompt from the drain snapshot (``-p``); an
        interactive one at its prompt. A session with no prompt yet has nothing to resume:
        it starts afresh, from the original command."""
        if not argv:
            raise ValueError("empty command line")
        if not provider_session_id or not has_conversation(provider_session_id,
                                                           self._gemini_dir()):
            return self.launch(argv, ctx)
        items = _split(argv[1:])
        request = next((_value(w) for n, w in items if n in _PROMPT_OPTS), None)
        headless = request is not None or not ctx.tty
        kept = [word for n, words in items if n is not None and n not in _RESUME_DROP
                for word in words]
        if headless:
            from pathlib import Path

            from tether.agent.snapshot import continuation_prompt

            kept += ["-p", continuation_prompt(Path(snapshot_path), request)]
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path,
               "TETHER_PROVIDER_SESSION": provider_session_id}
        return self._plan([argv[0], "--resume", provider_session_id, *kept], ctx, env)

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        kind = EVENT_KINDS.get(event, "other")
        hook = HookEvent(kind=kind, provider_session_id=_str(payload, "session_id"),
                         transcript_path=_str(payload, "transcript_path"), raw=payload)
        if kind == "session_start":
            hook.session_source = _str(payload, "source")  # startup, resume, clear
        elif kind == "tool_request":
            hook.tool_name = _str(payload, "tool_name")
            tool_input = payload.get("tool_input")
            hook.tool_input = tool_input if isinstance(tool_input, dict) else {}
        elif kind == "turn_end":
            if hook.transcript_path:
                hook.model, hook.usage, hook.messages, _ = read_transcript(hook.transcript_path)
            # HOOKS, "AfterAgent input": ``prompt`` and ``prompt_response``; the
            # transcript's own texts are preferred (0.61.0 repeats the last streamed
            # chunk in ``prompt_response``).
            roles = {m["role"] for m in hook.messages}
            for role, key in (("user", "prompt"), ("assistant", "prompt_response")):
                text = _str(payload, key)
                if role not in roles and text is not None:
                    hook.messages.append({"role": role, "content": text})
        return hook

    def reply(self, event: HookEvent, allowed: bool, reason: str) -> HookReply:
        """HOOKS, "BeforeTool" decision: ``{"decision": "deny", "reason": …}`` on exit 0
        blocks the call; an allowed call prints nothing (Gemini's own policy decides)."""
        if event.kind != "tool_request" or allowed:
            return HookReply()
        out = {"decision": "deny", "reason": reason}
        return HookReply(stdout=json.dumps(out).encode() + b"\n", exit_code=0)
