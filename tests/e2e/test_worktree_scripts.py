"""Worktree scripts (.tether.yaml: copy, ports, setup, run, archive), branch hand-off to a
local bare remote, and worktree freedom (--workdir, adopting an existing worktree): the
real daemon, real git, real processes."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from tests.harness import TETHER, DaemonProc, wait_for
from tether.client.blocking import Client

GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *GIT_ID, *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def make_repo(tmp: Path, config: str) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "t")
    git(repo, "config", "user.email", "t@t")
    (repo / "README").write_text("hi\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "init")
    (repo / ".tether.yaml").write_text(config)
    return repo


def tether(d: DaemonProc, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **d.env})


def start(d: DaemonProc, repo: Path, branch: str, script: str, *extra: str) -> str:
    """Start a generic agent running ``sh -c script`` in worktree ``branch``; its lineage."""
    r = tether(d, repo, "run", "--agent", "generic", "-d", "--worktree", branch, *extra,
               "--", "/bin/sh", "-c", script)
    assert r.returncode == 0, r.stderr
    lineage = d.client().exec_get(r.stdout.strip()).lineage  # stdout: the exec id alone
    assert lineage is not None and f"lineage {lineage}" in r.stderr, r.stderr
    return lineage


def base_port() -> int:
    return random.randrange(20000, 50000, 100)


def test_copy_ports_setup_run_and_archive(daemon: DaemonProc, tmp_path: Path) -> None:
    base = base_port()
    repo = make_repo(tmp_path, f"""
setup: echo "$TETHER_PORT_BASE" >> setup-ran
run: echo "companion $TETHER_PORT_BASE" > companion.txt; sleep 60
archive: echo "$TETHER_LINEAGE" > {tmp_path}/archived-$TETHER_LINEAGE
copy: [.env]
ports: {{base: {base}, per_session: 10, sessions: 5}}
""")
    (repo / ".env").write_text("SECRET=1\n")
    c: Client = daemon.client()
    one = start(daemon, repo, "fix-1", 'echo "$TETHER_PORT_BASE" > port.txt; sleep 60')
    two = start(daemon, repo, "fix-2", 'echo "$TETHER_PORT_BASE" > port.txt; sleep 60')
    t1, t2 = tmp_path / "repo.worktrees" / "fix-1", tmp_path / "repo.worktrees" / "fix-2"
    assert (t1 / ".env").read_text() == "SECRET=1\n" and (t2 / ".env").exists()
    assert (t1 / "setup-ran").read_text().split() == [str(base)]
    assert (t2 / "setup-ran").read_text().split() == [str(base + 10)]
    wait_for(lambda: (t1 / "port.txt").exists() and (t2 / "port.txt").exists())
    assert (t1 / "port.txt").read_text().strip() == str(base)
    assert (t2 / "port.txt").read_text().strip() == str(base + 10)
    assert c.lineage_get(one).port_base == base and c.lineage_get(two).port_base == base + 10
    wait_for(lambda: (t1 / "companion.txt").exists(), what="the run companion")
    assert (t1 / "companion.txt").read_text().strip() == f"companion {base}"
    # The first lineage ends: its companion stops, its ports are free, archive runs.
    x1 = c.lineage_get(one).exec
    assert x1 is not None
    c.exec_cancel(x1)
    wait_for(lambda: (tmp_path / f"archived-{one}").exists(), what="the archive script")
    assert c.lineage_get(one).status == "FINISHED"
    wait_for(lambda: [x.state for x in c.exec_list(all=True) if x.name == f"{one}-run"]
             == ["CANCELLED"], what="the companion stopped")
    # The same worktree again: setup does not run twice; the freed block is leased again.
    three = start(daemon, repo, "fix-1", "sleep 60")
    assert (t1 / "setup-ran").read_text().split() == [str(base)]
    assert c.lineage_get(three).port_base == base


def test_port_leases_survive_a_daemon_sigkill(stopped_daemon: DaemonProc,
                                               tmp_path: Path) -> None:
    base = base_port()
    repo = make_repo(tmp_path, f"ports: {{base: {base}, per_session: 4, sessions: 3}}\n")
    d = stopped_daemon
    d.start()
    one = start(d, repo, "a", "sleep 60")
    d.kill9()
    d.start()
    two = start(d, repo, "b", "sleep 60")
    c = d.client()
    assert c.lineage_get(one).status == "ACTIVE"
    assert c.lineage_get(one).port_base == base and c.lineage_get(two).port_base == base + 4
    start(d, repo, "c", "sleep 60")
    r = tether(d, repo, "run", "--agent", "generic", "-d", "--worktree", "d", "--",
               "sleep", "60")
    assert r.returncode == 1 and "ports" in r.stderr and "leased" in r.stderr, r.stderr
    assert c.health() is not None  # still serving


def test_a_failing_setup_or_bad_config_refuses_the_start(daemon: DaemonProc,
                                                         tmp_path: Path) -> None:
    base = base_port()
    repo = make_repo(tmp_path, f"setup: echo broken; exit 3\n"
                               f"ports: {{base: {base}, per_session: 2, sessions: 1}}\n")
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", "s", "--",
               "sleep", "60")
    assert r.returncode == 1 and "setup script exited 3" in r.stderr, r.stderr
    assert "broken" in r.stderr
    assert daemon.client().lineage_list(all=True) == []
    (repo / ".tether.yaml").write_text(f"ports: {{base: {base}, per_session: 2, "
                                       "sessions: 1}\n")
    start(daemon, repo, "s", "sleep 60")  # the failed start's lease was freed
    (repo / ".tether.yaml").write_text("setpu: typo\n")
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", "t", "--",
               "sleep", "60")
    assert r.returncode != 0 and "setpu" in r.stderr and ".tether.yaml" in r.stderr, r.stderr
    os.symlink("/etc/passwd", repo / "leak")
    (repo / ".tether.yaml").write_text("copy: [leak]\n")
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", "u", "--",
               "sleep", "60")
    assert r.returncode != 0 and "outside the repository" in r.stderr, r.stderr
    (repo / ".tether.yaml").write_text("copy: [../x]\n")
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", "v", "--",
               "sleep", "60")
    assert r.returncode != 0 and "inside the repository" in r.stderr, r.stderr


def bare_remote(tmp: Path, repo: Path) -> Path:
    remote = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo, "remote", "add", "origin", str(remote))
    return remote


def test_a_finished_lineage_hands_its_branch_off(daemon: DaemonProc, tmp_path: Path) -> None:
    repo = make_repo(tmp_path, f"""
handoff: {{commit: true, remote: origin,
          command: 'echo "pr for $TETHER_BRANCH" > {tmp_path}/pr.txt'}}
""")
    remote = bare_remote(tmp_path, repo)
    c = daemon.client()
    one = start(daemon, repo, "feat-1", "echo work > result.txt; exit 0")
    wait_for(lambda: c.lineage_get(one).handed_off is not None, timeout=30)
    rec = c.lineage_get(one)
    assert rec.status == "FINISHED" and rec.handed_off == "ok", rec
    assert git(remote, "show", "feat-1:result.txt") == "work"
    assert "tether: work left by agent" in git(remote, "log", "-1", "--format=%s", "feat-1")
    assert (tmp_path / "pr.txt").read_text().strip() == "pr for feat-1"
    evs = [e for e in c.events_list(limit=1000).events if e.type == "lineage.handoff"]
    assert len(evs) == 1 and evs[0].data["ok"] is True
    assert [s["step"] for s in evs[0].data["steps"]] == ["add", "commit", "push", "command"]
    # .agent/ (tether's state files) is never committed
    files = git(remote, "ls-tree", "-r", "--name-only", "feat-1").split()
    assert not any(f.startswith(".agent") for f in files), files


def test_lineage_finish_stops_commits_pushes_and_reports_failure(
        daemon: DaemonProc, tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "handoff: {remote: origin, on_finish: false}\n")
    remote = bare_remote(tmp_path, repo)
    c = daemon.client()
    one = start(daemon, repo, "feat-2", "echo half > wip.txt; sleep 60")
    tree = tmp_path / "repo.worktrees" / "feat-2"
    wait_for(lambda: (tree / "wip.txt").exists())
    r = tether(daemon, repo, "lineage", "finish", one, "--commit")
    assert r.returncode == 0 and "handed off: feat-2" in r.stdout, (r.stdout, r.stderr)
    assert c.lineage_get(one).status == "FINISHED"
    assert git(remote, "show", "feat-2:wip.txt") == "half"
    r = tether(daemon, repo, "lineage", "finish", one)
    assert r.returncode == 0 and "handed off already" in r.stdout
    # A remote that is gone: exit 1, the step and git's words, and the daemon serves on.
    two = start(daemon, repo, "feat-3", "echo x > y.txt; sleep 60")
    git(repo, "remote", "set-url", "origin", str(tmp_path / "nowhere.git"))
    r = tether(daemon, repo, "lineage", "finish", two, "--commit")
    assert r.returncode == 1 and "hand-off failed at push" in r.stderr, r.stderr
    assert "nowhere.git" in r.stderr
    assert c.lineage_get(two).handed_off == "failed"
    git(repo, "remote", "set-url", "origin", str(remote))
    r = tether(daemon, repo, "lineage", "finish", two)  # a failed hand-off is retried
    assert r.returncode == 0, r.stderr
    assert git(remote, "show", "feat-3:y.txt") == "x"


def test_workdir_and_adopting_an_existing_worktree(daemon: DaemonProc,
                                                   tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "")
    c = daemon.client()
    plain = tmp_path / "plain"
    plain.mkdir()
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--workdir", str(plain),
               "--", "/bin/sh", "-c", "pwd > here.txt; sleep 60")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: (plain / "here.txt").exists())
    assert (plain / "here.txt").read_text().strip() == str(plain)
    assert not (tmp_path / "repo.worktrees").exists()
    # A branch already checked out in a worktree of the repository's own: adopted.
    mine = tmp_path / "elsewhere"
    git(repo, "worktree", "add", "-q", "-b", "topic", str(mine))
    one = start(daemon, repo, "topic", "pwd > here.txt; sleep 60")
    assert c.lineage_get(one).worktree == str(mine)
    wait_for(lambda: (mine / "here.txt").exists())
    assert not (tmp_path / "repo.worktrees").exists()
    # ... and by its path; a directory that is no worktree of it is refused.
    two = start(daemon, repo, str(mine), "sleep 60")
    assert c.lineage_get(two).worktree == str(mine)
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", str(plain),
               "--", "sleep", "60")
    assert r.returncode == 2 and "not a worktree of the repository" in r.stderr, r.stderr
    r = tether(daemon, repo, "run", "--agent", "generic", "-d", "--worktree", "x",
               "--workdir", str(plain), "--", "sleep", "60")
    assert r.returncode == 2 and "exclude each other" in r.stderr


def test_a_hand_off_cut_by_a_daemon_sigkill_runs_again(stopped_daemon: DaemonProc,
                                                        tmp_path: Path) -> None:
    marks = tmp_path / "command-ran"
    repo = make_repo(tmp_path, f"""
handoff: {{commit: true, remote: origin, command: 'echo x >> {marks}; sleep 3'}}
""")
    remote = bare_remote(tmp_path, repo)
    d = stopped_daemon
    d.start()
    one = start(d, repo, "feat-k", "echo done > out.txt; exit 0")
    wait_for(lambda: marks.exists(), timeout=30, what="the hand-off command")
    d.kill9()  # after the push, during the command: the outcome was never committed
    d.start()
    c = d.client()
    wait_for(lambda: c.lineage_get(one).handed_off == "ok", timeout=30)
    assert marks.read_text().split() == ["x", "x"]  # at least once: it ran again
    assert git(remote, "show", "feat-k:out.txt") == "done"
    assert c.status().recovery.get("handoffs_resumed") == 1
