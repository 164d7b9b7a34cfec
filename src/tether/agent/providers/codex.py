"""The Codex CLI provider, through Codex's lifecycle hooks.

tether launches Codex with four command hooks given as config overrides (``-c
hooks.EVENT=[…]``), each running ``<hook_command...> codex EVENT`` with the event's JSON on
stdin, and with ``--dangerously-bypass-hook-trust`` (HOOKS: Codex runs an unmanaged hook
only once a person trusted its exact definition, "for one-time automation where hook
sources were vetted outside Codex" this flag skips that review; tether's hooks are its
own, and the user's ``~/.codex/config.toml`` and ``hooks.json`` are read-only in its
sandbox):

* ``SessionStart`` (``session_id`` — the thread id —, ``transcript_path``, ``source``:
  ``startup``, ``resume``, ``clear``) → ``session_start``. Codex starts a thread at its
  first prompt, so the thread id is known before the first model call, and a revival
  never has to guess it (never ``--last``: that resumed ANOTHER lineage's thread);
* ``UserPromptSubmit`` (``turn_id``, ``prompt``) → ``turn_start``;
* ``PreToolUse`` (``tool_name``, ``tool_input``) → ``tool_request``: a denial is
  ``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
  "permissionDecisionReason": …}}`` (HOOKS, "PreToolUse"), so DYING and budgets fence
  Codex's tool calls;
* ``Stop`` (``turn_id``, ``last_assistant_message``) → ``turn_end``. Only the thread's own
  turns fire it: the task-title request Codex makes beside the first prompt is no turn
  (its ``notify`` fired ``agent-turn-complete`` for it too, which counted two turns for
  one prompt and moved the lineage onto the title's thread).

References (the comments next to the code cite them):

* HOOKS — "Hooks", https://developers.openai.com/codex/hooks: hooks in ``config.toml``'s
  ``[hooks]`` (event → matcher groups → ``{"type": "command", "command", "timeout"}``,
  seconds), on by default since 0.124 (``[features] hooks``); the common input fields
  (``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, ``model``), the
  events' own (``turn_id`` on turn-scoped ones), the decision output; the trust review
  and ``--dangerously-bypass-hook-trust``.
* CONFIG — "Config": "A generic ``-c``/``--config`` flag that takes a ``key=value``
  pair ... values are a string in TOML format"; a root ``-c`` applies to subcommands.
* RESUME — ``codex resume [SESSION_ID]`` ("Resume a previous interactive session") and,
  headless, ``codex exec resume [SESSION_ID] [PROMPT]`` ("Prompt to send after resuming
  the session") — ``codex exec resume --help`` of 0.171.
* NOTIFY — the older ``notify`` program (``-c notify=[…]``; JSON as its last argument:
  ``type``, ``thread-id``, ``turn-id``, ``input-messages``, ``last-assistant-message``):
  what tether used before the hooks, still understood for sessions launched then.

Usage: no hook payload carries it. Codex records every thread in
``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<date>-<thread id>.jsonl`` (the hooks'
``transcript_path``), one ``{"timestamp", "type", "payload"}`` record per line, and
writes the turn's records before it runs ``Stop``. tether reads, for the turn
``Stop`` names, each ``token_usage_record`` of that ``turn_id`` once by its
``response_id`` (one per API call: ``usage`` with ``input_tokens`` — cached ones
included —, ``cached_input_tokens``, ``output_tokens``), the context window from the
last ``token_count`` event (``info.model_context_window``, what Codex itself uses) and
its ``last_token_usage.total_tokens``. Older rollouts without ``token_usage_record``:
the turn's difference of ``token_count`` totals. That format is Codex's source, not its
user documentation, so tether reads it best-effort: missing or unreadable, ``usage`` is
``None``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import time
import tomllib
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

NOTIFY_EVENT = "notify"
TURN_COMPLETE = "agent-turn-complete"
BYPASS_TRUST = "--dangerously-bypass-hook-trust"
#: The hook events tether registers (HOOKS), and the normalized kind each maps to.
EVENT_KINDS: dict[str, str] = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "turn_start",
    "PreToolUse": "tool_request",
    "Stop": "turn_end",
}
# HOOKS: ``timeout`` in seconds (default 600). Short: a stuck daemon must not stall a tool
# call for ten minutes.
HOOK_TIMEOUT_S = 30
#: A ``Stop`` hook reads the rollout once it has stopped growing for this long (at most
#: :data:`SETTLE_MAX_S`): Codex writes the turn's records before it runs the hook, this
#: only guards a slow disk.
SETTLE_S = 0.05
SETTLE_MAX_S = 1.0

# Options of ``codex`` and its subcommands that take a value (``codex --help``,
# ``codex exec --help``, ``codex resume --help`` of 0.171); ``-i/--image`` takes one or more.
_VALUE_OPTS = frozenset({
    "-m", "--model", "-p", "--profile", "-s", "--sandbox", "-a", "--ask-for-approval",
    "-C", "--cd", "-c", "--config", "--local-provider", "--add-dir", "--enable",
    "--disable", "--remote", "--remote-auth-token-env", "--thread-source",
    "--cyber-access-program",
    # ``codex exec`` only:
    "-o", "--output-last-message", "--output-schema", "--color",
})
_VARIADIC_OPTS = frozenset({"-i", "--image"})
# Dropped when resuming: images belong to the original prompt; the picker's flags (we
# resume by id); an ephemeral run keeps no rollout (so it is never resumed anyway).
_RESUME_DROP = frozenset({"-i", "--image", "--last", "--all", "--include-non-interactive",
                          BYPASS_TRUST})
# The subcommands that run a session: headless (``exec``, alias ``e``), or interactive
# ones that pick a session themselves.
_HEADLESS = frozenset({"exec", "e"})
_PICKERS = frozenset({"resume", "fork"})
# A thread id (a UUID) or name: never one that reads as an option (it goes on the resumed
# command line, and the agent can name any through its hooks).
_THREAD_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,127}$")


def _split_args(args: list[str]) -> list[tuple[str | None, list[str]]]:
    return split_args(args, value_opts=_VALUE_OPTS, variadic_opts=_VARIADIC_OPTS)


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quotes, backslash and control characters
    escaped, as the TOML spec requires)."""
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def hook_override(ctx: SessionContext, event: str) -> str:
    """The ``hooks.EVENT=[…]`` config override (CONFIG: a TOML value) that makes Codex run
    ``<hook_command...> codex EVENT`` with the event's JSON on stdin (HOOKS: ``command``
    is run by a shell, so every word is shell-quoted)."""
    command = shlex.join([*ctx.hook_command, "codex", event])
    return (f"hooks.{event}=[{{hooks=[{{type=\"command\",command={toml_string(command)},"
            f"timeout={HOOK_TIMEOUT_S}}}]}}]")


def notify_override(ctx: SessionContext) -> str:
    """The older ``notify=[...]`` override (NOTIFY), for reference and old sessions."""
    words = [*ctx.hook_command, "codex", NOTIFY_EVENT]
    return "notify=[" + ", ".join(toml_string(w) for w in words) + "]"


#: Behind the egress proxy: no analytics (its OpenTelemetry metrics to ab.chatgpt.com)
#: and no update check (api.github.com), both ``config.toml`` keys (CONFIG), each only
#: where the user's ``config.toml`` says nothing of it; a ``-c`` of the user's own comes
#: later on the command line and wins. Not ``features.plugins``: its plugin catalog
#: (github.com) is a feature, denied unless allowed.
QUIET = ("analytics.enabled=false", "check_for_update_on_startup=false")


def _quiet(home: str | None) -> list[str]:
    """:data:`QUIET`'s settings that the user's ``config.toml`` in ``home`` does not set
    (unreadable or not TOML: all of them; Codex itself says what is wrong with it)."""
    try:
        with open(os.path.join(home or codex_home(), "config.toml"), "rb") as f:
            user: Any = tomllib.load(f)
    except (OSError, ValueError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        user = {}
    kept = []
    for setting in QUIET:
        table = user
        for part in setting.partition("=")[0].split("."):
            table = table.get(part) if isinstance(table, dict) else None
        if table is None:
            kept.append(setting)
    return kept


def _hook_flags(ctx: SessionContext, home: str | None) -> list[str]:
    """tether's own options, before the user's: its hooks, and the quiet settings when
    the agent is behind the egress proxy."""
    flags = [BYPASS_TRUST]
    for event in EVENT_KINDS:
        flags += ["-c", hook_override(ctx, event)]
    if ctx.egress:
        for setting in _quiet(home):
            flags += ["-c", setting]
    return flags


def codex_home() -> str:
    """``$CODEX_HOME`` (default ``~/.codex``), where Codex keeps its sessions (CONFIG:
    "the ``CODEX_HOME`` environment value defaults to ``~/.codex``")."""
    return os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")


def find_rollout(thread_id: str, home: str | None = None) -> str | None:
    """The newest rollout file of session ``thread_id``, if there is one."""
    if not _THREAD_ID.match(thread_id):
        return None
    pattern = os.path.join(home or codex_home(), "sessions", "*", "*", "*",
                           f"rollout-*-{thread_id}.jsonl")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


_TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens")


def _tokens(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {k: _int(value.get(k)) for k in (*_TOKEN_FIELDS, "total_tokens")}


def _text(content: Any) -> str | None:
    """The text of a rollout message's content (``[{"type": "text", "text": …}]``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [c["text"] for c in content
             if isinstance(c, dict) and isinstance(c.get("text"), str)]
    return "\n".join(texts) if texts else None


def read_rollout(path: str, turn_id: str | None = None,
                 ) -> tuple[str | None, Usage | None, list[str]]:
    """Model, the turn's usage and its prompts from a Codex rollout (best-effort; see the
    module doc). ``turn_id``: that turn's API calls, each once; None (or a rollout without
    per-call records): the last turn's, as the difference of the ``token_count`` totals.

    ``input_tokens`` is the non-cached input (OpenAI's ``input_tokens`` includes
    ``cached_input_tokens``) and ``cache_read_tokens`` the cached part; ``context_tokens``
    is the last call's ``total_tokens`` (what Codex counts in the window) and
    ``context_window`` its ``model_context_window``."""
    calls: dict[str, dict[str, int]] = {}
    prompts: list[str] = []
    total: dict[str, int] | None = None
    last: dict[str, int] | None = None
    window: int | None = None
    baseline: dict[str, int] | None = None
    model: str | None = None
    opened = open_agent_file(path)
    if opened is None:
        return None, None, []
    try:
        with opened as f:
            for line in f:
                if not any(k in line for k in ('"token_count"', '"turn_context"',
                                               '"user_message"', '"token_usage_record"',
                                               '"UserMessage"')):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict) or not isinstance(record.get("payload"), dict):
                    continue
                kind, payload = record.get("type"), record["payload"]
                event = payload.get("type") if kind == "event_msg" else None
                if kind == "token_usage_record":
                    usage = _tokens(payload.get("usage"))
                    rid = payload.get("response_id")
                    if (usage is not None and turn_id is not None
                            and payload.get("turn_id") == turn_id):
                        calls[rid if isinstance(rid, str) else f"#{len(calls)}"] = usage
                elif kind == "turn_context":
                    baseline = total  # a turn begins
                    if isinstance(payload.get("model"), str):
                        model = payload["model"]
                    if turn_id is None:
                        prompts = []
                elif event == "user_message" and turn_id is None:
                    if isinstance(payload.get("message"), str):
                        prompts.append(payload["message"])
                elif event == "item_completed":
                    item = payload.get("item")
                    if (isinstance(item, dict) and item.get("type") == "UserMessage"
                            and turn_id is not None and payload.get("turn_id") == turn_id):
                        text = _text(item.get("content"))
                        if text is not None:
                            prompts.append(text)
                elif event == "token_count" and isinstance(payload.get("info"), dict):
                    info = payload["info"]
                    now, latest = (_tokens(info.get("total_token_usage")),
                                   _tokens(info.get("last_token_usage")))
                    if now is not None and latest is not None:
                        total, last = now, latest
                        window = _int(info.get("model_context_window")) or None
    except OSError:
        return None, None, []
    if total is None or last is None:
        return model, None, prompts
    if calls:
        spent = {k: sum(c[k] for c in calls.values()) for k in _TOKEN_FIELDS}
        last = list(calls.values())[-1]  # the turn's last call: its context
    else:
        spent = {k: max(total[k] - (baseline or {}).get(k, 0), 0) for k in _TOKEN_FIELDS}
    return model, Usage(
        input_tokens=max(spent["input_tokens"] - spent["cached_input_tokens"], 0),
        output_tokens=spent["output_tokens"],
        cache_read_tokens=spent["cached_input_tokens"],
        cache_creation_tokens=0,
        context_tokens=last["total_tokens"] or None,
        context_window=window,
    ), prompts


def _settled(path: str) -> None:
    """Wait (bounded) until the rollout has not grown for :data:`SETTLE_S`."""
    deadline = time.monotonic() + SETTLE_MAX_S
    try:
        size = os.stat(path).st_size
        while time.monotonic() < deadline:
            time.sleep(SETTLE_S)
            now = os.stat(path).st_size
            if now == size:
                return
            size = now
    except OSError:
        return


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


def _subcommand(argv: list[str]) -> tuple[str | None, int]:
    """Codex's subcommand in ``argv`` (``exec``, ``resume`` …) and its index, or
    (None, -1): the first positional word, when it names a session subcommand."""
    pos = 1
    for name, words in _split_args(argv[1:]):
        if name is None:
            word = words[0]
            return (word, pos) if word in _HEADLESS | _PICKERS else (None, -1)
        pos += len(words)
    return None, -1


class CodexProvider(Provider):
    name = "codex"
    commands = ("codex",)
    # ``UsageLimitReachedError``'s text in codex-rs/core/src/error.rs, with a typographic
    # apostrophe (U+2019) as codex-cli 0.171.0 prints it: "ERROR: You\u2019ve hit your usage
    # limit. … try again at 11:45 PM." (or "Try again in 2 days 3 hours 5 minutes.").
    # With an API key: the API's ``insufficient_quota`` ("Quota exceeded. Check your plan
    # and billing details.") and a rate limit it gave up retrying ("exceeded retry limit,
    # last status: 429 Too Many Requests"); no reset time: tether's default wait.
    usage_limit_patterns = ("you[\u2019']ve hit your usage limit", r"usage limit reached",
                            r"usage_limit_reached", r"quota exceeded\. check your plan",
                            r"exceeded retry limit, last status: 429")
    # ``ContextWindowExceeded``: "Codex ran out of room in the model's context window";
    # the API's "Your input exceeds the context window of this model".
    out_of_context_patterns = (r"ran out of room in the model's context window",
                               r"exceeds the context window")
    # Its approval prompt ("Would you like to run the following command?").
    waiting_patterns = (r"would you like to (?:run|make) the following",
                        r"allow command\?")
    notes = ("hooks (documented): launch, resume by thread id (headless: `codex exec "
             "resume`), turns, tool fencing, usage from the rollout file")

    # Its ``notify`` ended the task-title thread's turn too (finding 6 of issue 20).
    follows_session_at_turn_end = False

    def __init__(self, codex_home: str | None = None) -> None:
        self.codex_home = codex_home

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        if not argv:
            raise ValueError("empty command line")
        kept = [w for name, words in _split_args(argv[1:]) if name != BYPASS_TRUST
                for w in words]
        # CONFIG: ``-c key=value`` on the root command applies to subcommands too.
        return LaunchPlan(argv=[argv[0], *_hook_flags(ctx, self.codex_home), *kept])

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """Resume thread ``provider_session_id`` (RESUME): ``codex resume ID`` plus the
        original options, or for a headless ``codex exec`` run, ``codex exec [its
        options] resume ID PROMPT`` with a continuation prompt built from the drain
        snapshot. Without a thread (killed before its first prompt) or without its rollout,
        there is no conversation to resume: the original command starts afresh."""
        if not argv:
            raise ValueError("empty command line")
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        # find_rollout refuses an id that is no thread id (one reading as an option).
        if not provider_session_id or find_rollout(provider_session_id,
                                                   self.codex_home) is None:
            fresh = self.launch(argv, ctx)
            return LaunchPlan(argv=fresh.argv, env=env)
        env["TETHER_PROVIDER_SESSION"] = provider_session_id
        sub, at = _subcommand(argv)
        root = argv[1:at] if at > 0 else argv[1:]
        after = argv[at + 1:] if at > 0 else []
        root_opts = self._options(root)
        if sub in _HEADLESS:
            task = next((w[0] for n, w in _split_args(after) if n is None), None)
            prompt = _continuation(snapshot_path, task)
            flags = _hook_flags(ctx, self.codex_home)
            return LaunchPlan(argv=[argv[0], *flags, *root_opts, sub,
                                    *self._options(after), "resume", provider_session_id,
                                    prompt], env=env)
        # Interactive (``resume`` takes every interactive option, after the id).
        return LaunchPlan(argv=[argv[0], *_hook_flags(ctx, self.codex_home), "resume",
                                provider_session_id,
                                *root_opts, *self._options(after)], env=env)

    @staticmethod
    def _options(args: list[str]) -> list[str]:
        """The options of ``args`` that still apply to a resumed session: no positional
        word (a prompt, an old session id), no image, no picker flag."""
        return [w for name, words in _split_args(args)
                if name is not None and name not in _RESUME_DROP for w in words]

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        if event == NOTIFY_EVENT:
            return self._notify(payload)
        kind = EVENT_KINDS.get(event, "other")
        sid = _str(payload, "session_id")
        hook = HookEvent(kind=kind, provider_session_id=sid if sid and _THREAD_ID.match(sid)
                         else None, transcript_path=_str(payload, "transcript_path"),
                         raw=payload)
        if kind == "session_start":
            hook.session_source = _str(payload, "source")  # startup, resume, clear
        elif kind == "tool_request":
            hook.tool_name = _str(payload, "tool_name")
            tool_input = payload.get("tool_input")
            hook.tool_input = tool_input if isinstance(tool_input, dict) else {}
        elif kind == "turn_end":
            self._usage(hook, _str(payload, "turn_id"))
            answer = _str(payload, "last_assistant_message")
            if answer is not None:
                hook.messages.append({"role": "assistant", "content": answer})
        return hook

    def _usage(self, hook: HookEvent, turn_id: str | None) -> None:
        """The turn's model, usage and prompts, from its rollout (the module doc)."""
        sid = hook.provider_session_id
        path = find_rollout(sid, self.codex_home) if sid else None
        if path is None:
            return
        _settled(path)
        hook.transcript_path = path
        hook.model, hook.usage, prompts = read_rollout(path, turn_id)
        hook.messages.extend({"role": "user", "content": p} for p in prompts)

    def _notify(self, payload: dict[str, Any]) -> HookEvent:
        """NOTIFY, from a session launched by an older tether: ``agent-turn-complete`` is
        a turn of thread ``thread-id`` (another thread's is not this lineage's: the daemon
        neither counts it nor follows it)."""
        thread = payload.get("thread-id")
        sid = thread if isinstance(thread, str) and _THREAD_ID.match(thread) else None
        if payload.get("type") != TURN_COMPLETE:
            return HookEvent(kind="other", raw=payload, provider_session_id=sid)
        hook = HookEvent(kind="turn_end", raw=payload, provider_session_id=sid)
        inputs = payload.get("input-messages")
        if isinstance(inputs, list):
            hook.messages.extend({"role": "user", "content": m} for m in inputs
                                 if isinstance(m, str))
        answer = payload.get("last-assistant-message")
        if isinstance(answer, str):
            hook.messages.append({"role": "assistant", "content": answer})
        if sid:
            path = find_rollout(sid, self.codex_home)
            if path:
                hook.transcript_path = path
                turn = payload.get("turn-id")
                hook.model, hook.usage, _ = read_rollout(
                    path, turn if isinstance(turn, str) else None)
        return hook

    def reply(self, event: HookEvent, allowed: bool, reason: str) -> HookReply:
        """HOOKS, "PreToolUse": a denial is ``permissionDecision: "deny"`` with a reason;
        an allowed call prints nothing (Codex's own approval policy still applies)."""
        if event.kind != "tool_request" or allowed:
            return HookReply()
        out = {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                      "permissionDecision": "deny",
                                      "permissionDecisionReason": reason or "denied by tether"}}
        return HookReply(stdout=json.dumps(out).encode() + b"\n", exit_code=0)


def _continuation(snapshot_path: str, task: str | None) -> str:
    from pathlib import Path

    from tether.agent.snapshot import continuation_prompt

    return continuation_prompt(Path(snapshot_path), task)
