"""Git the daemon runs in an agent's tree is pinned to the repository of the lineage's
start (tether.agent.gitpin): real git, real directories."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tether.agent import gitpin

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _repo(tmp: Path) -> tuple[Path, Path]:
    main = tmp / "main"
    subprocess.run([*GIT, "init", "-q", "-b", "main", str(main)], check=True)
    subprocess.run([*GIT, "-C", str(main), "commit", "-q", "--allow-empty", "-m", "i"],
                   check=True)
    tree = tmp / "wt"
    subprocess.run([*GIT, "-C", str(main), "worktree", "add", "-q", "-b", "b", str(tree)],
                   check=True)
    return main, tree


def _git(tree: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=tree, env={**os.environ, **env},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_linked_worktree_is_pinned_to_its_repository(tmp_path: Path) -> None:
    main, tree = _repo(tmp_path)
    p = gitpin.pin(str(tree))
    assert p is not None and p.common == str(main / ".git")
    assert p.gitdir == str(main / ".git" / "worktrees" / "wt") and len(p.ids) == 4
    (tree / ".git").write_text("gitdir: /nonexistent\n")  # what the agent does
    env = gitpin.env(p, str(tree))
    assert _git(tree, env, "symbolic-ref", "--short", "HEAD") == "b"
    assert "core.hooksPath=/dev/null" in env["GIT_CONFIG_PARAMETERS"]
    assert _git(tree, env, "config", "core.fsmonitor") == "false"


def test_a_replaced_git_directory_breaks_the_pin(tmp_path: Path) -> None:
    main, _ = _repo(tmp_path)
    p = gitpin.pin(str(main))
    assert p is not None and p.common == p.gitdir == str(main / ".git")
    os.rename(main / ".git", main / ".git.orig")
    shutil.copytree(main / ".git.orig", main / ".git")
    with pytest.raises(gitpin.PinBroken, match="replaced"):
        gitpin.env(p, str(main))


def test_no_repository_at_the_start_means_none_later(tmp_path: Path) -> None:
    assert gitpin.pin(str(tmp_path)) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # the agent's
    r = subprocess.run(["git", "status"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, **gitpin.env(None, str(tmp_path))})
    assert r.returncode != 0


def test_an_older_lineage_is_pinned_from_its_git_dir(tmp_path: Path) -> None:
    main, tree = _repo(tmp_path)
    common = str(main / ".git")
    legacy = gitpin.legacy_pin(common, str(tree))
    assert legacy is not None and legacy.gitdir == str(main / ".git" / "worktrees" / "wt")
    assert gitpin.legacy_pin(common, str(main)) == gitpin.GitPin(common=common,
                                                                 gitdir=common)
    assert gitpin.legacy_pin(None, str(tree)) is None


def test_a_subdirectory_is_pinned_to_its_checkouts_top(tmp_path: Path) -> None:
    """An agent started in a checkout's subdirectory (no --worktree): git run there by the
    daemon works on the whole checkout, as git itself would find it."""
    main, _ = _repo(tmp_path)
    sub = main / "pkg" / "mod"
    sub.mkdir(parents=True)
    (sub / "f.txt").write_text("x\n")
    p = gitpin.pin(str(sub))
    assert p is not None and p.top == str(main) and p.common == str(main / ".git")
    env = gitpin.env(p, str(sub))
    _git(sub, env, "add", "-A", "--", ".")
    assert _git(main, {}, "diff", "--cached", "--name-only") == "pkg/mod/f.txt"
