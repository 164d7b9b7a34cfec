"""A worktree claimed by the real CLI and daemon, judged by agentfactory's reader rules
(tests/e2e/agentfactory_reader.py): its own tools must accept what tether writes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.agentfactory_reader import check
from tests.harness import TETHER, DaemonProc, wait_for
from tether.client.errors import TetherError


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for cmd in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *cmd], check=True)
    return repo


def _run(daemon: DaemonProc, repo: Path, *args: str) -> Path:
    r = subprocess.run([*TETHER, "--home", str(daemon.home), "run", "-d", "--agent",
                        "generic", *args, "--", "sleep", "90"],
                       cwd=repo, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    branch = args[args.index("--worktree") + 1]
    tree = repo.parent / "repo.worktrees" / branch
    wait_for(lambda: (tree / ".agent" / "heartbeat.json").exists(), timeout=20,
             what="the first heartbeat.json")
    return tree


def _state(tree: Path) -> dict[str, object]:
    raw: dict[str, object] = json.loads((tree / ".agent" / "state.json").read_text())
    return raw


def test_a_live_claim_passes_agentfactorys_reader(daemon: DaemonProc, tmp_path: Path) -> None:
    from tether.agent import worktree as wt

    repo = _repo(tmp_path)
    tree = _run(daemon, repo, "--worktree", "br-x", "--issue", "REN-7")
    report = check(tree, expected_identifier="REN-7")
    print(report)  # the closing note quotes it
    assert report.failed == [] and report.reason == "agent_alive", str(report)
    # No tracker id given: one derived from the identifier, the same on every claim.
    assert _state(tree)["issueId"] == wt.derived_issue_id("REN-7")
    # The identifier guard is reached now, and refuses another issue's worktree.
    assert check(tree, expected_identifier="REN-8").reason == "identifier_mismatch"
    # Once the heartbeat is stale, the reader would offer recovery (attempt 1/3).
    beat = json.loads((tree / ".agent" / "heartbeat.json").read_text())["timestamp"]
    later = check(tree, expected_identifier="REN-7", now_ms=beat + 60_000)
    assert later.reason == "can_recover" and later.failed == [], str(later)


def test_a_trackers_own_issue_id_is_written(daemon: DaemonProc, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    uid = "0b6c1f0e-3f7a-4c1e-9d0a-6a2b4c8e1f00"
    tree = _run(daemon, repo, "--worktree", "br-y", "--issue", "REN-8", "--issue-id", uid)
    assert _state(tree)["issueId"] == uid
    assert check(tree, expected_identifier="REN-8").failed == []
    r = subprocess.run([*TETHER, "--home", str(daemon.home), "run", "-d", "--agent", "generic",
                        "--issue-id", uid, "--", "sleep", "1"],
                       cwd=repo, capture_output=True, timeout=60)
    assert r.returncode == 2 and b"--issue-id needs --issue and --worktree" in r.stderr, r.stderr
    c = daemon.client()
    for kw in ({"issue_id": uid}, {"worktree": str(tree), "issue": "REN-8", "issue_id": ""}):
        with pytest.raises(TetherError) as info:
            c.agent_start(["sleep", "1"], provider="generic", **kw)
        assert info.value.code == "INVALID_PARAMS", kw
