"""Fleet mode's worktrees: an agent placed with ``--worktree BRANCH`` works in a clone
of its repository's remote made on the host that runs it, and that host pushes the
branch back to the remote as it moves, so a host that revives the agent after a
failover fetches what the dead host had committed.

Only commits travel (what the agent left uncommitted stays on the dead host), and only
what was pushed before the host died: a host pushes when its HEAD moved, at most every
``SYNC_EVERY`` seconds per agent, and only while it holds its lease (a fenced host
pushes nothing; a push is never forced, so a stale one is refused by the remote).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tether.daemon.steps import run_step

#: Seconds between two HEAD checks of one agent's clone (a push only when it moved).
SYNC_EVERY = 2.0
STEP_TIMEOUT = 300.0


class GitError(Exception):
    """A clone, fetch or push failed; the message says which and why."""


async def _git(*args: str, cwd: str | None = None) -> tuple[int | None, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/"), "GIT_TERMINAL_PROMPT": "0"}
    code, out = await run_step(["git", *args], cwd=cwd, env=env, timeout=STEP_TIMEOUT)
    if code is None:
        return None, f"git {args[0]} timed out after {STEP_TIMEOUT:g} s"
    return code, out.strip()[-2000:]


async def checkout(remote: str, branch: str, path: Path) -> bool | None:
    """Make ``path`` a clone of ``remote`` on ``branch``: the remote's branch when it has
    one (a revival: what the previous host pushed), else a new branch from its default
    one. Returns whether the branch came from the remote, None when ``path`` existed (this
    generation's start, retried: kept as it is). A clone is made beside and renamed into
    place, so a crash leaves no half clone."""
    if path.exists():
        return None
    code, out = await _git("ls-remote", "--exit-code", "--heads", remote,
                           f"refs/heads/{branch}")
    if code not in (0, 2):
        raise GitError(f"cannot reach the remote {remote} to fetch branch {branch}: {out}")
    had = code == 0
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    args = ["clone", "-q", *(["--branch", branch] if had else []), remote, str(tmp)]
    code, out = await _git(*args)
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GitError(f"cannot clone {remote} (branch {branch}): {out}")
    if not had:
        code, out = await _git("checkout", "-q", "-b", branch, cwd=str(tmp))
        if code != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise GitError(f"cannot create branch {branch} in a clone of {remote}: {out}")
    os.rename(tmp, path)
    return had


async def head(path: Path) -> str | None:
    code, out = await _git("rev-parse", "--verify", "-q", "HEAD", cwd=str(path))
    return out if code == 0 else None


async def push(path: Path, remote: str, branch: str) -> None:
    """Push the clone's HEAD to ``branch`` on ``remote`` (never forced)."""
    code, out = await _git("push", "-q", "--porcelain", remote,
                           f"HEAD:refs/heads/{branch}", cwd=str(path))
    if code != 0:
        raise GitError(f"cannot push branch {branch} to {remote}: {out}")


async def unpushed(path: Path) -> str | None:
    """Why the clone at ``path`` holds work its remote lacks (uncommitted changes,
    commits not on its branch there, a remote it cannot reach), or None when all of it
    is on the remote. Fetches the branch, never pushes: a clone of an earlier
    generation must not move a branch another host now works on."""
    code, branch = await _git("symbolic-ref", "--short", "-q", "HEAD", cwd=str(path))
    if code != 0:
        return "its HEAD is on no branch"
    # ``.agent/`` is tether's own per-worktree state (agent/worktree), not the agent's work.
    code, dirty = await _git("status", "--porcelain", "--", ".", ":(exclude).agent",
                             cwd=str(path))
    if code != 0 or dirty:
        if code != 0:
            return f"git status failed: {dirty}"
        paths = [line[3:] for line in dirty.splitlines()]
        return (f"it has uncommitted changes ({', '.join(paths[:3])}"
                + (f" and {len(paths) - 3} more" if len(paths) > 3 else "") + ")")
    code, out = await _git("fetch", "-q", "origin", f"refs/heads/{branch}", cwd=str(path))
    if code != 0 and "couldn't find remote ref" in out:
        return f"branch {branch} is not on its remote: its commits were never pushed"
    if code != 0:
        return f"cannot fetch branch {branch} from its remote to compare: {out}"
    code, out = await _git("rev-list", "--count", "HEAD", "^FETCH_HEAD", cwd=str(path))
    if code != 0:
        return f"cannot compare it with the remote: {out}"
    if out != "0":
        return f"{out} commit(s) on {branch} were never pushed"
    return None
