"""The agent is the attacker (docs/SECURITY.md): each test here performs an attack from
inside a real bwrap-sandboxed agent — a script run with ``--agent generic`` in the default
sandbox — against the real daemon, and checks that it fails and is journaled.

The agents' scripts live in their workspace (the sandbox's /tmp is its own), and
``OUTSIDE`` is a directory under the test's /tmp that the sandbox cannot see, let alone
write: a file appearing there was written by a process outside the sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc, new_home, remove_home, wait_for
from tether.client.blocking import Client
from tether.runtime import bwrap

PROBE = bwrap.probe()
# The agents share the real ~/.claude placeholders with test_default_sandbox's.
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}"),
              pytest.mark.xdist_group("user-home")]

FAST = {"TETHER_DEFAULT_RUNTIME": "auto", "TETHER_AGENT_TICK": "0.2"}
GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


@pytest.fixture
def auto_home() -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env=FAST)
    d.start()
    yield d
    d.cleanup()
    remove_home(d.home)


def tether(d: DaemonProc, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=d.env)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *GIT_ID, *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def events(c: Client, kind: str) -> list[Any]:
    return [e for e in c.events_list(limit=10000).events if e.type == kind]


# ------------------------------------------------------------------ finding 1
# The agent writes a repository config naming a setup script, makes sure its successor's
# start looks for one in its own tree (for --worktree, by breaking the worktree's .git
# file), then runs its context out: DYING, then DEAD, and --successor auto starts the next
# lineage. Its first attempt only: the successor runs the same script and just waits.
REPO_CONFIG_ATTACK = r'''
import os, sys, time
from tether.client.blocking import Client

outside, break_git = sys.argv[1], sys.argv[2] == "1"
if os.path.exists(".tether.yaml"):  # the successor (or a revival): nothing more to do
    time.sleep(300)
try:  # the sandbox itself: it cannot write there
    open(os.path.join(outside, "direct"), "w").write("escaped")
    print("wrote outside directly")
except OSError as e:
    print(f"cannot write outside: {e.strerror}")
with open(".tether.yaml", "w") as f:
    f.write(f'setup: "id > {outside}/pwned"\n')
if break_git:
    with open(".git", "w") as f:
        f.write("gitdir: /nonexistent\n")
c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
for _ in range(2):
    c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], context_pct=100)
print("reported DEAD", flush=True)
time.sleep(300)
'''


def _successor(c: Client, first: str) -> Any:
    def made() -> Any:
        return next((x for x in c.lineage_list(all=True) if x.predecessor == first), None)
    return wait_for(made, timeout=30, what="the successor lineage")


def _lineage_of(d: DaemonProc, r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    lineage = d.client().exec_get(r.stdout.strip()).lineage
    assert lineage is not None
    return lineage


def test_an_agent_written_repository_config_never_runs_for_its_successor_workdir(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Issue 21 finding 1, ``--successor auto --workdir $PWD``: the agent's own tree is
    where its successor's start looked for the repository config. Old code: the setup ran
    unsandboxed and ``OUTSIDE/pwned`` held ``uid=0(root)``."""
    d, c = auto_home, auto_home.client()
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(REPO_CONFIG_ATTACK)
    first = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--successor", "auto",
                                  "--workdir", str(work), "--", sys.executable, "agent.py",
                                  str(outside), "0", cwd=work))
    succ = _successor(c, first)
    wait_for(lambda: c.lineage_get(succ.id).exec is not None, timeout=20,
             what="the successor's attempt")
    assert not (outside / "direct").exists()  # the sandbox held
    assert not (outside / "pwned").exists(), (outside / "pwned").read_text()
    assert events(c, "lineage.setup") == []
    refused = [e for e in events(c, "agent.refused") if e.data.get("what") == "repo_config"]
    assert len(refused) == 1 and refused[0].data["lineage"] == succ.id, refused
    assert str(work / ".tether.yaml") in (refused[0].reason or "")
    assert c.lineage_get(succ.id).status == "ACTIVE"  # it runs, without the agent's scripts


def test_an_agent_written_repository_config_never_runs_for_its_successor_worktree(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Issue 21 finding 1, ``--successor auto --worktree``: the agent overwrote its
    worktree's ``.git`` file with ``gitdir: /nonexistent``, so ``repo_root()`` fell back to
    the worktree itself. Old code: the setup ran unsandboxed."""
    d, c = auto_home, auto_home.client()
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "agent.py").write_text(REPO_CONFIG_ATTACK)
    git(repo, "add", "agent.py")
    git(repo, "commit", "-q", "-m", "the agent")
    first = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--successor", "auto",
                                  "--worktree", "fix-1", "--", sys.executable, "agent.py",
                                  str(outside), "1", cwd=repo))
    tree = tmp_path / "repo.worktrees" / "fix-1"
    succ = _successor(c, first)
    wait_for(lambda: c.lineage_get(succ.id).exec is not None, timeout=20,
             what="the successor's attempt")
    assert (tree / ".git").read_text() == "gitdir: /nonexistent\n"  # the attack happened
    assert not (outside / "direct").exists()
    assert not (outside / "pwned").exists(), (outside / "pwned").read_text()
    assert events(c, "lineage.setup") == []
    refused = [e for e in events(c, "agent.refused") if e.data.get("what") == "repo_config"]
    assert [e.data["lineage"] for e in refused] == [succ.id], refused


MARK_ATTACK = r'''
import os, sys, time
from tether.client.blocking import Client

if os.environ["TETHER_LINEAGE"] != sys.argv[1]:  # the successor: nothing more to do
    time.sleep(300)
if os.path.exists(".agent/tether-setup.json"):  # the old place of the setup mark
    os.unlink(".agent/tether-setup.json")
c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
for _ in range(2):
    c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], context_pct=100)
time.sleep(300)
'''


def test_a_user_setup_runs_once_per_worktree_whatever_the_agent_deletes(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """The setup mark lives in tether's home, not in the agent's tree: an agent that
    deletes whatever mark it finds does not make the (user's) setup run again for its
    successor in the same worktree."""
    d, c = auto_home, auto_home.client()
    counter = tmp_path / "setup-runs"
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "agent.py").write_text(MARK_ATTACK.replace("sys.argv[1]", "open('first').read()"))
    (repo / ".tether.yaml").write_text(f'setup: "echo ran >> {counter}"\n')
    git(repo, "add", "agent.py", ".tether.yaml")
    git(repo, "commit", "-q", "-m", "the agent")
    tree = tmp_path / "repo.worktrees" / "fix-1"
    git(repo, "worktree", "add", "-q", "-b", "fix-1", str(tree))
    (tree / "first").write_text("?")  # rewritten once the lineage is known, below
    r = tether(d, "run", "--agent", "generic", "-d", "--successor", "auto", "--worktree",
               "fix-1", "--", "/bin/sh", "-c",
               f'until [ "$(cat first)" != "?" ]; do sleep 0.05; done; exec {sys.executable} '
               "agent.py", cwd=repo)
    first = _lineage_of(d, r)
    (tree / "first").write_text(first)
    succ = _successor(c, first)
    wait_for(lambda: c.lineage_get(succ.id).exec is not None, timeout=20)
    assert counter.read_text().split() == ["ran"]
    assert [e.data["lineage"] for e in events(c, "lineage.setup")] == [first]


def test_scripts_of_a_config_in_the_agents_own_tree_are_refused(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Where no place the agent cannot write holds the repository config (``--workdir``
    of a directory that is its own checkout), a config naming commands is refused at the
    user's start, saying why; one naming none (ports, copy) is accepted."""
    d, c = auto_home, auto_home.client()
    work = tmp_path / "work"
    work.mkdir()
    (work / ".tether.yaml").write_text(f'archive: "touch {tmp_path}/archived"\n')
    r = tether(d, "run", "--agent", "generic", "-d", "--workdir", str(work), "--", "sleep",
               "30", cwd=work)
    assert r.returncode == 1, r
    assert "archive" in r.stderr and "agent" in r.stderr and "--worktree" in r.stderr, r.stderr
    assert c.lineage_list(all=True) == []
    (work / ".tether.yaml").write_text("ports: {base: 41000, per_session: 2, sessions: 3}\n")
    lin = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--workdir", str(work),
                                "--", "sleep", "30", cwd=work))
    assert c.lineage_get(lin).port_base == 41000
    shown = json.loads(tether(d, "lineage", "inspect", "--json", lin, cwd=work).stdout)
    assert shown["status"] == "ACTIVE"
    assert os.path.exists(work)


def _repo(tmp_path: Path, config: str, script: str) -> Path:
    """A repository whose main checkout holds ``config`` and the agent's ``script``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".tether.yaml").write_text(config)
    (repo / "agent.sh").write_text(script)
    git(repo, "add", ".tether.yaml", "agent.sh")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def test_a_symlink_in_the_state_dir_does_not_redirect_the_archive_log(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """The lineage's state dir (``<home>/agents/<lineage>``) is the agent's to write; the
    archive script's log was opened there by name, through a symlink the agent planted.
    Old code: the daemon truncated ``OUTSIDE/victim`` and wrote the script's output in it."""
    d, c = auto_home, auto_home.client()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious\n")
    repo = _repo(tmp_path, "archive: echo archived\n",
                 f'ln -s {victim} "$TETHER_HOME/agents/$TETHER_LINEAGE/archive.log"\n'
                 f'ln -s {victim} "$TETHER_HOME/agents/$TETHER_LINEAGE/setup.log"\n'
                 "exit 0\n")
    lin = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--worktree", "fix-1",
                                "--", "/bin/sh", "agent.sh", cwd=repo))
    wait_for(lambda: events(c, "lineage.archive"), timeout=30, what="the archive script")
    assert c.lineage_get(lin).status == "FINISHED"
    assert (d.home / "agents" / lin / "archive.log").is_symlink()  # the agent did plant it
    assert victim.read_text() == "precious\n"
    assert "archived" in (d.home / "scripts" / lin / "archive.log").read_text()


# ------------------------------------------------------------------ hand-offs
# The agent makes the git the daemon runs in its tree at a hand-off read a config of its
# own: one naming a core.fsmonitor program and a pre-commit hook, which a `git add` or
# `git commit` outside the sandbox would run. ``GITDIR``: the git directory to poison.
EVIL_GIT = r'''
mkdir -p evilhooks
printf '#!/bin/sh\nid > {outside}/pwned-hook\n' > evilhooks/pre-commit
chmod +x evilhooks/pre-commit
git --git-dir "$GITDIR" config core.fsmonitor "id > {outside}/pwned-fsmonitor; false" \
  || echo "cannot write $GITDIR/config" >> refused.txt
git --git-dir "$GITDIR" config core.hooksPath "$PWD/evilhooks" || true
echo work > result.txt
'''


def test_a_rewritten_worktree_git_file_does_not_steer_the_hand_off(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """A linked worktree: the agent points its ``.git`` file at a repository it made.
    Old code: the hand-off's ``git add``/``git commit`` ran its fsmonitor and hook."""
    d, c = auto_home, auto_home.client()
    outside = tmp_path / "outside"
    outside.mkdir()
    # (its repository in its state dir: one nested in the tree would fail `git add`)
    script = ('EVIL="$TETHER_HOME/agents/$TETHER_LINEAGE/evil"\ngit init -q "$EVIL"\n'
              'GITDIR="$EVIL/.git"\n' + EVIL_GIT.format(outside=outside)
              + 'printf "gitdir: %s\\n" "$GITDIR" > .git\nexit 0\n')
    repo = _repo(tmp_path, "handoff: {commit: true}\n", script)
    lin = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--worktree", "fix-1",
                                "--", "/bin/sh", "agent.sh", cwd=repo))
    wait_for(lambda: c.lineage_get(lin).handed_off is not None, timeout=30,
             what="the hand-off")
    tree = tmp_path / "repo.worktrees" / "fix-1"
    evil = d.home / "agents" / lin / "evil" / ".git"
    assert (tree / ".git").read_text() == f"gitdir: {evil}\n"  # the attack happened
    assert "fsmonitor" in (evil / "config").read_text()
    assert sorted(p.name for p in outside.iterdir()) == []
    rec = c.lineage_get(lin)
    assert rec.handed_off == "ok", events(c, "lineage.handoff")[-1].data["steps"]
    # the commit went to the real repository, on the lineage's branch
    assert git(repo, "show", "fix-1:result.txt") == "work"


def test_an_agent_in_a_checkout_cannot_poison_its_git_config(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """An agent started in a repository's own checkout (no ``--worktree``): its ``.git``
    is in its workspace. Old code: it could write ``.git/config`` (and ``hooks/``), and
    ``tether lineage finish --commit`` then ran its fsmonitor and hook outside the
    sandbox (as would the user's next ``git status`` there). Now they are read-only
    inside, and the hand-off's git is pinned anyway."""
    d = auto_home
    outside = tmp_path / "outside"
    outside.mkdir()
    script = ("GITDIR=.git\n" + EVIL_GIT.format(outside=outside)
              + "echo x > .git/hooks/pre-commit || echo hooks >> refused.txt\n"
              + "touch ready; sleep 300\n")
    repo = _repo(tmp_path, "", script)
    lin = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--", "/bin/sh",
                                "agent.sh", cwd=repo))
    wait_for(lambda: (repo / "ready").exists(), timeout=20, what="the agent's attack")
    r = tether(d, "lineage", "finish", lin, "--commit", cwd=repo)
    assert sorted(p.name for p in outside.iterdir()) == [], r
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    assert (repo / "refused.txt").read_text().split() == [
        "cannot", "write", ".git/config", "hooks"]
    assert r.returncode == 0, r.stderr
    assert git(repo, "show", "main:result.txt") == "work"


# ------------------------------------------------------------------ agent-named files
# Attempt 1 names a file it cannot read (another user's Claude transcript, under the test's
# /tmp) as its Stop hook's transcript, then dies; attempt 2 (a revival) reads its own drain
# snapshot, bound into its sandbox, and keeps whatever it finds.
TRANSCRIPT_ATTACK = r'''
import os, sys
from tether.client.blocking import Client

if os.environ["TETHER_ATTEMPT"] == "1":
    try:
        open(sys.argv[1]).read()
        print("read it directly")
    except OSError as e:
        print(f"cannot read it: {e.strerror}")
    c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
    c.agent_hook(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], "claude", "Stop",
                 {"session_id": "s1", "transcript_path": sys.argv[1]})
    sys.exit(3)
with open(os.environ["TETHER_DRAIN_SNAPSHOT"]) as f:
    snap = f.read()
with open("leaked.tmp", "w") as f:
    f.write(snap)
os.rename("leaked.tmp", "leaked.txt")
'''


def test_a_transcript_path_cannot_make_the_daemon_read_for_the_agent(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """The Stop hook's payload is the agent's: its ``transcript_path`` made the daemon
    (root) read any file, and what parsed as a conversation landed in the agent's drain
    snapshot, which its revival reads. Old code: another user's prompt leaked."""
    d, c = auto_home, auto_home.client()
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "bob-transcript.jsonl"
    secret.write_text(json.dumps({"type": "user", "message": {
        "role": "user", "content": "bob's secret prompt: hunter2"}}) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(TRANSCRIPT_ATTACK)
    r = tether(d, "run", "--agent", "generic", "-d", "--", sys.executable, "agent.py",
               str(secret), cwd=work)
    lin = _lineage_of(d, r)
    wait_for(lambda: (work / "leaked.txt").exists(), timeout=30, what="the revival's read")
    assert "hunter2" not in (work / "leaked.txt").read_text()
    # Claude's turn is counted in the background (it writes its transcript after Stop):
    # the refusal is journaled there, as soon as the read is refused.
    def refused() -> list[Any]:
        return [e for e in events(c, "agent.refused") if e.data.get("what") == "transcript_path"]
    wait_for(lambda: refused(), timeout=15, what="the refusal journaled")
    assert [e.data["lineage"] for e in refused()] == [lin], refused()
    assert refused()[0].data["path"] == str(secret)


# ------------------------------------------------------------------ finding 4
BIG = 2**63 - 1
USAGE_ATTACK = r'''
import os, time
from tether.client.blocking import Client

c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
big = 2**63 - 1
for _ in range(3):
    c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"],
                 model="claude-opus-4-1", usage={
                     "input_tokens": big, "output_tokens": big, "cache_read_tokens": big,
                     "cache_creation_tokens": big})
open("reported", "w").close()
time.sleep(300)
'''
HONEST = r'''
import os, time
from tether.client.blocking import Client

c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
while not os.path.exists("go"):
    time.sleep(0.05)
c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"],
             model="claude-sonnet-4-5", usage={"input_tokens": 1200, "output_tokens": 300})
a = c.agent_authorize_tool(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], "Bash")
with open("answer.tmp", "w") as f:
    f.write(f"{a.allowed} {a.reason}")
os.rename("answer.tmp", "answer")
time.sleep(300)
'''


def test_impossible_usage_cannot_fence_the_other_agents(auto_home: DaemonProc,
                                                       tmp_path: Path) -> None:
    """Issue 21 finding 4: an agent reporting 2**63-1 tokens three times made the shared
    daily budget fence every honest agent ("fenced: budget: agents spent $196…T"). Now
    each turn's usage is capped to what its model can have produced in the time since
    the lineage's previous turn (its context window and output limit from the price
    table, per request), the cap is journaled once, and the honest agent works on."""
    d, c = auto_home, auto_home.client()
    assert tether(d, "budget", "set", "5000", cwd=tmp_path).returncode == 0
    bad, good = tmp_path / "bad", tmp_path / "good"
    for w, script in ((bad, USAGE_ATTACK), (good, HONEST)):
        w.mkdir()
        (w / "agent.py").write_text(script)
    evil = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--", sys.executable,
                                 "agent.py", cwd=bad))
    honest = _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--",
                                   sys.executable, "agent.py", cwd=good))
    wait_for(lambda: (bad / "reported").exists(), timeout=30, what="the three reports")
    (good / "go").touch()
    wait_for(lambda: (good / "answer").exists(), timeout=30, what="the honest agent's call")
    assert (good / "answer").read_text() == "True allowed", (good / "answer").read_text()
    turns = [e for e in events(c, "agent.turn") if e.data["lineage"] == evil]
    assert len(turns) == 3
    before = c.lineage_get(evil).created_at
    for e in turns:  # one request a second since the previous turn, plus one
        u, cap = e.data["usage"], e.data["capped"]
        assert cap["reported"]["input_tokens"] == BIG and cap["model"] == "claude-opus-4-1"
        assert u["output_tokens"] == cap["output_limit"] == 32_000 * cap["calls"]
        assert sum(u[k] for k in ("input_tokens", "cache_read_tokens",
                                  "cache_creation_tokens")) <= cap["input_limit"]
        assert cap["input_limit"] == 1_000_000 * cap["calls"]
        assert 1 <= cap["calls"] <= 2 + (e.time - before), (cap, e.time - before)
        before = e.time
    refused = [e for e in events(c, "agent.refused") if e.data.get("what") == "usage"]
    assert [e.data["lineage"] for e in refused] == [evil]  # once, not at every turn
    report = json.loads(tether(d, "cost", "--by", "lineage", "--json", cwd=tmp_path).stdout)
    spent = {row["key"]: row["cost_usd"] for row in report["rows"]}
    # (each capped turn is still worth what an Opus request a second costs: dollars)
    assert spent[evil] < 5000 and 0 < spent[honest] < 1, report
    assert c.lineage_get(evil).usage["input_tokens"] < BIG
    assert events(c, "agent.fenced") == []


# ------------------------------------------------------------------ threads agents hold
WAITED_FOR = r'''
import os, time
from tether.client.blocking import Client

c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
c.agent_hook(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], "claude", "Stop",
             {"session_id": "s1", "transcript_path": os.path.abspath("never.jsonl")})
open("sent", "w").close()
time.sleep(300)
'''
TIMED_TURN = r'''
import os, time
from tether.client.blocking import Client

c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
while not os.path.exists("go"):
    time.sleep(0.05)
t0 = time.monotonic()
c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"], context_pct=10)
with open("took.tmp", "w") as f:
    f.write(str(time.monotonic() - t0))
os.rename("took.tmp", "took")
time.sleep(300)
'''


def test_agents_naming_transcripts_that_never_come_hold_only_their_own_threads(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Each Stop hook naming a transcript not yet on disk is counted by a thread that
    waits up to 30 s for it (Claude Code writes it after the hook). Those threads were
    the daemon's default executor's, which also writes every turn's snapshot and starts
    monitors, and a graceful stop waited for them. Now agents' reads have a pool of
    their own (8 threads): with eight agents waiting, an exec starts and an honest turn
    is answered at once, and SIGTERM ends the waits (generous bounds: the old code's
    stop took the rest of the 30 s)."""
    d = auto_home
    hostile = [tmp_path / f"hostile{i}" for i in range(8)]
    honest = tmp_path / "honest"
    for w, script in [(honest, TIMED_TURN), *((h, WAITED_FOR) for h in hostile)]:
        w.mkdir()
        (w / "agent.py").write_text(script)
        _lineage_of(d, tether(d, "run", "--agent", "generic", "-d", "--", sys.executable,
                              "agent.py", cwd=w))
    wait_for(lambda: all((h / "sent").exists() for h in hostile), timeout=60,
             what="the hostile hooks answered (their counts now wait in threads)")
    t0 = time.monotonic()
    started = tether(d, "run", "-d", "--", "true", cwd=tmp_path)
    took = time.monotonic() - t0
    assert started.returncode == 0 and took < 15, (took, started.stderr)
    (honest / "go").touch()
    wait_for(lambda: (honest / "took").exists(), timeout=60, what="the honest turn")
    took = float((honest / "took").read_text())
    assert took < 15, f"an honest agent's turn waited {took:.1f} s behind the others"
    # A graceful stop ends the waits (the turns are counted at the next start); it
    # waited for them, up to 30 s.
    t0 = time.monotonic()
    assert d.term(timeout=60) == 0
    assert time.monotonic() - t0 < 10, "the stop waited for the agents' reads"
