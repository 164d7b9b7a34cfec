"""Agent sessions through the real daemon: a scripted agent (no model) drives the
lifecycle; agents and daemons are killed with real SIGKILLs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness import FIXTURES, SCRIPTED_AGENT, TETHER, DaemonProc, wait_for
from tether.agent import snapshot
from tether.client.blocking import Client
from tether.client.errors import TetherError
from tether.client.replies import AgentStarted, LineageView
from tether.runtime import bwrap

AGENT = str(SCRIPTED_AGENT)
FAST = {"TETHER_AGENT_TICK": "0.2"}


def start_agent(c: Client, tmp: Path, *args: str, **params: Any) -> AgentStarted:
    log = tmp / "agent.log"
    params.setdefault("revival", "revive")
    import uuid

    params.setdefault("request_key", uuid.uuid4().hex)  # retries start it once
    return c.agent_start([sys.executable, AGENT, "--log", str(log), *args],
                         provider="generic", env={"PATH": os.environ["PATH"]}, **params)


def log_lines(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "agent.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def lineage(c: Client, ident: str) -> LineageView:
    return c.lineage_get(ident)


@pytest.fixture
def fast_daemon(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env=FAST)
    return stopped_daemon


# ---------------------------------------------------------------------- lifecycle
def test_lifecycle_through_every_state_with_fencing_and_snapshots(
        daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "20,75,91,95", "--tools-per-turn", "2",
                      "--wait-file", str(tmp_path / "go"))
    snaps: list[dict[str, Any]] = []
    for n in range(1, 5):
        (tmp_path / f"go.{n}").touch()
        wait_for(lambda n=n: len([x for x in log_lines(tmp_path) if x["event"] == "turn"]) >= n,
                 what=f"turn {n}")
        snaps.append(snapshot.read(daemon.home / "drain" / f"{lin.id}.json"))
    turns = [x for x in log_lines(tmp_path) if x["event"] == "turn"]
    assert [t["lifecycle"] for t in turns] == ["HEALTHY", "AGING", "DYING", "DEAD"]
    # Tools: allowed while HEALTHY/AGING; in DYING one finalization call, then fenced.
    assert [t["allowed"] for t in turns] == [[True, True], [True, True], [True, True],
                                             [True, False]]
    assert "handoff" in turns[1]["instructions"]
    assert [len(s["messages"]) for s in snaps] == [2, 4, 6, 8]
    assert snaps[-1]["messages"][-1] == {"role": "assistant", "content": "did 4"}
    assert snaps[-1]["usage"]["input_tokens"] == 100 + 200 + 300 + 400
    assert snaps[-1]["lineage_id"] == lin.id and snaps[-1]["model"] == "scripted-1"
    # DEAD: the process is reaped and the lineage is over.
    wait_for(lambda: lineage(c, lin.id).status == "FINISHED", what="lineage finished")
    final = lineage(c, lin.id)
    assert final.lifecycle == "DEAD" and "DEAD" in final.reason
    assert final.exit_reason == "out_of_context"  # reaped at DEAD, not "killed"
    assert final.has_handoff
    life = [e for e in c.events_list(limit=10000).events if e.type == "agent.lifecycle"]
    assert [e.state for e in life] == ["AGING", "DYING", "DRAINING", "DEAD"]
    fenced = [e for e in c.events_list(limit=10000).events if e.type == "agent.fenced"]
    assert len(fenced) == 1


def test_a_session_reaped_at_dead_ended_out_of_context(daemon: DaemonProc,
                                                       tmp_path: Path) -> None:
    """It lingers after its DEAD turn: tether's reap cancels it (issue 20, finding 8)."""
    c = daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "95,96", "--linger", "60")
    wait_for(lambda: lineage(c, lin.id).status == "FINISHED", timeout=20, what="reaped")
    final = lineage(c, lin.id)
    assert (final.lifecycle, final.exit_reason) == ("DEAD", "out_of_context")
    assert final.reason == "context exhausted (DEAD); the session was reaped"


def test_a_jump_from_60_to_92_skips_aging(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    start_agent(c, tmp_path, "--pcts", "60,92", "--linger", "30")
    wait_for(lambda: len([x for x in log_lines(tmp_path) if x["event"] == "turn"]) == 2)
    turns = [x for x in log_lines(tmp_path) if x["event"] == "turn"]
    assert [t["lifecycle"] for t in turns] == ["HEALTHY", "DYING"]


def test_tokens_are_checked(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10", "--linger", "30")
    with pytest.raises(TetherError) as e:
        c.agent_turn(lin.id, "0" * 32, context_pct=5)
    assert e.value.code == "BAD_TOKEN"


# ---------------------------------------------------------------------- revival
def test_killed_agent_is_revived_from_its_snapshot(fast_daemon: DaemonProc,
                                                   tmp_path: Path) -> None:
    c = fast_daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10,20,30,40", "--wait-file",
                      str(tmp_path / "go"))
    for n in (1, 2):
        (tmp_path / f"go.{n}").touch()
    wait_for(lambda: len([x for x in log_lines(tmp_path) if x["event"] == "turn"]) == 2)
    first = lineage(c, lin.id)
    pid = fast_daemon.handles(first.exec)["child"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: lineage(c, lin.id).attempt == 2
             and lineage(c, lin.id).status == "ACTIVE", what="revived")
    for n in (3, 4):
        (tmp_path / f"go.{n}").touch()
    wait_for(lambda: any(x["event"] == "done" for x in log_lines(tmp_path)), what="done")
    starts = [x for x in log_lines(tmp_path) if x["event"] == "start"]
    assert [s["restored"] for s in starts] == [0, 4]  # messages of turns 1-2 restored
    assert [s["attempt"] for s in starts] == ["1", "2"]
    turns = [x["turn"] for x in log_lines(tmp_path) if x["event"] == "turn"]
    assert turns == [1, 2, 3, 4]  # it resumed at turn 3, not from scratch
    final = lineage(c, lin.id)
    assert final.revivals == 1 and final.turns == 4
    wait_for(lambda: lineage(c, lin.id).status == "FINISHED")


def test_hung_agent_is_detected_killed_and_revived(fast_daemon: DaemonProc,
                                                   tmp_path: Path) -> None:
    c = fast_daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10,20", "--hang-at", "2",
                      stale_after=0.5, crashed_after=1.5)
    wait_for(lambda: lineage(c, lin.id).attempt == 2, timeout=20, what="revival")
    events = c.events_list(limit=10000).events
    beats = [e.state for e in events if e.type == "agent.heartbeat"]
    assert "CRASHED" in beats
    first_exec = next(e for e in events if e.type == "exec.state"
                      and e.state == "CANCELLED")
    assert "hung" in first_exec.reason


def test_crash_loop_ends_failed(fast_daemon: DaemonProc, tmp_path: Path) -> None:
    c = fast_daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10", "--exit-at", "1:3", max_revivals=10)
    wait_for(lambda: lineage(c, lin.id).status == "FAILED", timeout=30)
    final = lineage(c, lin.id)
    assert "crash loop" in final.reason
    assert final.attempt == 3


def test_too_many_revivals_end_failed(fast_daemon: DaemonProc, tmp_path: Path) -> None:
    c = fast_daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10", "--exit-at", "1:3", max_revivals=1,
                      crash_loop_seconds=0)
    wait_for(lambda: lineage(c, lin.id).status == "FAILED", timeout=30)
    assert "gave up after 1 revivals" in lineage(c, lin.id).reason


def test_daemon_sigkill_with_one_session_per_policy(stopped_daemon: DaemonProc,
                                                    tmp_path: Path) -> None:
    d = stopped_daemon
    d.start(env=FAST)
    c = d.client()
    lins = {}
    for policy in ("revive", "reap", "ask"):
        sub = tmp_path / policy
        sub.mkdir()
        lins[policy] = start_agent(c, sub, "--pcts", "10,20", "--wait-file", str(sub / "go"),
                                   revival=policy)
        (sub / "go.1").touch()
        wait_for(lambda sub=sub: any(x["event"] == "turn" for x in log_lines(sub)))
    d.kill9()
    for lin in lins.values():  # the agents die while no daemon runs
        child = d.handles(lineage_exec(d, lin.id))["child"]
        os.killpg(child["pid"], signal.SIGKILL)
    d.start(env=FAST)
    c = d.client()
    wait_for(lambda: lineage(c, lins["revive"].id).attempt == 2
             and lineage(c, lins["revive"].id).status == "ACTIVE", what="revive")
    assert lineage(c, lins["reap"].id).status == "REAPED"
    ask = lineage(c, lins["ask"].id)
    assert ask.status == "ASK_PENDING" and ask.attempt == 1
    # Exactly once: another crash and restart starts nothing twice.
    d.kill9()
    d.start(env=FAST)
    c = d.client()
    assert lineage(c, lins["revive"].id).attempt == 2
    assert lineage(c, lins["ask"].id).status == "ASK_PENDING"
    r = d.cli("lineage", "resolve", lins["ask"].id, "--revive")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: lineage(c, lins["ask"].id).status == "ACTIVE")
    assert lineage(c, lins["ask"].id).attempt == 2
    rows = json.loads(d.cli("lineage", "ls", "--all", "--json").stdout)
    assert {r["id"]: r["status"] for r in rows}[lins["reap"].id] == "REAPED"


def lineage_exec(d: DaemonProc, lineage_id: str) -> str:
    import sqlite3

    db = sqlite3.connect(d.home / "tether.db")
    row = db.execute("SELECT json_extract(record, '$.exec_id') FROM lineages WHERE id = ?",
                     (lineage_id,)).fetchone()
    db.close()
    return str(row[0])


def test_successor_auto_starts_from_the_handoff(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "95,96", successor="auto")
    wait_for(lambda: lineage(c, lin.id).status == "FINISHED")
    wait_for(lambda: any(r.predecessor == lin.id for r in c.lineage_list(all=True)),
             what="successor")
    wait_for(lambda: len([x for x in log_lines(tmp_path) if x["event"] == "start"]) == 2)
    second = [x for x in log_lines(tmp_path) if x["event"] == "start"][1]
    assert second["handoff"] == "handoff after turn 1"


def test_ps_shows_agent_columns(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    start_agent(c, tmp_path, "--pcts", "42", "--linger", "30")
    wait_for(lambda: any(x["event"] == "done" for x in log_lines(tmp_path)))
    r = daemon.cli("ps")
    assert b"LIFECYCLE" in r.stdout and b"HEALTHY" in r.stdout and b"42%" in r.stdout
    rows = json.loads(daemon.cli("ps", "--json").stdout)
    assert rows[0]["agent"]["turns"] == 1 and rows[0]["agent"]["heartbeat"] == "ACTIVE"


FAKE_CLAUDE = """#!{python}
# A stand-in for Claude Code, which cannot run here (no network for its model): it
# reads the --settings file tether passes and fires the recorded hook payloads
# through the hook commands exactly as Claude Code would (JSON on stdin).
import json, os, subprocess, sys
args = sys.argv[1:]
settings = json.load(open(args[args.index("--settings") + 1]))
fixtures = {fixtures!r}
out = open(os.environ["FAKE_LOG"], "a")
def fire(event, **patch):
    payload = json.load(open(os.path.join(fixtures, event + ".json")))
    payload.update(patch)
    for group in settings["hooks"].get(event, []):
        for hook in group["hooks"]:
            r = subprocess.run(hook["command"], shell=True, capture_output=True,
                               input=json.dumps(payload).encode())
            out.write(json.dumps({{"event": event, "code": r.returncode,
                                   "stdout": r.stdout.decode()}}) + "\\n")
            out.flush()
transcript = os.path.join(fixtures, "transcript.jsonl")
fire("SessionStart", session_id="sess-42", transcript_path=transcript)
fire("PreToolUse", session_id="sess-42", transcript_path=transcript)
fire("Stop", session_id="sess-42", transcript_path=transcript)
fire("PreToolUse", session_id="sess-42", transcript_path=transcript)
fire("PreToolUse", session_id="sess-42", transcript_path=transcript)
fire("SessionEnd", session_id="sess-42", transcript_path=transcript)
"""


def test_claude_provider_end_to_end_with_recorded_hooks(daemon: DaemonProc,
                                                        tmp_path: Path) -> None:
    """Claude Code itself cannot run here; a stand-in fires its recorded hook payloads
    through the settings file and hook program tether wires up."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "claude"
    fake.write_text(FAKE_CLAUDE.format(
        python=sys.executable, fixtures=str(FIXTURES / "claude")))
    fake.chmod(0o755)
    log = tmp_path / "hooks.log"
    c = daemon.client()
    lin = c.agent_start(["claude", "--model", "opus"], dying_pct=1.0, aging_pct=0.5,
                        env={"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    assert lin.provider == "claude"
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) == 6, timeout=20)
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert [c_["event"] for c_ in calls] == ["SessionStart", "PreToolUse", "Stop",
                                             "PreToolUse", "PreToolUse", "SessionEnd"]
    assert all(c_["code"] == 0 for c_ in calls)
    assert calls[1]["stdout"] == ""  # allowed: Claude's own permission flow decides
    assert calls[3]["stdout"] == ""  # DYING: the one finalization call
    deny = json.loads(calls[4]["stdout"])  # DRAINING: fenced, in Claude's deny format
    assert deny["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "fenced" in deny["hookSpecificOutput"]["permissionDecisionReason"]
    rec = lineage(c, lin.id)
    assert rec.provider_session_id == "sess-42"
    assert rec.turns == 1 and rec.context_pct is not None
    assert rec.lifecycle in ("DRAINING", "DEAD")
    snap = snapshot.read(daemon.home / "drain" / f"{lin.id}.json")
    assert snap["provider_session_id"] == "sess-42" and snap["messages"]


def test_interactive_agent_idle_at_its_prompt_is_not_killed(fast_daemon: DaemonProc,
                                                           tmp_path: Path) -> None:
    """After a turn, a terminal agent waits for its user: silence then is not a hang."""
    c = fast_daemon.client()
    lin = start_agent(c, tmp_path, "--pcts", "10", "--linger", "60", tty=True,
                      stale_after=1.0, crashed_after=2.5)
    wait_for(lambda: any(x["event"] == "done" for x in log_lines(tmp_path)))
    import time

    time.sleep(6)  # more than twice the CRASHED threshold, with the tick every 0.2 s
    rec = lineage(c, lin.id)
    assert rec.status == "ACTIVE" and rec.attempt == 1


def test_worktree_sessions_keep_agent_state_and_refuse_foreign_issues(
        daemon: DaemonProc, tmp_path: Path) -> None:
    import subprocess

    from tether.agent import worktree as wt

    repo = tmp_path / "repo"
    repo.mkdir()
    for cmd in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *cmd], check=True)
    run = ["run", "--agent", "generic", "-d", "--worktree", "fix-1", "--issue", "ABC-1", "--",
           sys.executable, AGENT, "--log", str(tmp_path / "agent.log"), "--pcts", "33",
           "--linger", "30"]
    r = subprocess.run([*TETHER_CLI(daemon), *run], cwd=repo, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    tree = tmp_path / "repo.worktrees" / "fix-1"
    assert (tree / ".git").exists()
    wait_for(lambda: any(x["event"] == "done" for x in log_lines(tmp_path)))
    st = wt.read(tree)
    assert st.issue_identifier == "ABC-1" and st.provider_name == "generic"
    assert st.tether_lineage and st.attempt_count == 1 and st.status == "running"
    raw = json.loads((tree / ".agent" / "state.json").read_text())
    assert raw["issueIdentifier"] == "ABC-1" and isinstance(raw["lastUpdatedAt"], int)
    other = [*run[:6], "--issue", "XYZ-9", *run[8:]]
    r = subprocess.run([*TETHER_CLI(daemon), *other], cwd=repo, capture_output=True,
                       timeout=60)
    assert r.returncode == 1 and b"belongs to issue ABC-1" in r.stderr
    r = subprocess.run([*TETHER_CLI(daemon), *other[:8], "--force", *other[8:]], cwd=repo,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: wt.read(tree).issue_identifier == "XYZ-9")
    bad = [*run[:5], "--issue", *run[6:]]  # a branch named like an option
    r = subprocess.run([*TETHER_CLI(daemon), *bad], cwd=repo, capture_output=True, timeout=60)
    assert r.returncode == 2 and b"not a valid git branch name" in r.stderr


def TETHER_CLI(d: DaemonProc) -> list[str]:
    from tests.harness import TETHER

    return [*TETHER, "--home", str(d.home)]


def test_a_revival_interrupted_by_a_crash_is_not_duplicated(stopped_daemon: DaemonProc,
                                                            tmp_path: Path) -> None:
    d = stopped_daemon
    d.start(env={**FAST, "TETHER_FAULT": "agent.after_attempt_commit"})
    c = d.client(reconnect=0.5)
    lin = start_agent(c, tmp_path, "--pcts", "10,20", "--wait-file", str(tmp_path / "go"))
    (tmp_path / "go.1").touch()
    wait_for(lambda: any(x["event"] == "turn" for x in log_lines(tmp_path)))
    pid = d.handles(lin.exec)["child"]["pid"]
    os.kill(pid, signal.SIGKILL)  # the revival commits attempt 2, then the daemon dies
    assert d.proc is not None
    d.proc.wait(20)
    assert d.proc.returncode == -signal.SIGKILL
    d.start(env=FAST)
    c = d.client()
    wait_for(lambda: lineage(c, lin.id).status == "ACTIVE"
             and lineage(c, lin.id).attempt == 2, what="attempt 2 running")
    wait_for(lambda: [s["attempt"] for s in log_lines(tmp_path) if s["event"] == "start"]
             == ["1", "2"], what="attempt 2 logged its start")
    d.kill9()  # and once more, with attempt 2 running: nothing is started twice
    d.start(env=FAST)
    c = d.client()
    execs = [x for x in c.exec_list(all=True) if x.agent]
    assert len(execs) == 2  # attempt 1 (killed) and attempt 2, never a second copy
    assert lineage(c, lin.id).attempt == 2
    starts = [x for x in log_lines(tmp_path) if x["event"] == "start"]
    assert [s["attempt"] for s in starts] == ["1", "2"]


@pytest.mark.parametrize("point", ["exec.after_commit", "exec.after_handoff"])
def test_a_first_attempt_interrupted_by_a_crash_is_adopted_not_duplicated(
        stopped_daemon: DaemonProc, tmp_path: Path, point: str) -> None:
    """The daemon dies inside agent.start, before its reply. The next daemon adopts the
    first attempt (after_handoff: it runs) or starts it (after_commit: it never ran), and
    the client's retry of agent.start with the same request key returns that lineage:
    one lineage, one process.

    The agent waits for ``go.1`` before it first calls the daemon, so that it is alive
    whenever the next daemon comes up: an agent never starts a daemon, and one whose
    call finds none for longer than ``session.RETRY_BUDGET`` exits 1 — a death, revived
    as attempt 2 (the next test), which on a loaded machine is what a fixed wait here
    used to turn into."""
    from tether.client.errors import DaemonUnavailable

    d = stopped_daemon
    d.start(env={**FAST, "TETHER_FAULT": point})
    c = d.client(reconnect=0.5)
    key = uuid.uuid4().hex
    args = ("--pcts", "10", "--linger", "30", "--wait-file", str(tmp_path / "go"))
    with pytest.raises(DaemonUnavailable):
        start_agent(c, tmp_path, *args, name="solo", request_key=key)
    assert d.proc is not None
    d.proc.wait(20)
    assert d.proc.returncode == -signal.SIGKILL
    d.start(env=FAST)
    c = d.client()
    again = start_agent(c, tmp_path, *args, name="solo", request_key=key)  # the retry
    (lin,) = c.lineage_list(all=True)
    assert again.id == lin.id
    (tmp_path / "go.1").touch()
    wait_for(lambda: lineage(c, lin.id).status == "ACTIVE"
             and any(x["event"] == "done" for x in log_lines(tmp_path)), what="running")
    starts = [x for x in log_lines(tmp_path) if x["event"] == "start"]
    running = [x for x in c.exec_list() if x.agent]
    assert len(running) == 1 and len(starts) == 1  # one process, never two
    # after_commit: attempt 1's exec never ran and attempt 1 was started again (not
    # revived) as a second exec; after_handoff: attempt 1 ran and was adopted.
    execs = [x for x in c.exec_list(all=True) if x.agent]
    assert len(execs) == (2 if point == "exec.after_commit" else 1), execs
    assert lineage(c, lin.id).attempt == 1 and lineage(c, lin.id).revivals == 0


def test_a_first_attempt_that_ends_while_no_daemon_runs_is_revived_once(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    """The daemon dies inside agent.start after the handoff, and the agent exits (3)
    before the next daemon comes up — as an agent whose daemon stays away longer than
    ``session.RETRY_BUDGET`` does. The next daemon records that end (the exit file) and
    applies the revival policy once: attempt 2, never a second copy of attempt 1."""
    from tether.client.errors import DaemonUnavailable

    d = stopped_daemon
    d.start(env={**FAST, "TETHER_FAULT": "exec.after_handoff"})
    c = d.client(reconnect=0.5)
    log, go = tmp_path / "agent.log", tmp_path / "go"
    script = (f'echo "$TETHER_ATTEMPT" >> {log}; if [ "$TETHER_ATTEMPT" = 1 ]; then '
              f'while [ ! -e {go} ]; do sleep 0.02; done; exit 3; fi; exec sleep 30')
    with pytest.raises(DaemonUnavailable):
        c.agent_start(["sh", "-c", script], provider="generic", revival="revive",
                      request_key=uuid.uuid4().hex)
    assert d.proc is not None
    d.proc.wait(20)
    wait_for(lambda: log.exists(), what="attempt 1 running")
    go.touch()
    wait_for(lambda: list(d.home.glob("logs/*/*.exit")), what="attempt 1's exit file")
    d.start(env=FAST)
    c = d.client()
    (lin,) = c.lineage_list(all=True)
    wait_for(lambda: lineage(c, lin.id).status == "ACTIVE" and lineage(c, lin.id).attempt == 2
             and log.read_text().split() == ["1", "2"], what="attempt 2 running")
    first, second = sorted((x for x in c.exec_list(all=True) if x.agent),
                           key=lambda x: x.created_at)
    assert (first.state, first.exit_code) == ("FINISHED", 3)
    assert second.state == "RUNNING"
    assert lineage(c, lin.id).revivals == 1


def test_hook_program_outside_an_agent_never_blocks(daemon: DaemonProc) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    r = daemon.cli("agent", "hook", "claude", "PreToolUse", input=b"{}", env=env)
    assert r.returncode == 0 and b"ignored" in r.stderr


def test_a_held_worktree_lock_does_not_freeze_the_daemon(daemon: DaemonProc,
                                                         tmp_path: Path) -> None:
    """Review finding: a stray process holding .agent/state.json.lock froze every RPC."""
    import fcntl

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / ".agent").mkdir()
    c = daemon.client()
    start_agent(c, tmp_path, "--pcts", "10,20", "--wait-file", str(tmp_path / "go"),
                worktree=str(tree))
    with open(tree / ".agent" / "state.json.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (tmp_path / "go.1").touch()
        wait_for(lambda: any(x["event"] == "turn" for x in log_lines(tmp_path)), timeout=15)
        t0 = time.monotonic()
        assert c.health().status == "SERVING"
        assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------- review regressions
def test_a_revival_whose_sandbox_is_gone_fails_the_lineage_not_the_daemon(
        fast_daemon: DaemonProc, tmp_path: Path) -> None:
    """Review finding: resolving the sandbox outside the attempt's error handling left
    the lineage REVIVING and made every later daemon start exit 1."""
    c = fast_daemon.client()
    c.sandbox_create("doomed", runtime="process")
    lin = c.agent_start(["sh", "-c", "exit 1"], provider="generic", sandbox="doomed",
                        revival="ask")
    wait_for(lambda: lineage(c, lin.id).status == "ASK_PENDING", 15)
    c.sandbox_delete("doomed", grace=1)
    after = c.lineage_resolve(lin.id, "revive")
    assert after.status == "FAILED" and "no sandbox matches" in (after.reason or ""), after
    fast_daemon.kill9()
    fast_daemon.start(env=FAST)  # recovery must not trip over it
    assert lineage(fast_daemon.client(), lin.id).status == "FAILED"




# ---------------------------------------------------------------------- attempts that never ran
def agent_execs(c: Client, lineage_id: str) -> list[Any]:
    return [x for x in c.exec_list(all=True) if x.lineage == lineage_id]


@pytest.mark.parametrize("policy", ["revive", "reap", "ask"])
def test_a_first_attempt_whose_exec_never_started_runs_once_whatever_the_policy(
        stopped_daemon: DaemonProc, tmp_path: Path, policy: str) -> None:
    """Issue 11 #8: the daemon dies after committing attempt 1's exec, before any monitor
    had it. That exec never ran: not a death, so no policy, no revival; the same attempt
    runs once, and a retried agent.start with the same key returns it running."""
    from tether.client.errors import DaemonUnavailable

    d = stopped_daemon
    d.start(env={**FAST, "TETHER_FAULT": "exec.after_commit"})
    c = d.client(reconnect=0.5)
    key = f"first-attempt-{policy}"
    with contextlib.suppress(DaemonUnavailable):
        start_agent(c, tmp_path, "--pcts", "10", "--linger", "60", revival=policy,
                    max_revivals=0, request_key=key)
    assert d.proc is not None
    d.proc.wait(20)
    assert d.proc.returncode == -signal.SIGKILL
    d.start(env=FAST)
    c = d.client()
    again = start_agent(c, tmp_path, "--pcts", "10", "--linger", "60", revival=policy,
                        max_revivals=0, request_key=key)
    assert again.status == "ACTIVE" and again.attempt == 1 and again.revivals == 0, again
    assert again.exec_view is not None and again.exec_view.state == "RUNNING"
    (lin,) = c.lineage_list(all=True)
    assert lin.id == again.id
    wait_for(lambda: any(x["event"] == "turn" for x in log_lines(tmp_path)),
             what="the agent ran and its token was accepted")
    execs = agent_execs(c, lin.id)
    assert sorted(x.state for x in execs) == ["FAILED", "RUNNING"]
    (unstarted,) = [x for x in execs if x.state == "FAILED"]
    assert unstarted.never_started and unstarted.started_at is None
    # Exactly once: another crash and restart starts nothing again.
    d.kill9()
    d.start(env=FAST)
    c = d.client()
    assert lineage(c, lin.id).status == "ACTIVE" and lineage(c, lin.id).attempt == 1
    assert len(agent_execs(c, lin.id)) == 2
    assert [x["event"] for x in log_lines(tmp_path)].count("start") == 1


def test_a_revival_whose_exec_never_started_does_not_spend_the_budget(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    """A revival (max_revivals 1) whose exec the daemon committed and then died: attempt 2
    still runs, once; it is not a second death nor a second revival."""
    d = stopped_daemon
    d.start(env=FAST)
    c = d.client()
    lin = start_agent(c, tmp_path, "--pcts", "10,20", "--wait-file", str(tmp_path / "go"),
                      max_revivals=1)
    (tmp_path / "go.1").touch()
    wait_for(lambda: any(x["event"] == "turn" for x in log_lines(tmp_path)))
    d.kill9()
    d.start(env={**FAST, "TETHER_FAULT": "exec.after_commit"})  # attempt 1 is adopted
    pid = d.handles(lin.exec)["child"]["pid"]
    os.kill(pid, signal.SIGKILL)  # its revival commits attempt 2's exec, then dies
    assert d.proc is not None
    d.proc.wait(20)
    assert d.proc.returncode == -signal.SIGKILL
    d.start(env=FAST)
    c = d.client()
    now = lineage(c, lin.id)
    assert now.status == "ACTIVE" and now.attempt == 2 and now.revivals == 1, now
    wait_for(lambda: [s["attempt"] for s in log_lines(tmp_path) if s["event"] == "start"]
             == ["1", "2"], what="attempt 2 logged its start")
    execs = agent_execs(c, lin.id)
    assert len(execs) == 3 and [x.never_started for x in execs].count(True) == 1


def test_an_agent_command_that_cannot_start_is_not_restarted(daemon: DaemonProc,
                                                             tmp_path: Path) -> None:
    """A genuine start failure is the agent's: the lineage fails as before, no retries."""
    c = daemon.client()
    lin = c.agent_start([str(tmp_path / "no-such-agent")], provider="generic",
                        revival="revive")
    assert lin.status == "FAILED" and "command not found" in (lin.reason or ""), lin
    assert lin.attempt == 1
    (x,) = agent_execs(c, lin.id)
    assert x.state == "FAILED" and x.exit_code == 127 and not x.never_started


@pytest.mark.skipif(not bwrap.probe().available, reason="needs bubblewrap")
def test_a_sandboxed_agent_whose_program_is_missing_fails_at_once(
        daemon: DaemonProc, tmp_path: Path) -> None:
    """In bwrap the gate's shell would exit 127 itself, which read as a crash: revived
    twice, then a crash loop. A missing or non-executable program is START_FAILED."""
    c = daemon.client()
    ws = tmp_path / "ws"
    ws.mkdir()
    c.sandbox_create("box", runtime="bwrap", workspace=str(ws))
    not_exec = ws / "not-executable"
    not_exec.write_text("#!/bin/sh\n")
    for argv0, code in (("no-such-agent-xyz", 127), (str(not_exec), 126)):
        lin = c.agent_start([argv0], provider="generic", revival="revive", sandbox="box",
                            cwd=str(ws), env={"PATH": os.environ["PATH"]})
        assert lin.status == "FAILED" and lin.exit_reason == "start_failed", lin
        assert ("command not found" if code == 127 else "permission denied") in (
            lin.reason or "")
        assert lin.attempt == 1 and agent_execs(c, lin.id) == []
    r = subprocess.run([*TETHER, "--home", str(daemon.home), "run", "-d", "--agent",
                        "generic", "--sandbox", "box", "--", "no-such-agent-xyz"], cwd=ws,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 127 and r.stdout == "", r
    assert "command not found: no-such-agent-xyz" in r.stderr


def test_run_detached_prints_only_the_exec_id_on_stdout(daemon: DaemonProc,
                                                        tmp_path: Path) -> None:
    """`x=$(tether run -d -- claude …)` must give an exec ref: the lineage goes to stderr."""
    r = subprocess.run([*TETHER, "--home", str(daemon.home), "run", "-d", "--agent",
                        "generic", "--", "sleep", "30"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    x = daemon.client().exec_get(r.stdout.strip())
    assert r.stdout == f"{x.id}\n" and f"lineage {x.lineage}" in r.stderr, r
