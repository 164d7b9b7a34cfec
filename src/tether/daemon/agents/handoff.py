"""Branch hand-off: when a lineage finishes (or on ``tether lineage finish``), commit
what its agent left (if asked), push its branch to the configured remote, and run the
configured command in its worktree (``gh pr create --fill``, say).

The outcome is a ``lineage.handoff`` event committed with the lineage's ``handed_off``
("ok" or "failed"), each step's exit code and output tail in its data. Until then the
hand-off is owed: a daemon killed mid-way runs it again at its next start (every step
is safe to repeat but the command, which is therefore at least once).

The tree is the agent's: git (the steps', and any the command runs) is pointed at the
repository of the lineage's start, with hooks and ``core.fsmonitor`` off
(``tether.agent.gitpin``); a git directory replaced since is refused (journaled
``agent.refused``) and the hand-off fails. The command itself was frozen at that start.
"""

from __future__ import annotations

import os
from typing import Any

from tether.agent import gitpin
from tether.daemon.agents.core import AgentCore
from tether.daemon.agents.scripts import pin_of
from tether.daemon.steps import run_step
from tether.model.records import LineageRecord
from tether.model.repo import Handoff

TAIL = 2000
STEP_TIMEOUT = 300.0


def wanted(rec: LineageRecord) -> Handoff | None:
    """What ``rec``'s finish hands off: the repository's ``handoff:`` (when ``on_finish``),
    with ``commit`` forced on by ``--commit-on-finish``; None for nothing."""
    h = rec.config.repo.handoff if rec.config.repo else None
    if rec.config.commit_on_finish:
        return Handoff(commit=True, remote=h.remote if h else None,
                       command=h.command if h else None)
    return h if h is not None and h.on_finish else None


async def _run(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[int | None, str]:
    code, out = await run_step(argv, cwd=cwd, env=env, timeout=STEP_TIMEOUT)
    if code is None:
        return None, f"timed out after {STEP_TIMEOUT:g} s"
    return code, out[-TAIL:]


async def hand_off(core: AgentCore, rec: LineageRecord, h: Handoff,
                   ) -> tuple[LineageRecord, dict[str, Any]]:
    """Run the hand-off ``h`` of finished ``rec`` and commit its outcome (returned too)."""
    tree = rec.config.worktree or rec.config.cwd
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/"), **rec.config.env,
           "GIT_TERMINAL_PROMPT": "0", "TETHER_LINEAGE": rec.id}
    steps: list[dict[str, Any]] = []
    ok = True

    async def step(name: str, argv: list[str]) -> tuple[int | None, str]:
        nonlocal ok
        code, tail = await _run(argv, tree or "/", env)
        steps.append({"step": name, "exit_code": code, "output_tail": tail})
        ok = ok and code == 0
        return code, tail

    branch = ""
    broken = None
    if tree is not None and os.path.isdir(tree):
        try:
            env.update(gitpin.env(pin_of(rec.config, tree), tree))
        except gitpin.PinBroken as e:
            broken = str(e)
            core.journal.record(rec.config.sandbox, "agent.refused", state="git_dir",
                                reason=f"hand-off of lineage {rec.id}: {broken}",
                                data={"lineage": rec.id, "what": "git_dir",
                                      "worktree": tree})
    if tree is None or not os.path.isdir(tree) or broken is not None:
        ok = False
        steps.append({"step": "worktree", "exit_code": None,
                      "output_tail": broken or f"the worktree {tree} is gone"})
    else:
        code, out = await _run(["git", "symbolic-ref", "--short", "HEAD"], tree, env)
        branch = out.strip() if code == 0 else ""
        env["TETHER_BRANCH"] = branch
        if h.commit:
            await step("add", ["git", "add", "-A", "--", ".", ":!.agent"])
            dirty, _ = await _run(["git", "diff", "--cached", "--quiet"], tree, env)
            if ok and dirty == 1:
                await step("commit", ["git", "commit", "-q", "-m",
                                      f"tether: work left by agent {rec.name or rec.id}"])
        if ok and h.remote:
            if not branch:
                ok = False
                steps.append({"step": "push", "exit_code": None,
                              "output_tail": "HEAD is detached: no branch to push"})
            else:
                env["TETHER_REMOTE"] = h.remote
                await step("push", ["git", "push", "--porcelain", h.remote,
                                    f"refs/heads/{branch}:refs/heads/{branch}"])
        if ok and h.command:
            await step("command", ["/bin/sh", "-c", h.command])
    _, head = await _run(["git", "rev-parse", "HEAD"], tree, env) if tree and \
        os.path.isdir(tree) and broken is None else (None, "")
    failed = next((s["step"] for s in steps if s["exit_code"] != 0), None)
    data = {"ok": ok, "branch": branch or None, "remote": h.remote,
            "head": head.strip() or None, "steps": steps}
    return core.commit(core.store.update_lineage(
        rec.id, handed_off="ok" if ok else "failed", event="lineage.handoff",
        reason="handed off" if ok else f"hand-off failed at {failed}", data=data)), data
