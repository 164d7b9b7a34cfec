"""Fleet operators' commands against real PostgreSQL and real daemons: undrain, forget a
dead host, rotate the host-to-host API's token, and worktree clones removed once their
generation ended and its branch is on the remote (a bare repository)."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.test_fleet import FAST, LEASE, SLEEPER, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.e2e.test_fleet_drain import SLOW, stopped_for_hand_over
from tests.e2e.test_fleet_worktree import _git, _place, _repo
from tests.harness import TETHER, kill_strays, wait_for

pytestmark = fleet_marks

TICKER = [sys.executable, "-c", "import itertools, time\nfor i in itertools.count():\n"
          " print('tick', i, flush=True); time.sleep(0.2)"]
#: Commits on its branch, then ends (its lineage with it).
ONE_COMMIT = ("echo work > work.txt && git add work.txt && git -c user.name=t "
              "-c user.email=t@t commit -qm 'agent work' && echo committed")


def _two_hosts(fleet: Fleet) -> None:
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")


def test_undrain_makes_a_draining_host_active_and_leaves_moved_agents_where_they_went(
        fleet: Fleet) -> None:
    _two_hosts(fleet)
    agent = fleet.place("--host", "h1", "--agent", "generic", "--crashed-after", "3600",
                        "--stale-after", "3600", "--", *SLEEPER)
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING", 20, what="running on h1")
    fleet.cli("drain", "--now", "h1")
    moved = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                              and fleet.work(agent)["state"] == "RUNNING"
                              and fleet.work(agent)), 20, what="handed over to h2")
    assert fleet.cli("undrain", "h1").stdout.decode().strip() == "host h1 ACTIVE"
    with fleet.db() as c:
        row = c.execute("SELECT state, drain_now FROM hosts WHERE name = 'h1'").fetchone()
    assert row == {"state": "ACTIVE", "drain_now": False}
    assert "host.activated" in fleet.cli("events").stdout.decode()
    time.sleep(1.0)  # h1's passes see ACTIVE: nothing moves back
    assert fleet.work(agent)["generation"] == 2
    assert fleet.live_copies(agent) == [("h2", moved["local_id"])]
    again = fleet.place("--host", "h1", "--", *SLEEPER)  # h1 takes new work again
    wait_for(lambda: fleet.work(again)["state"] == "RUNNING", 20, what="new work on h1")
    twice = fleet.cli("undrain", "h1", check=False)
    assert twice.returncode == 1
    assert "host h1 is ACTIVE, not DRAINING" in twice.stderr.decode()
    nobody = fleet.cli("undrain", "h9", check=False)
    assert nobody.returncode == 1 and "no host named 'h9'" in nobody.stderr.decode()
    # A drain then its undrain before any pass acted: a plain drain round trip.
    assert "h2 draining" in fleet.cli("drain", "h2").stdout.decode()
    assert fleet.cli("undrain", "h2").returncode == 0
    assert fleet.hosts_rows()["h2"]["state"] == "ACTIVE"


def test_forget_refuses_a_live_host_or_live_work_then_keeps_the_work_history(
        fleet: Fleet) -> None:
    h1 = fleet.add("h1")
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    plain = fleet.place("--host", "h1", "--", *SLEEPER)
    wait_for(lambda: fleet.work(plain)["state"] == "RUNNING", 20, what="running on h1")
    live = fleet.cli("forget", "h1", check=False)
    assert live.returncode == 1 and "holds a live lease" in live.stderr.decode()
    assert "drain h1" in live.stderr.decode()
    h1.kill9()
    kill_strays(h1.home, wait=5)
    wait_for(lambda: not fleet.hosts_rows()["h1"]["live"], LEASE * 3, what="lease expired")
    busy = fleet.cli("forget", "h1", check=False)  # no host left to sweep its work
    assert busy.returncode == 1
    assert "1 placement(s) PLACED or RUNNING" in busy.stderr.decode()
    assert "orphan sweep" in busy.stderr.decode()
    fleet.add("h2")  # its sweep marks the exec LOST
    wait_for(lambda: fleet.work(plain)["state"] == "LOST", LEASE * 6, what="swept")
    said = fleet.cli("forget", "h1").stdout.decode().strip()
    assert said == "host h1 forgotten (1 ended placement(s) keep its name)"
    assert set(fleet.hosts_rows()) == {"h2"}
    assert fleet.work(plain)["host"] == "h1"  # history kept
    assert "host.forgotten" in fleet.cli("events").stdout.decode()
    gone = fleet.cli("forget", "h1", check=False)
    assert gone.returncode == 1 and "no host named 'h1'" in gone.stderr.decode()
    h1.start(pool=0, env=FAST, args=["--fleet", fleet.url, "--host-name", "h1"])
    wait_for(lambda: "h1" in fleet.hosts_rows() and fleet.hosts_rows()["h1"]["live"], 15,
             what="h1 registered anew")


def test_forget_waits_for_a_human_to_answer_an_ask_placement(fleet: Fleet) -> None:
    _two_hosts(fleet)
    asked = fleet.place("--host", "h1", "--agent", "generic", "--revival", "ask",
                        "--crashed-after", "3600", "--stale-after", "3600", "--", *SLEEPER)
    wait_for(lambda: fleet.work(asked)["state"] == "RUNNING", 20, what="running on h1")
    h1 = fleet.hosts["h1"]
    h1.kill9()
    kill_strays(h1.home, wait=5)
    wait_for(lambda: fleet.work(asked)["state"] == "ASK", LEASE * 6, what="asking")
    refused = fleet.cli("forget", "h1", check=False)
    assert refused.returncode == 1
    assert "waiting for a human (ASK)" in refused.stderr.decode()
    assert "lineage resolve" in refused.stderr.decode()
    fleet.cli("lineage", "resolve", "--reap", str(asked))
    assert "forgotten" in fleet.cli("forget", "h1").stdout.decode()


def test_a_rotated_token_reaches_the_hosts_and_the_old_one_ends_after_its_grace(
        fleet: Fleet) -> None:
    from tether.fleet import store as fs

    _two_hosts(fleet)
    ident = fleet.place("--host", "h2", "--", *TICKER)
    wait_for(lambda: fleet.work(ident)["local_id"], 20, what="started on h2")
    api = fleet.hosts_rows()["h2"]["api"]
    with fleet.db() as c:
        old = fs.secret(c)
    follow = subprocess.Popen([*TETHER, "--fleet", fleet.url, "logs", "-f", str(ident)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline().startswith(b"tick")  # streaming with the old token
        grace = 5.0
        said = subprocess.run([*TETHER, "fleet", "rotate-token", "--grace", str(grace),
                               fleet.url], capture_output=True, text=True)
        assert said.returncode == 0 and "rotated" in said.stdout, said.stderr
        rotated = time.monotonic()
        with fleet.db() as c:
            new = fs.secret(c)
        assert new != old

        def status(token: str) -> int:
            return httpx.get(f"{api}/v1/events", headers={
                "Authorization": f"Bearer {token}"}).status_code
        # The host reads the new one within a renewal; the old one is accepted meanwhile.
        wait_for(lambda: status(new) == 200, LEASE, what="h2 accepts the new token")
        assert status(old) == 200
        assert b"tick" in fleet.cli("logs", str(ident)).stdout  # the CLI reads the new one
        wait_for(lambda: status(old) == 401, grace + LEASE, what="the old token refused")
        assert time.monotonic() - rotated >= grace - 0.5
        # The stream opened with the old token was never cut.
        before = follow.stdout.readline()
        assert before.startswith(b"tick") and follow.poll() is None
        assert status(new) == 200
    finally:
        follow.kill()
        follow.wait()
    events = fleet.cli("events").stdout.decode()
    assert "fleet.token_rotated" in events and new not in events and old not in events


def _place_script(fleet: Fleet, host: str, repo: Path, branch: str, script: str) -> int:
    out = fleet.cli("run", "--host", host, "--agent", "generic", "--crashed-after", "3600",
                    "--stale-after", "3600", "--revival", "reap", "--cwd", str(repo),
                    "--worktree", branch, "--", "sh", "-c", script).stdout
    return int(out.split()[0])


def test_an_ended_generations_clone_goes_once_pushed_and_one_with_unpushed_work_stays(
        fleet: Fleet, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    bare = tmp_path / "remote.git"
    hook = bare / "hooks" / "pre-receive"  # the remote refuses branch held-*
    hook.write_text("#!/bin/sh\nwhile read old new ref; do case $ref in "
                    "refs/heads/held-*) echo refused >&2; exit 1;; esac; done\n")
    hook.chmod(0o755)
    h1 = fleet.add("h1")
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    trees = h1.home / "fleet" / "worktrees"
    done = _place_script(fleet, "h1", repo, "fix-1", ONE_COMMIT)
    held = _place_script(fleet, "h1", repo, "held-1", ONE_COMMIT)
    wait_for(lambda: fleet.work(done)["state"] == "ENDED"
             and fleet.work(held)["state"] == "ENDED", 30, what="both agents ended")
    wait_for(lambda: not (trees / f"{done}-1").exists(), 15, what="the pushed clone removed")
    assert _git("--git-dir", str(bare), "log", "-1", "--format=%s", "fix-1") == "agent work"
    kept = trees / f"{held}-1"
    time.sleep(1.0)  # several passes: it stays
    assert (kept / "work.txt").exists()
    events = fleet.cli("events", "--host", "h1").stdout.decode()
    assert f"clone {trees / f'{done}-1'} removed" in events
    assert f"clone {kept} kept" in events and "held-1" in events
    assert events.count("fleet.clone_kept") == 1  # said once, not every pass


def test_a_clone_an_earlier_run_left_goes_once_its_generation_moved_and_was_pushed(
        fleet: Fleet, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    slow = {"TETHER_FLEET_LEASE": str(LEASE)}
    h1 = fleet.add("h1", env=slow)
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    ident = int(_place(fleet, "h1", repo, "fix-1").stdout.split()[0])
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 30, what="running on h1")
    first = h1.home / "fleet" / "worktrees" / f"{ident}-1"
    wait_for(lambda: subprocess.run(["git", "--git-dir", str(tmp_path / "remote.git"), "log",
                                     "-1", "--format=%s", "fix-1"], capture_output=True,
                                    text=True).stdout.strip() == "agent work", 20,
             what="h1 pushed the agent's commit")
    time.sleep(1.0)  # a running generation's clone stays
    assert (first / "work.txt").exists()
    h1.kill9()
    kill_strays(h1.home, wait=5)
    wait_for(lambda: (fleet.work(ident)["generation"] == 2
                      and fleet.work(ident)["state"] == "RUNNING"), LEASE * 8,
             what="revived on h2")
    second = fleet.hosts["h2"].home / "fleet" / "worktrees" / f"{ident}-2"
    h1.start(pool=0, env={**FAST, **slow}, args=["--fleet", fleet.url, "--host-name", "h1"])
    wait_for(lambda: not first.exists(), 20, what="h1 removed its old clone")
    assert (second / "work.txt").exists()  # h2's, in use, stays


def test_an_agent_stopped_for_a_hand_over_still_moves_when_the_drain_is_undone(
        fleet: Fleet) -> None:
    """Undrain between a draining host's stop of its agent and the move (a crash there):
    the stopped copy is not left RUNNING nowhere; it moves once, as the drain began."""
    h1, agent, _ = stopped_for_hand_over(fleet)
    fleet.cli("undrain", "h1")
    h1.start(pool=0, env={**FAST, **SLOW}, args=["--fleet", fleet.url, "--host-name", "h1"])
    w = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                          and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                 20, what="moved after the restart")
    assert w["host"] == "h2" and fleet.live_copies(agent) == [("h2", w["local_id"])]
    assert fleet.hosts_rows()["h1"]["state"] == "ACTIVE"
