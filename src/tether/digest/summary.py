"""Deterministic summaries: execs into an hour's summary, summaries into a longer one.

Every figure adds up (a day's runs are its hours' runs), so a week built from days
says the same as one built from execs, and no network or model is needed. A
``--summarizer`` command may add prose on top (``text``); the figures stay.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.model.digest import DigestSummary, FailureNote

TOP_COMMANDS = 20
LAST_FAILURES = 3


@dataclass
class Leaf:
    """One ended exec, as the digest needs it."""

    id: str
    sandbox: str
    argv: list[str]
    state: str
    exit_code: int | None
    signal: int | None
    reason: str | None
    started_at: float | None
    ended_at: float
    lineage: str | None = None
    name: str | None = None  # the exec's (`tether run --name`; a job's run: JOB#N)
    revival: bool = False
    turns: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    context_peak_pct: float | None = None
    last_line: str = ""


#: A ``sh -c`` script's commands that are not what it is about (``cd x && make``: make).
_SHELL_WORDS = {"cd", "exit", "set", "export", "exec", "env", "time", "if", "then",
                "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
                "!", "{", "}", "(", ")"}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", "{", "then", "do", "else", "elif", "!"}
#: A script's separators as words (not the ``&`` of a redirection such as ``>&2``).
_SPLIT = re.compile(r"(&&|\|\||;|\||(?<![<>])&(?!>)|\(|\)|\{|\})")
_REDIRECT = re.compile(r"^[0-9]*[<>]")


def command_name(argv: list[str], name: str | None = None) -> str:
    """What a person calls the command: the exec's name when it has one (a scheduled
    job's run, ``nightly#3``, is its job, ``nightly``), else ``pytest`` for
    ``/venv/bin/pytest -x``, or the first command a ``sh -c`` script runs (``make`` for
    ``sh -c 'cd x; make test'``; ``sh`` when it runs none of its own, e.g. ``exit 3``)."""
    if name:
        job, sep, number = name.rpartition("#")
        return job if sep and number.isdigit() else name
    if not argv:
        return "?"
    base = os.path.basename(argv[0])
    if base in {"sh", "bash", "dash", "zsh"} and len(argv) > 2 and argv[1] == "-c":
        at_command = True
        for word in _SPLIT.sub(r" \1 ", argv[2]).split():
            if word in _SEPARATORS:
                at_command = True
            elif _REDIRECT.match(word) or (at_command and "=" in word.split("/")[0]):
                continue  # a redirection; FOO=1 make: the variable, then the command
            elif at_command:
                if word not in _SHELL_WORDS:
                    return os.path.basename(word)
                at_command = word in _SEPARATORS
    return base


def _top(counter: Counter[str]) -> dict[str, int]:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return dict(ranked[:TOP_COMMANDS])


def _peak(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def of_leaves(leaves: Iterable[Leaf]) -> DigestSummary:
    s = DigestSummary()
    commands: Counter[str] = Counter()
    failures: list[FailureNote] = []
    for leaf in leaves:
        s.runs += 1
        if leaf.state == "FINISHED" and leaf.exit_code == 0:
            s.succeeded += 1
        elif leaf.state == "CANCELLED":
            s.cancelled += 1
        else:
            s.failed += 1
            failures.append(FailureNote(
                exec=leaf.id, command=command_name(leaf.argv, leaf.name), exit_code=leaf.exit_code,
                signal=leaf.signal, reason=leaf.reason, line=leaf.last_line,
                ended_at=leaf.ended_at))
        if leaf.lineage is not None:
            s.agent_runs += 1
            s.revivals += int(leaf.revival)
        s.turns += leaf.turns
        for k, v in leaf.tokens.items():
            s.tokens[k] = s.tokens.get(k, 0) + v
        s.context_peak_pct = _peak(s.context_peak_pct, leaf.context_peak_pct)
        took = max(0.0, leaf.ended_at - (leaf.started_at or leaf.ended_at))
        s.busy_seconds += took
        if took > s.longest_seconds or s.longest_exec is None:
            s.longest_seconds, s.longest_exec = took, leaf.id
        commands[command_name(leaf.argv, leaf.name)] += 1
    s.commands = _top(commands)
    s.failures = sorted(failures, key=lambda f: f.ended_at)[-LAST_FAILURES:]
    s.text = describe(s)
    return s


def merge(parts: Iterable[DigestSummary]) -> DigestSummary:
    s = DigestSummary()
    commands: Counter[str] = Counter()
    failures: list[FailureNote] = []
    for p in parts:
        s.runs += p.runs
        s.succeeded += p.succeeded
        s.failed += p.failed
        s.cancelled += p.cancelled
        s.agent_runs += p.agent_runs
        s.revivals += p.revivals
        s.turns += p.turns
        for k, v in p.tokens.items():
            s.tokens[k] = s.tokens.get(k, 0) + v
        s.context_peak_pct = _peak(s.context_peak_pct, p.context_peak_pct)
        s.busy_seconds += p.busy_seconds
        if p.longest_exec is not None and (s.longest_exec is None
                                           or p.longest_seconds > s.longest_seconds):
            s.longest_seconds, s.longest_exec = p.longest_seconds, p.longest_exec
        commands.update(p.commands)
        failures.extend(p.failures)
    s.commands = _top(commands)
    s.failures = sorted(failures, key=lambda f: f.ended_at)[-LAST_FAILURES:]
    s.text = describe(s)
    return s


def _qty(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def describe(s: DigestSummary) -> str:
    """One line a person reads first: what ran, how it went, what failed last."""
    if s.runs == 0:
        return "nothing ran"
    parts = [f"{s.runs} run{'s' * (s.runs != 1)}: {s.succeeded} ok, {s.failed} failed"
             + (f", {s.cancelled} cancelled" if s.cancelled else "")]
    if s.agent_runs:
        agent = f"{s.agent_runs} agent attempt{'s' * (s.agent_runs != 1)}"
        if s.revivals:
            agent += f" ({s.revivals} revival{'s' * (s.revivals != 1)})"
        if s.turns:
            agent += f", {s.turns} turn{'s' * (s.turns != 1)}"
        total = sum(s.tokens.values())
        if total:
            agent += f", {_qty(total)} tokens"
        if s.context_peak_pct is not None:
            agent += f", context peak {s.context_peak_pct:.0f}%"
        parts.append(agent)
    top = ", ".join(f"{name} ({n})" for name, n in list(s.commands.items())[:3])
    parts.append(f"top: {top}")
    if s.failures:
        f = s.failures[-1]
        how = (f"signal {f.signal}" if f.signal is not None else
               f"exit {f.exit_code}" if f.exit_code is not None else (f.reason or "failed"))
        parts.append(f"last failure: {f.command} ({how})" + (f": {f.line}" if f.line else ""))
    return " · ".join(parts)
