"""OpenCode (https://opencode.ai, sst/opencode), through its terminal output.

Documented (https://opencode.ai/docs/cli): ``opencode [project]`` starts the TUI with
``--continue/-c`` ("Continue the last session") and ``--session/-s`` ("Session ID to
continue"), ``--model/-m``, ``--agent``, ``--prompt``; ``opencode run [message]`` runs one
prompt with the same session flags. Session ids look like ``ses_…``. OpenCode's plugin
hooks are JavaScript inside its process, not commands, so tether does not use them.

Heuristic: a turn ends after 5 s without output; the session id is the last ``ses_…``
word in the output (``opencode run --format json`` prints it in every event as
``"sessionID"``). Without one, a revival continues the last session (``--continue``).
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.agent.providers.heuristic import OutputProvider


class OpenCodeProvider(OutputProvider):
    name = "opencode"
    commands = ("opencode",)
    turn_idle_seconds = 5.0
    session_pattern = r"\b(ses_[0-9A-Za-z]{8,})\b"
    usage_limit_patterns = (r"rate limit(?:ed)? (?:reached|exceeded)", r"usage limit reached",
                            r"exceeded your current quota", r"RESOURCE_EXHAUSTED")
    out_of_context_patterns = (r"context (?:length|window) exceeded", r"prompt is too long")
    resume_argv = ("{argv0}", "--session", "{session}", "{args}")
    resume_last_argv = ("{argv0}", "--continue", "{args}")
    # The prompt of ``run`` (positional) and ``--prompt`` belong to the first attempt; a
    # revival resumes in the TUI.
    resume_drop: Mapping[str, int] = {"-s": 1, "--session": 1, "-c": 0,
                                             "--continue": 0, "--prompt": 1, "--fork": 0,
                                             "--format": 1}
    drop_positionals = True
    value_options = frozenset({"-m", "--model", "--agent", "--port", "--hostname",
                               "--log-level", "--dir", "--title", "--variant"})
    notes = ("output heuristics: turns (5 s of quiet), session id from the output; resume "
             "by --session/--continue (documented)")
