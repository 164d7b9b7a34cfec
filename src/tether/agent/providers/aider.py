"""Aider (https://aider.chat), through its terminal output: it has no hooks.

Documented (https://aider.chat/docs/config/options.html): ``--restore-chat-history``
("Restore the previous chat history messages", from ``.aider.chat.history.md`` in the
working directory, ``--chat-history-file``), ``--message/-m`` ("Specify a single message
to send the LLM, process reply then exit"), ``--message-file/-f``. After each reply Aider
prints ``Tokens: 12k sent, 1.2k received. Cost: …`` (its "usage report", ``base_coder.py``
in Aider-AI/aider) and then its prompt ``> `` (with the edit format in front, e.g.
``architect> ``, ``diff> ``).

Heuristic: a turn ends when the output has been quiet for 3 s and its last line is
that prompt; the usage line gives the turn's tokens. Aider has no session id: a revived
attempt restores the chat history file, the one Aider keeps per directory.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.agent.providers.heuristic import OutputProvider


class AiderProvider(OutputProvider):
    name = "aider"
    commands = ("aider",)
    turn_idle_seconds = 3.0
    turn_end_pattern = r"^(?:\w[\w-]*)?> ?$"
    usage_pattern = r"Tokens: ([\d.,]+[kKmM]?) sent, ([\d.,]+[kKmM]?) received"
    # LiteLLM's rate-limit errors as Aider prints them ("litellm.RateLimitError: …",
    # "You exceeded your current quota"); Aider itself retries short ones.
    usage_limit_patterns = (r"RateLimitError", r"exceeded your current quota",
                            r"insufficient_quota")
    out_of_context_patterns = (r"exceeds the .*context window", r"ContextWindowExceeded")
    waiting_patterns = (r"\(Y\)es/\(N\)o", r"\[Yes\]:\s*$")
    resume_argv = ("{argv0}", "--restore-chat-history", "{args}")
    resume_last_argv = resume_argv
    # A one-shot message is not sent again on a revival.
    resume_drop: Mapping[str, int] = {"-m": 1, "--message": 1, "--msg": 1,
                                             "-f": 1, "--message-file": 1,
                                             "--restore-chat-history": 0}
    # Its state (analytics id, caches) and, read-only, its config and keys: the documented
    # ``~/.aider.conf.yml``, ``~/.env``, ``~/.aider.model.settings.yml`` and
    # ``~/.aider.model.metadata.json`` (https://aider.chat/docs/config.html).
    home_config = (".aider",)
    home_config_read_only = (".aider.conf.yml", ".env", ".aider.model.settings.yml",
                             ".aider.model.metadata.json")
    notes = ("output heuristics: turns (prompt after 3 s of quiet), tokens from its usage "
             "line; resume by --restore-chat-history (documented)")
