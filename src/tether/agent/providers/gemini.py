"""The Gemini CLI provider (google-gemini/gemini-cli), through its command hooks.

References (the comments next to the code cite them):

* HOOKS — "Hooks reference", https://geminicli.com/docs/hooks/reference (``docs/hooks/``
  in the repository): hooks live in ``settings.json`` under ``hooks``, event → list of
  definitions ``{"matcher", "hooks": [{"type": "command", "command", "name",
  "timeout"}]}``; the hook reads JSON on stdin (``session_id``, ``transcript_path``,
  ``cwd``, ``hook_event_name``, ``timestamp``) and may print one JSON object; exit 0.
  Events used: ``SessionStart`` (``source``: startup, resume, clear), ``BeforeTool``
  (``tool_name``, ``tool_input``; ``{"decision": "deny", "reason": …}`` blocks the
  call), ``AfterAgent`` (the agent loop of a turn completed), ``Notification``,
  ``PreCompress``, ``SessionEnd``. ``hooksConfig.enabled`` turns hooks on.
* CONFIG — "Gemini CLI configuration", https://geminicli.com/docs/reference/configuration:
  the *system defaults* file (lowest precedence; "for settings that are arrays or
  objects, the values are merged") can be moved with ``GEMINI_CLI_SYSTEM_DEFAULTS_PATH``.
  tether writes its hooks there, so the user's own settings and hooks still apply.
* SESSIONS — "Session Management", https://geminicli.com/docs/cli/session-management:
  ``gemini --resume`` (latest), ``--resume <index>`` or ``--resume <session UUID>``.

Usage: the hook payloads carry no token counts, and the session file format is not
documented; ``usage`` is None (a known limit).
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, ClassVar

from tether.agent.providers.base import (
    HookEvent,
    HookReply,
    LaunchPlan,
    Provider,
    SessionContext,
)

SETTINGS_FILE = "gemini-system-defaults.json"
SETTINGS_ENV = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"  # CONFIG

EVENT_KINDS: dict[str, str] = {  # HOOKS, the event table
    "SessionStart": "session_start",
    "BeforeTool": "tool_request",
    "AfterAgent": "turn_end",
    "Notification": "other",
    "PreCompress": "pre_compact",
    "SessionEnd": "session_end",
}
HOOK_TIMEOUT_MS = 30_000  # HOOKS: ``timeout`` is in milliseconds
# Options of ``gemini`` that take a value (``gemini --help``); kept with it on resume.
_VALUE_OPTS = frozenset({"-m", "--model", "--approval-mode", "-e", "--extensions",
                         "--include-directories", "--allowed-tools",
                         "--allowed-mcp-server-names", "-o", "--output-format",
                         "--sandbox-image", "--telemetry-target"})


def _str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value else None


class GeminiProvider(Provider):
    name = "gemini"
    commands = ("gemini",)
    # Gemini API quota errors as the CLI shows them: HTTP 429 ``RESOURCE_EXHAUSTED``,
    # "Quota exceeded for quota metric …", and the CLI's own "You have reached your daily
    # quota limit" / "Please retry in 23.4s" (packages/core/src/utils/quotaErrorDetection.ts).
    usage_limit_patterns = (r"RESOURCE_EXHAUSTED", r"quota exceeded",
                            r"reached your daily .*(?:quota|limit)", r"usage limit reached")
    out_of_context_patterns = (r"exceeds the maximum number of tokens",
                               r"context window (?:exceeded|is full)")
    waiting_patterns = (r"Allow execution\??", r"Apply this change\??")
    notes = "hooks (documented): launch, resume, turns, tool fencing, session forks; no usage"
    _RESUME_DROP: ClassVar[dict[str, int]] = {
        "-p": 1, "--prompt": 1, "-i": 1, "--prompt-interactive": 1, "-r": 1, "--resume": 1}

    def _plan(self, head: list[str], args: list[str], ctx: SessionContext,
              env: dict[str, str]) -> LaunchPlan:
        hooks: dict[str, list[dict[str, Any]]] = {}
        for event in EVENT_KINDS:
            command = shlex.join([*ctx.hook_command, "gemini", event])
            group: dict[str, Any] = {"hooks": [{"type": "command", "name": f"tether-{event}",
                                                "command": command,
                                                "timeout": HOOK_TIMEOUT_MS}]}
            if event == "BeforeTool":
                group = {"matcher": ".*", **group}  # HOOKS: a regex over tool names
            hooks[event] = [group]
        settings = {"hooksConfig": {"enabled": True}, "hooks": hooks}
        path = os.path.join(ctx.state_dir, SETTINGS_FILE)
        data = json.dumps(settings, indent=2).encode() + b"\n"
        return LaunchPlan(argv=[*head, *args], env={**env, SETTINGS_ENV: path},
                          files={path: data})

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        if not argv:
            raise ValueError("empty command line")
        return self._plan([argv[0]], argv[1:], ctx, {})

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        """``gemini --resume ID`` (SESSIONS; ``--resume`` alone: the latest) plus the
        original options, without the prompt options and positional words."""
        if not argv:
            raise ValueError("empty command line")
        kept: list[str] = []
        args = argv[1:]
        i = 0
        while i < len(args):
            word = args[i]
            name = word.partition("=")[0]
            if name in self._RESUME_DROP:
                i += 1 + (0 if "=" in word else self._RESUME_DROP[name])
                continue
            if not word.startswith("-"):
                i += 1
                continue
            kept.append(word)
            i += 1
            if name in _VALUE_OPTS and "=" not in word and i < len(args):
                kept.append(args[i])
                i += 1
        head = [argv[0], "--resume", *([provider_session_id] if provider_session_id else [])]
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        if provider_session_id:
            env["TETHER_PROVIDER_SESSION"] = provider_session_id
        return self._plan(head, kept, ctx, env)

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
            # HOOKS, "AfterAgent input": ``prompt`` and ``prompt_response``.
            prompt, answer = _str(payload, "prompt"), _str(payload, "prompt_response")
            if prompt is not None:
                hook.messages.append({"role": "user", "content": prompt})
            if answer is not None:
                hook.messages.append({"role": "assistant", "content": answer})
        return hook

    def reply(self, event: HookEvent, allowed: bool, reason: str) -> HookReply:
        """HOOKS, "BeforeTool" decision: ``{"decision": "deny", "reason": …}`` on exit 0
        blocks the call; an allowed call prints nothing (Gemini's own policy decides)."""
        if event.kind != "tool_request" or allowed:
            return HookReply()
        out = {"decision": "deny", "reason": reason}
        return HookReply(stdout=json.dumps(out).encode() + b"\n", exit_code=0)
