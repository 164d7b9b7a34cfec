"""A failed `--worktree` start leaves nothing to trip over (issue 23, item 3): the first
`tether run --worktree fix-42 --issue ENG-42 -- ./agent.sh` failed (the script was not
committed yet) and left `../agentproj.worktrees/fix-42` on the old commit; the retry,
after committing, adopted it and failed the same way. A start removes the worktree (and
branch) it made when the agent does not start; a worktree that was there before is
named in the error with the command that removes it. Real git, real daemon, the CLI as
a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness import TETHER, DaemonProc

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "agentproj"
    repo.mkdir()
    subprocess.run([*GIT, "-C", str(repo), "init", "-q", "-b", "main"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"],
                   check=True)
    (repo / "agent.sh").write_text("#!/bin/sh\necho agent ran in \"$PWD\"\n")
    (repo / "agent.sh").chmod(0o755)
    return repo


def _start(daemon: DaemonProc, repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(daemon.home), "run", "-d", "--agent",
                           "generic", "--worktree", "fix-42", "--issue", "ENG-42", "--",
                           "./agent.sh"], cwd=repo, capture_output=True, text=True,
                          timeout=60, env=daemon.env)


def _branches(repo: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(repo), "branch", "--format=%(refname:short)"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_a_failed_start_removes_the_worktree_it_made_and_the_retry_starts_afresh(
        daemon: DaemonProc, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tree = tmp_path / "agentproj.worktrees" / "fix-42"
    first = _start(daemon, repo)  # agent.sh is not committed: not in the worktree
    assert first.returncode == 127, first.stderr
    assert "did not start" in first.stderr
    assert f"removed the worktree {tree} and branch fix-42 this start made" \
        in first.stderr.replace("\n  ", " "), first.stderr
    assert not tree.exists() and _branches(repo) == ["main"]
    subprocess.run([*GIT, "-C", str(repo), "add", "agent.sh"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-q", "-m", "the agent"], check=True)
    again = _start(daemon, repo)
    assert again.returncode == 0, again.stderr
    with daemon.client() as c:
        x = c.exec_wait(again.stdout.split()[-1], timeout=30)
    assert x.exit_code == 0
    assert (tree / "agent.sh").exists()


def test_a_worktree_that_was_there_before_is_named_with_how_to_remove_it(
        daemon: DaemonProc, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tree = tmp_path / "agentproj.worktrees" / "fix-42"
    subprocess.run([*GIT, "-C", str(repo), "worktree", "add", "-q", str(tree), "-b",
                    "fix-42"], check=True)  # left over, on the old commit
    subprocess.run([*GIT, "-C", str(repo), "add", "agent.sh"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-q", "-m", "the agent"], check=True)
    r = _start(daemon, repo)
    assert r.returncode == 127, r.stderr
    said = " ".join(r.stderr.split())
    assert f"the worktree {tree} (branch fix-42, at " in said and " init)" in said, said
    assert f"git -C {repo} worktree remove --force {tree}" in said, said
    assert tree.exists()  # not ours to remove
