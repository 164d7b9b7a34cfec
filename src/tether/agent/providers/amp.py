"""Amp (https://ampcode.com, Sourcegraph), through its terminal output.

Documented (the Owner's Manual, https://ampcode.com/manual): ``amp`` runs interactively,
``amp -x "prompt"`` ("execute mode") runs one prompt; conversations are *threads* with
ids ``T-<uuid>`` (shown in thread URLs ``https://ampcode.com/threads/T-…``), continued
with ``amp threads continue [thread-id]``. Amp has no command hooks tether can use.

Heuristic: a turn ends after 5 s without output; the thread id is the last ``T-<uuid>``
in the output. Without one, ``amp threads continue`` picks the last thread.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.agent.providers.heuristic import OutputProvider


class AmpProvider(OutputProvider):
    name = "amp"
    commands = ("amp",)
    turn_idle_seconds = 5.0
    session_pattern = r"\b(T-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b"
    # Amp's free mode has a daily grant; paid usage has no limit but credits.
    usage_limit_patterns = (r"out of (?:free )?credits", r"daily (?:grant|limit) (?:used|"
                            r"reached|exhausted)", r"usage limit reached")
    out_of_context_patterns = (r"context (?:window|limit) (?:exceeded|reached)",)
    resume_argv = ("{argv0}", "threads", "continue", "{session}", "{args}")
    resume_last_argv = ("{argv0}", "threads", "continue", "{args}")
    resume_drop: Mapping[str, int] = {"-x": 1, "--execute": 1}
    drop_positionals = True
    value_options = frozenset({"--mode", "-m", "--visibility", "--settings-file",
                               "--log-level", "--log-file", "--mcp-config"})
    notes = ("output heuristics: turns (5 s of quiet), thread id from the output; resume by "
             "`amp threads continue` (documented)")
