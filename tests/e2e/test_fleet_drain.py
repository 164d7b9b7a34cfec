"""``tether --fleet URL drain`` moves a host's agents: each is handed over to another host
after its current turn (or at once with --now), exactly once; plain commands stay."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_fleet import FAST, LEASE, SLEEPER, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import SCRIPTED_AGENT, DaemonProc, kill_strays, wait_for

pytestmark = fleet_marks


def _two_hosts(fleet: Fleet, env: dict[str, str] | None = None) -> None:
    fleet.add("h1", env=env)
    fleet.add("h2", env=env)
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")


def test_drain_hands_an_agent_over_after_its_turn_exactly_once(
        fleet: Fleet, tmp_path: Path) -> None:
    # Renewals every 3 s: the drain must reach h1 by its NOTIFY, not its next renewal
    # (seen after the turn had ended, the drain waited for a turn that never came).
    _two_hosts(fleet, env={"TETHER_FLEET_LEASE": "9"})
    gate, log = tmp_path / "turn", tmp_path / "agent.log"
    agent = fleet.place("--host", "h1", "--agent", "generic", "--crashed-after", "3600",
                        "--stale-after", "3600", "-e", f"PATH={os.environ['PATH']}", "--",
                        sys.executable, str(SCRIPTED_AGENT), "--log", str(log),
                        "--pcts", "10,20,30", "--wait-file", str(gate), "--linger", "600")
    first = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                     20, what="running on h1")
    plain = fleet.place("--host", "h1", "--", *SLEEPER)
    wait_for(lambda: fleet.work(plain)["state"] == "RUNNING", 20, what="plain on h1")
    assert "h1 draining" in fleet.cli("drain", "h1").stdout.decode()
    time.sleep(1.0)  # mid-turn: it stays (three work passes)
    assert fleet.work(agent)["generation"] == 1 and fleet.work(agent)["host"] == "h1"
    (gate.parent / f"{gate.name}.1").touch()  # the turn ends
    w = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                          and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                 20, what="handed over to h2")
    assert w["host"] == "h2" and "h1 is draining" in w["reason"]
    assert fleet.live_copies(agent) == [("h2", w["local_id"])]
    with fleet.hosts["h1"].client() as c:
        old = c.lineage_get(first["local_id"])
        assert old.status == "REAPED" and "handed over" in (old.reason or "")
    time.sleep(0.6)  # later passes neither end it nor move it again
    assert fleet.work(agent)["generation"] == 2 and fleet.work(agent)["state"] == "RUNNING"
    assert fleet.work(plain)["state"] == "RUNNING" and fleet.work(plain)["host"] == "h1"
    journal = fleet.cli("events").stdout.decode()
    assert journal.count("work.handed_over") == 1


def test_drain_now_moves_agents_at_once_and_waits_for_room(fleet: Fleet) -> None:
    fleet.add("h1")
    fleet.add("h2", capacity=0)  # no room anywhere else yet
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    agent = fleet.place("--host", "h1", "--agent", "generic", "--crashed-after", "3600",
                        "--stale-after", "3600", "--", *SLEEPER)
    first = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                     20, what="running on h1")
    assert "agents move now" in fleet.cli("drain", "--now", "h1").stdout.decode()
    time.sleep(1.0)  # nowhere to go: it keeps running where it is
    assert fleet.work(agent)["generation"] == 1
    assert fleet.live_copies(agent) == [("h1", first["local_id"])]
    fleet.add("h3")
    w = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                          and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                 20, what="handed over to h3")
    assert w["host"] == "h3"
    assert fleet.live_copies(agent) == [("h3", w["local_id"])]
    again = fleet.cli("drain", "--now", "h1")
    assert "was not ACTIVE" in again.stdout.decode()


def test_an_ask_placement_waits_for_a_human_then_runs_once(fleet: Fleet) -> None:
    _two_hosts(fleet)
    asked = [fleet.place("--host", "h1", "--agent", "generic", "--revival", "ask",
                         "--crashed-after", "3600", "--stale-after", "3600", "--", *SLEEPER)
             for _ in range(2)]
    wait_for(lambda: all(fleet.work(a)["state"] == "RUNNING" for a in asked), 20,
             what="running on h1")
    h1 = fleet.hosts["h1"]
    h1.kill9()
    kill_strays(h1.home, wait=5)
    wait_for(lambda: all(fleet.work(a)["state"] == "ASK" for a in asked), LEASE * 6,
             what="both waiting for a human")
    revive, reap = asked
    said = fleet.cli("lineage", "resolve", "--revive", str(revive)).stdout.decode()
    assert said.strip() == f"{revive} PLACED on h2 (generation 2)"
    w = wait_for(lambda: fleet.work(revive)["state"] == "RUNNING" and fleet.work(revive), 20,
                 what="revived on h2")
    assert fleet.live_copies(revive) == [("h2", w["local_id"])]
    twice = fleet.cli("lineage", "resolve", "--revive", str(revive), check=False)
    assert twice.returncode == 1 and "not waiting for an answer" in twice.stderr.decode()
    assert fleet.cli("lineage", "resolve", "--reap", str(reap)).stdout.decode().strip() \
        == f"{reap} REAPED"
    assert fleet.work(reap)["state"] == "REAPED" and fleet.live_copies(reap) == []


#: a lease long enough for a restart to come back within it
SLOW = {"TETHER_FLEET_LEASE": "15"}


def stopped_for_hand_over(fleet: Fleet) -> tuple[DaemonProc, int, dict[str, Any]]:
    """h1 (a long lease) and h2; an agent on h1; ``drain --now h1`` kills h1 at the
    fault point after it stopped its copy, before the placement moved. Returns h1 (to
    start again with ``SLOW``), the placement and its first row."""
    h1 = fleet.add("h1", env={**SLOW, "TETHER_FAULT": "fleet.after_handover_stop"})
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    agent = fleet.place("--host", "h1", "--agent", "generic", "--crashed-after", "3600",
                        "--stale-after", "3600", "--", *SLEEPER)
    first = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                     20, what="running on h1")
    fleet.cli("drain", "--now", "h1")
    assert h1.proc is not None
    h1.proc.wait(20)  # the fault point killed it: its copy stopped, the row still h1's
    return h1, agent, first


def test_a_crash_between_stopping_and_moving_a_handed_over_agent_moves_it_once(
        fleet: Fleet) -> None:
    h1, agent, first = stopped_for_hand_over(fleet)
    assert fleet.work(agent)["host"] == "h1" and fleet.work(agent)["state"] == "RUNNING"
    assert fleet.live_copies(agent) == []
    h1.start(pool=0, env={**FAST, **SLOW}, args=["--fleet", fleet.url, "--host-name", "h1"])
    w = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                          and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                 20, what="handed over after the restart")
    assert w["host"] == "h2" and fleet.live_copies(agent) == [("h2", w["local_id"])]
    with h1.client() as c:
        assert c.lineage_get(first["local_id"]).status == "REAPED"  # not revived there
    assert fleet.cli("events").stdout.decode().count("work.handed_over") == 1
