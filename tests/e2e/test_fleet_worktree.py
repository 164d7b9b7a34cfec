"""Fleet mode's worktrees: an agent placed with ``--worktree BRANCH`` works in a clone of
its repository's remote on its host, which pushes the branch; after a failover the
reviving host fetches it (a bare repository on this machine is the remote)."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.test_fleet import LEASE, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import kill_strays, wait_for

pytestmark = fleet_marks

AGENT = ("if [ -f work.txt ]; then echo resumed-with-work; else echo work > work.txt && "
         "git add work.txt && git -c user.name=t -c user.email=t@t commit -qm 'agent work' "
         "&& echo committed; fi; exec sleep 600")


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(tmp: Path, *, remote: bool = True) -> Path:
    """A checkout with one commit; with ``remote``, pushed to a bare ``origin``."""
    bare, repo = tmp / "remote.git", tmp / "repo"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("hello\n")
    _git("add", "README", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", cwd=repo)
    if remote:
        _git("init", "-q", "--bare", "-b", "main", str(bare))
        _git("remote", "add", "origin", str(bare), cwd=repo)
        _git("push", "-q", "origin", "main", cwd=repo)
    return repo


def _place(fleet: Fleet, host: str, repo: Path, branch: str, *, check: bool = True,
           ) -> subprocess.CompletedProcess[bytes]:
    return fleet.cli("run", "--host", host, "--agent", "generic", "--crashed-after", "3600",
                     "--stale-after", "3600", "--cwd", str(repo), "--worktree", branch,
                     "--", "sh", "-c", AGENT, check=check)


def test_a_revived_agent_gets_the_dead_hosts_commits_through_the_remote(
        fleet: Fleet, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    bare = tmp_path / "remote.git"
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    ident = int(_place(fleet, "h1", repo, "fix-1").stdout.split()[0])
    w = wait_for(lambda: fleet.work(ident)["state"] == "RUNNING" and fleet.work(ident), 30,
                 what="running on h1")
    h1 = fleet.hosts["h1"]
    first = h1.home / "fleet" / "worktrees" / f"{ident}-1"
    assert (first / "README").exists()  # a clone of the remote, on the new branch
    wait_for(lambda: subprocess.run(["git", "--git-dir", str(bare), "log", "-1",
                                     "--format=%s", "fix-1"], capture_output=True,
                                    text=True).stdout.strip() == "agent work", 20,
             what="h1 pushed the agent's commit")
    with h1.client() as c:
        assert c.lineage_get(w["local_id"]).worktree == str(first)
    h1.kill9()
    kill_strays(h1.home, wait=5)  # the host died, its clone with it (as far as h2 knows)
    w2 = wait_for(lambda: (fleet.work(ident)["generation"] == 2
                           and fleet.work(ident)["state"] == "RUNNING" and fleet.work(ident)),
                  LEASE * 8, what="revived on h2")
    assert w2["host"] == "h2"
    second = fleet.hosts["h2"].home / "fleet" / "worktrees" / f"{ident}-2"
    assert (second / "work.txt").read_text() == "work\n"
    assert _git("log", "-1", "--format=%s", cwd=second) == "agent work"
    assert _git("symbolic-ref", "--short", "HEAD", cwd=second) == "fix-1"
    wait_for(lambda: b"resumed-with-work" in fleet.cli("logs", str(ident)).stdout, 15,
             what="the revived agent saw the commit")
    events = fleet.cli("events", "--host", "h2").stdout.decode()
    assert "branch fix-1 fetched from" in events


def test_a_worktree_needs_a_remote_and_says_so(fleet: Fleet, tmp_path: Path) -> None:
    fleet.add("h1")
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    lonely = _repo(tmp_path, remote=False)
    refused = _place(fleet, "h1", lonely, "fix-2", check=False)
    assert refused.returncode == 2
    assert "no `origin` remote" in refused.stderr.decode()
    assert "git remote add origin" in refused.stderr.decode()
    # A remote this host cannot reach: the placement ends saying why, nothing starts.
    _git("remote", "add", "origin", str(tmp_path / "gone.git"), cwd=lonely)
    ident = int(_place(fleet, "h1", lonely, "fix-2").stdout.split()[0])
    w = wait_for(lambda: fleet.work(ident)["state"] == "ENDED" and fleet.work(ident), 20,
                 what="the placement ended")
    assert "not started on h1: cannot reach the remote" in w["reason"]
    with fleet.hosts["h1"].client() as c:
        assert c.exec_list(all=True) == []
