"""What agentfactory's TypeScript reader makes of a worktree's ``.agent/`` files.

A Python restatement (written from reading it, not a port) of ``checkRecovery`` in
supaku/agentfactory ``packages/core/src/orchestrator/state-recovery.ts`` and of the field
types in ``state-types.ts`` that it and ``buildRecoveryPrompt`` rely on. tether writes these
files for agentfactory's tools, so the e2e tests judge a real claim by the reader's rules
rather than by our own codec (which happily reads ``"issueId": ""``).

:func:`check` returns the reader's verdict — the ``reason`` it would answer, in its order
(``no_state``, ``invalid_state``, ``identifier_mismatch``, ``agent_alive``,
``max_attempts``, or ``can_recover``) — plus every field rule, passed or failed, so a
failure names the rule. ``str(report)`` is the printable form.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HEARTBEAT_TIMEOUT_MS", "MAX_RECOVERY_ATTEMPTS", "WORKTREE_STATUSES", "Report",
           "check"]

HEARTBEAT_TIMEOUT_MS = 30_000  # the reader's default heartbeat timeout
MAX_RECOVERY_ATTEMPTS = 3  # the reader's default
# The reader's WorktreeStatus union; buildRecoveryPrompt prints it as "Last status".
WORKTREE_STATUSES = frozenset(
    {"initializing", "running", "completing", "completed", "failed", "stopped"})
# JS Date accepts at most this many ms either side of the epoch; toISOString throws beyond.
_JS_DATE_MAX_MS = 8.64e15
# Before 2001-09-09 in ms: a smaller "timestamp" is almost surely seconds, which the
# reader would take for 1970 (so every heartbeat would look stale).
_MIN_PLAUSIBLE_MS = 1e12


@dataclass
class Report:
    """The reader's verdict on one worktree and the rules behind it."""

    reason: str  # what checkRecovery answers, or "can_recover"
    message: str
    rules: list[tuple[str, bool, str]] = field(default_factory=list)  # (rule, ok, detail)

    @property
    def failed(self) -> list[str]:
        return [f"{rule}: {detail}" for rule, ok, detail in self.rules if not ok]

    def __str__(self) -> str:
        lines = [f"verdict: {self.reason} ({self.message})"]
        lines += [f"  {'ok  ' if ok else 'FAIL'} {rule}: {detail}"
                  for rule, ok, detail in self.rules]
        return "\n".join(lines)


def _load(path: str) -> Any:
    # The reader treats a missing or unparsable file alike: as no file at all.
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _get(doc: dict[str, Any], key: str) -> Any:
    return doc.get(key)  # typed Any: JSON, checked by the rules


def _js_truthy(v: Any) -> bool:
    # JS falsy values as JSON can carry them: null, false, 0, "" (NaN cannot be JSON).
    return v is not None and v is not False and v != 0 and v != ""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _ms(v: Any) -> tuple[bool, str]:
    if not _is_number(v):
        return False, f"{v!r} is not a number"
    if not _MIN_PLAUSIBLE_MS <= v <= _JS_DATE_MAX_MS:
        return False, f"{v!r} is not Unix milliseconds a JS Date can hold"
    return True, f"{v!r} ms"


def check(worktree: str | os.PathLike[str], *, expected_identifier: str | None = None,
          now_ms: float | None = None, heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS,
          max_recovery_attempts: int = MAX_RECOVERY_ATTEMPTS) -> Report:
    """Judge ``<worktree>/.agent/`` as checkRecovery would (``now_ms``: its ``Date.now()``).

    The verdict follows the reader's order of checks; the rules also cover the fields it
    does not gate on but parses or declares (timestamps, ``status``), so a file that
    passes here reads as intended on the TS side, not merely without an error.
    """
    now = time.time() * 1000 if now_ms is None else now_ms
    agent_dir = os.path.join(os.fspath(worktree), ".agent")
    rules: list[tuple[str, bool, str]] = []

    def rule(name: str, ok: bool, detail: str) -> bool:
        rules.append((name, ok, detail))
        return ok

    if not os.path.isdir(agent_dir):
        return Report("no_state", "no .agent directory", rules)
    state = _load(os.path.join(agent_dir, "state.json"))
    if not rule("state.json is a JSON object", isinstance(state, dict), type(state).__name__):
        return Report("no_state", "no readable state.json", rules)
    assert isinstance(state, dict)

    # Gate 1: both ids must be truthy.
    ids_ok = True
    for key in ("issueId", "issueIdentifier"):
        v = _get(state, key)
        ids_ok &= rule(f"{key} is a non-empty string (required)",
                       isinstance(v, str) and _js_truthy(v), repr(v))
    # Declared types of the fields the reader or its recovery prompt uses.
    ra = _get(state, "recoveryAttempts")
    rule("recoveryAttempts is a number >= 0 (compared with the maximum; absent -> NaN)",
         _is_number(ra) and ra >= 0, repr(ra))
    st = _get(state, "status")
    rule("status is a WorktreeStatus (printed in the recovery prompt)",
         st in WORKTREE_STATUSES, repr(st))
    for key in ("startedAt", "lastUpdatedAt"):
        ok, detail = _ms(_get(state, key))
        rule(f"{key} is Unix ms (Date.now())", ok, detail)
    pid = _get(state, "pid")
    rule("pid is a number or null/absent (not read by checkRecovery)",
         pid is None or (_is_number(pid) and float(pid).is_integer()), repr(pid))
    ac = _get(state, "attemptCount")
    rule("attemptCount is an integer if present (Go field; the TS reader ignores it)",
         ac is None or (isinstance(ac, int) and not isinstance(ac, bool)), repr(ac))

    if not ids_ok:
        return Report("invalid_state",
                      "State is missing required fields (issueId, issueIdentifier)", rules)
    # Gate 2: the identifier guard, strict equality, only when the caller names an issue.
    ident = state["issueIdentifier"]
    if expected_identifier and not rule("issueIdentifier equals the expected identifier",
                                        ident == expected_identifier,
                                        f"{ident!r} vs {expected_identifier!r}"):
        return Report("identifier_mismatch",
                      f"state is for {ident}, expected {expected_identifier}", rules)

    # Gate 3: liveness from heartbeat.json (missing or unparsable: not alive).
    hb = _load(os.path.join(agent_dir, "heartbeat.json"))
    alive = False
    if isinstance(hb, dict):
        ts, hpid = _get(hb, "timestamp"), _get(hb, "pid")
        ok, detail = _ms(ts)
        rule("heartbeat timestamp is Unix ms (Date.now() - timestamp; toISOString)", ok, detail)
        rule("heartbeat pid is a number (shown in the reader's message)",
             _is_number(hpid), repr(hpid))
        alive = ok and now - ts < heartbeat_timeout_ms
    elif hb is not None:
        rule("heartbeat.json is a JSON object", False, type(hb).__name__)
    if alive:
        return Report("agent_alive", f"agent is still running (PID: {hb['pid']})", rules)

    # Gate 4: recovery attempts (a missing count compares false, so it would pass).
    if _is_number(ra) and ra >= max_recovery_attempts:
        return Report("max_attempts", f"{ra}/{max_recovery_attempts} recovery attempts",
                      rules)
    attempt = ra + 1 if _is_number(ra) else "NaN"
    return Report("can_recover",
                  f"recovery possible (attempt {attempt}/{max_recovery_attempts})", rules)
