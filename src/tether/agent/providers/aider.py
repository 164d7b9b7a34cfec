"""Aider (https://aider.chat), through its terminal output: it has no hooks.

Documented (https://aider.chat/docs/config/options.html): ``--restore-chat-history``
("Restore the previous chat history messages", from ``.aider.chat.history.md`` in the
working directory, ``--chat-history-file``), ``--message/-m`` ("Specify a single message
to send the LLM, process reply then exit"), ``--message-file/-f``. After each model call
Aider prints its usage report, ``Tokens: 12k sent, 1.2k received. Cost: …``, with the
cache when the API reports one: ``Tokens: 12k sent, 3.4k cache write, 8.0k cache hit, 1.2k
received.`` (``calculate_and_show_tokens_and_cost`` in ``aider/coders/base_coder.py`` of
Aider-AI/aider), and then its prompt ``> `` (with the edit format in front, e.g.
``architect> ``, ``diff> ``).

Heuristic: a turn ends when the output has been quiet for 3 s, its last line is that
prompt (with whatever the user has typed after it) and, since the last turn, Aider printed
a usage line (a model call): its banner, its local commands (``/tokens``, ``/help``), an
empty line's redraw are no turns. Its
tokens are what those usage lines say — Aider's own figures: when it streams, its own
estimate of the prompt (tiktoken, not the API's count); otherwise the API's, rounded
(``4.3k``, ``12k``). Aider has no session id: a revived attempt restores the chat history
file, the one Aider keeps per directory; a one-shot (``--message``) run is revived one-shot,
its message a continuation prompt from the drain snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tether.agent.providers.base import LaunchPlan, SessionContext
from tether.agent.providers.heuristic import OutputProvider

#: Aider's options that send one message and exit (one-shot, headless).
ONE_SHOT = ("-m", "--message", "--msg", "-f", "--message-file")
_NUMBER = r"[\d.,]+[kKmM]?"


class AiderProvider(OutputProvider):
    name = "aider"
    commands = ("aider",)
    turn_idle_seconds = 3.0
    # Its prompt, with what the user has typed so far after it: a person mid-sentence is
    # at the prompt, not in a turn (whose silence would be a hang).
    turn_end_pattern = r"^(?:\w[\w-]*)?>(?: |$)"
    usage_pattern = (rf"Tokens: (?P<input>{_NUMBER}) sent"
                     rf"(?:, (?P<cache_write>{_NUMBER}) cache write)?"
                     rf"(?:, (?P<cache_read>{_NUMBER}) cache hit)?"
                     rf", (?P<output>{_NUMBER}) received")
    turn_needs_usage = True
    # LiteLLM's rate-limit errors as Aider prints them ("litellm.RateLimitError: …",
    # "You exceeded your current quota"); Aider itself retries short ones.
    usage_limit_patterns = (r"RateLimitError", r"exceeded your current quota",
                            r"insufficient_quota")
    out_of_context_patterns = (r"exceeds the .*context window", r"ContextWindowExceeded")
    waiting_patterns = (r"\(Y\)es/\(N\)o", r"\[Yes\]:\s*$")
    resume_argv = ("{argv0}", "--restore-chat-history", "{args}")
    resume_last_argv = resume_argv
    # A one-shot message is not sent again on a revival (a continuation prompt is).
    resume_drop: Mapping[str, int] = {**{o: 1 for o in ONE_SHOT},
                                      "--restore-chat-history": 0}
    # Its state (analytics id, caches) and, read-only, its config and keys: the documented
    # ``~/.aider.conf.yml``, ``~/.env``, ``~/.aider.model.settings.yml`` and
    # ``~/.aider.model.metadata.json`` (https://aider.chat/docs/config.html).
    home_config = (".aider",)
    home_config_read_only = (".aider.conf.yml", ".env", ".aider.model.settings.yml",
                             ".aider.model.metadata.json")
    # Behind the egress proxy: no analytics this session (``--no-analytics``; never its
    # ``--analytics-disable``, which writes a permanent opt-out into ``~/.aider``) and no
    # update check on pypi.org (``--no-check-update``), through its ``AIDER_*`` variables.
    quiet_env: Mapping[str, str] = MappingProxyType({"AIDER_ANALYTICS": "false",
                                                     "AIDER_CHECK_UPDATE": "false"})
    notes = ("output heuristics: turns (its prompt after 3 s of quiet, after a usage line), "
             "tokens from its usage lines (its own figures); resume by "
             "--restore-chat-history (documented), one-shot runs one-shot")

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        plan = super().resume(argv, provider_session_id, snapshot_path, ctx)
        task = _one_shot_message(argv[1:])
        if task is None:
            return plan
        from pathlib import Path

        from tether.agent.snapshot import continuation_prompt

        prompt = continuation_prompt(Path(snapshot_path), task or None)
        return LaunchPlan(argv=[*plan.argv, "--message", prompt], env=plan.env)


def _one_shot_message(args: list[str]) -> str | None:
    """The message of a one-shot command line ('' for a ``--message-file``), else None."""
    found: str | None = None
    for i, word in enumerate(args):
        name, eq, value = word.partition("=")
        if name not in ONE_SHOT:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        found = value if name in ("-m", "--message", "--msg") else ""
    return found
