"""Turns of agent CLIs without hooks, inferred from their output (a heuristic).

For a provider with ``turn_idle_seconds`` (Aider, OpenCode, Amp, user-defined ones), the
agent tick calls :meth:`OutputTurns.check` for each ACTIVE lineage. Only the output written
since the last look counts (a byte offset into the attempt's terminal log, or stdout): when
there is some, it has been quiet for ``turn_idle_seconds`` and its last line matches
``turn_end_pattern`` (when set: the CLI's prompt), that output is one turn — reported like
any other (``agent.turn``, lifecycle, snapshot), with the context percent, session id and
token counts (every usage line in it, one per model call) and model the provider's regexes
find in it (the model: else the one its profile names, for ``tether cost``). A provider
whose every turn prints a usage line (``turn_needs_usage``: Aider) has no turn without one:
its banner, a local command (``/tokens``), an empty line's redraw, a revived attempt's
banner are output at its prompt, not turns. Output that went quiet elsewhere than at the
prompt, once the CLI has been at its prompt, is a turn in progress (an interactive agent
then no longer waits for its user: its silence may be a hang); for a provider without a
prompt pattern, any new output after a turn is.

An attempt that ends with a turn's output not yet read (a headless ``aider --message``
exits right after its usage line) has that turn reported first (:meth:`final`). The
offset is memory (C): after a daemon restart the output already there is not read again.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from tether.agent.exits import TAIL_BYTES, clean
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import HookEvent, Provider
from tether.daemon.agents.core import AgentCore
from tether.daemon.agents.protocol import Protocol
from tether.model.records import ExecRecord, LineageRecord
from tether.model.states import ExecState

#: At most this much of a turn's output goes into the drain snapshot, as its answer.
ANSWER_CHARS = 4000
_SUFFIX = {"k": 1_000, "m": 1_000_000}


def count(text: str) -> int:
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


def usage_of(pattern: str | None, text: str) -> dict[str, int] | None:
    """The token counts of every usage line in ``text``, summed (one line per model call).
    The input and output tokens are the named groups ``input`` and ``output`` (else groups
    1 and 2); named groups ``cache_write`` and ``cache_read``, when the pattern has them
    and they matched, the cache's."""
    if not pattern:
        return None
    total: dict[str, int] | None = None
    for m in re.finditer(pattern, text, re.IGNORECASE | re.MULTILINE):
        named = "input" in m.re.groupindex and "output" in m.re.groupindex
        total = total or {"input_tokens": 0, "output_tokens": 0}
        total["input_tokens"] += count(m.group("input" if named else 1))
        total["output_tokens"] += count(m.group("output" if named else 2))
        for group, key in (("cache_write", "cache_creation_tokens"),
                           ("cache_read", "cache_read_tokens")):
            if group in m.re.groupindex and m.group(group):
                total[key] = total.get(key, 0) + count(m.group(group))
    return total


def read_span(path: Path, start: int, end: int, limit: int = TAIL_BYTES) -> str:
    """Bytes ``start``..``end`` of ``path`` (the last ``limit`` of them) as text."""
    start = max(start, end - limit)
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(start)
        return f.read(max(0, end - start)).decode("utf-8", "replace")
    return ""


class OutputTurns:
    def __init__(self, core: AgentCore, protocol: Protocol) -> None:
        self.core = core
        self.protocol = protocol

    def _unread(self, rec: LineageRecord, x: ExecRecord) -> tuple[Path, int, int] | None:
        """The attempt's log, the offset read up to and its size now (None: no log)."""
        paths = self.core.execs.paths(x)
        path = paths.pty if x.spec.tty else paths.stdout
        try:
            size = path.stat().st_size
        except OSError:
            return None
        mark = self.core.output_marks.get(rec.id)
        if mark is None or mark[0] != x.id:
            # After a restart: what is there was read by the last daemon.
            self.core.output_marks[rec.id] = (x.id, size)
            return None
        return path, mark[1], size

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
        unread = self._unread(rec, x)
        if unread is None:
            return
        path, start, size = unread
        try:
            quiet = now - path.stat().st_mtime
        except OSError:
            return
        if size <= start:
            return
        if provider.turn_end_pattern is None and rec.waiting_since is not None:
            # No prompt to tell by: new output after the turn it waited at starts the next.
            rec = core.turn_started(rec, "new output")
        if quiet < idle:
            return
        text = clean(read_span(path, start, size))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if provider.turn_end_pattern and not (lines and re.search(
                provider.turn_end_pattern, lines[-1].rstrip(), re.IGNORECASE)):
            # Quiet, but not at its prompt: once it has been at its prompt (the mark moves
            # only there), a turn in progress, whose silence may be a hang; before, it is
            # still starting up.
            if rec.waiting_since is not None and start > 0:
                core.turn_started(rec, "output away from its prompt")
            return
        core.output_marks[rec.id] = (x.id, size)
        await self._report(rec, provider, text, lines)

    def final(self, rec: LineageRecord, x: ExecRecord) -> str | None:
        """The unread output of attempt ``x`` (ended) when it holds a turn, else None."""
        try:
            provider = get_provider(rec.config.provider)
        except KeyError:
            return None
        if provider.turn_idle_seconds is None or not provider.turn_needs_usage:
            return None  # only a usage line tells a turn's output from a goodbye
        unread = self._unread(rec, x)
        if unread is None or unread[2] <= unread[1]:
            return None
        path, start, size = unread
        text = clean(read_span(path, start, size))
        if usage_of(provider.usage_pattern, text) is None:
            return None
        self.core.output_marks[rec.id] = (x.id, size)
        return text

    async def report_final(self, rec: LineageRecord, text: str) -> None:
        """Report the turn :meth:`final` found, before its attempt's end is settled."""
        try:
            provider = get_provider(rec.config.provider)
        except KeyError:
            return
        await self._report(rec, provider, text, [ln for ln in text.splitlines() if ln.strip()])

    async def _report(self, rec: LineageRecord, provider: Provider, text: str,
                      lines: list[str]) -> None:
        usage = usage_of(provider.usage_pattern, text)
        if provider.turn_needs_usage and usage is None:
            # No model call (a banner, a local command, a redraw): no turn; at its prompt
            # the agent waits for its user.
            if rec.config.tty and rec.waiting_since is None:
                self.core.wait_for_user(rec, "idle", "the agent waits at its prompt")
            return
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
        named = _last(getattr(provider, "model_pattern", None), text)
        model = named.group(1) if named is not None else getattr(provider, "model", None)
        answer = "\n".join(lines)[-ANSWER_CHARS:]
        messages: list[dict[str, Any]] = [{"role": "assistant", "content": answer}] \
            if answer else []
        await self.protocol.turn(rec, context_pct=pct, usage=usage, model=model,
                                 messages=messages)

