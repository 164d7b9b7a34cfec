"""Turns of agent CLIs without hooks, inferred from their output (a heuristic).

For a provider with ``turn_idle_seconds`` (Aider, OpenCode, Amp, user-defined ones), the
agent tick calls :meth:`OutputTurns.check` for each ACTIVE lineage: when the attempt's
output (its terminal log, or stdout) has grown since the last counted turn, has been
quiet for ``turn_idle_seconds``, and its last line matches ``turn_end_pattern`` (when
set), that is one turn: reported like any other (``agent.turn``, lifecycle, snapshot),
with the context percent, session id, token counts and model the provider's regexes
find in the last output (the model: else the one its profile names, for ``tether
cost``). The mark of the last counted output is memory (C): after a daemon restart the
output already there is not counted again.
"""

from __future__ import annotations

import re
from typing import Any

from tether.agent.exits import TAIL_BYTES, clean
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import HookEvent
from tether.daemon.agents.core import AgentCore
from tether.daemon.agents.ending import read_tail
from tether.daemon.agents.protocol import Protocol
from tether.model.records import LineageRecord
from tether.model.states import ExecState

#: At most this much of a turn's output goes into the drain snapshot, as its answer.
ANSWER_CHARS = 4000
_SUFFIX = {"k": 1_000, "m": 1_000_000}


def _count(text: str) -> int:
    """``12``, ``1,234``, ``12k``, ``1.2M`` as an integer."""
    text = text.replace(",", "").strip()
    mult = _SUFFIX.get(text[-1:].lower(), 1)
    number = text[:-1] if mult != 1 else text
    try:
        return int(float(number) * mult)
    except ValueError:
        return 0


def _last(pattern: str | None, text: str) -> re.Match[str] | None:
    if not pattern:
        return None
    matches = list(re.finditer(pattern, text, re.IGNORECASE | re.MULTILINE))
    return matches[-1] if matches else None


class OutputTurns:
    def __init__(self, core: AgentCore, protocol: Protocol) -> None:
        self.core = core
        self.protocol = protocol

    async def check(self, rec: LineageRecord, now: float) -> None:
        core = self.core
        try:
            provider = get_provider(rec.config.provider)
        except KeyError:
            return  # a user-defined provider whose file is gone
        idle = provider.turn_idle_seconds
        if idle is None or not rec.exec_id:
            return
        x = core.store.get_exec(rec.exec_id)
        if x is None or x.state != ExecState.RUNNING:
            return
        paths = core.execs.paths(x)
        path = paths.pty if x.spec.tty else paths.stdout
        try:
            st = path.stat()
        except OSError:
            return
        mark = core.output_marks.get(rec.id)
        if mark is None:  # after a restart: what is there was seen by the last daemon
            core.output_marks[rec.id] = st.st_mtime
            return
        if st.st_size == 0 or st.st_mtime <= mark or now - st.st_mtime < idle:
            return
        text = clean(read_tail(path, TAIL_BYTES))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if provider.turn_end_pattern and not (lines and re.search(
                provider.turn_end_pattern, lines[-1].rstrip(), re.IGNORECASE)):
            return
        core.output_marks[rec.id] = st.st_mtime
        session = _last(provider.session_pattern, text)
        if session is not None and session.group(1) != rec.provider_session_id:
            rec = self.protocol.follow_session(rec, provider.name, HookEvent(
                kind="session_start", provider_session_id=session.group(1),
                session_source="output"))
        ctx = _last(provider.context_pattern, text)
        pct = None
        if ctx is not None:
            try:
                pct = min(100.0, max(0.0, float(ctx.group(1))))
            except ValueError:
                pct = None
        used = _last(provider.usage_pattern, text)
        usage = None if used is None else {"input_tokens": _count(used.group(1)),
                                           "output_tokens": _count(used.group(2))}
        named = _last(getattr(provider, "model_pattern", None), text)
        model = named.group(1) if named is not None else getattr(provider, "model", None)
        answer = "\n".join(lines)[-ANSWER_CHARS:]
        messages: list[dict[str, Any]] = [{"role": "assistant", "content": answer}] \
            if answer else []
        await self.protocol.turn(rec, context_pct=pct, usage=usage, model=model,
                                 messages=messages)
