"""A host whose DAEMON dies while its monitors live: the monitors of its fleet agents
fence themselves at the lease file's deadline, so a lineage never runs on two hosts;
a daemon back within its lease keeps its agents; plain fleet execs are never fenced."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

from tests.e2e.test_fleet import FAST, LEASE, SLEEPER, Fleet, _local_starts, fleet  # noqa: F401
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import wait_for

pytestmark = fleet_marks

#: The stand-in agent: appends "<CLOCK_MONOTONIC> <its lineage>" when it starts, then
#: sleeps (CLOCK_MONOTONIC is one clock for every process of the machine).
STAND_IN = ("import os, sys, time\n"
            "with open(sys.argv[1], 'a') as f:\n"
            "    f.write(f'{time.monotonic()} {os.environ[\"TETHER_LINEAGE\"]}\\n')\n"
            "time.sleep(600)\n")


#: A host that is not the one under test keeps a longer lease: with 3 s (``LEASE``) a
#: stall of 1.5 s on a loaded machine fences it too, which is right but not what these
#: tests are about (in CI, a bystander h2 fenced itself and its revived copy vanished).
BYSTANDER = {"TETHER_FLEET_LEASE": "10"}


def _place_stand_in(fleet: Fleet, host: str, starts: Path, *more: str) -> int:
    return fleet.place("--host", host, "--agent", "generic", "--crashed-after", "3600",
                       "--stale-after", "3600", *more, "-e", f"PATH={os.environ['PATH']}", "--",
                       sys.executable, "-c", STAND_IN, str(starts))


def _starts(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    return [(float(t), lid) for t, lid in (ln.split() for ln in path.read_text().splitlines())]


def _lineage_exec(home: Path, lineage: str) -> tuple[str, str | None]:
    """(status, exec id) of a lineage, from the host's database (its daemon may be down)."""
    db = sqlite3.connect(f"file:{home / 'tether.db'}?mode=ro", uri=True)
    try:
        status, exec_id = db.execute(
            "SELECT status, json_extract(record, '$.exec_id') FROM lineages WHERE id = ?",
            (lineage,)).fetchone()
    finally:
        db.close()
    return status, exec_id


def _recent_starts(home: Path, lineage: str) -> list[float]:
    """A lineage's ``recent_starts`` (the crash-loop window), from the host's database."""
    db = sqlite3.connect(f"file:{home / 'tether.db'}?mode=ro", uri=True)
    try:
        [raw] = db.execute("SELECT json_extract(record, '$.recent_starts') FROM lineages "
                           "WHERE id = ?", (lineage,)).fetchone()
    finally:
        db.close()
    return list(json.loads(raw))


def test_a_dead_daemon_monitor_kills_its_agent_before_another_host_revives_it(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.add("h1")
    for name in ("h2", "h3"):  # bystanders: a stall of theirs under load is not this test's
        fleet.add(name, env=BYSTANDER)
    wait_for(lambda: len(fleet.hosts_rows()) == 3, 15, what="three hosts")
    starts = tmp_path / "starts"
    agent = _place_stand_in(fleet, "h1", starts)
    first = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                     20, what="running on h1")
    mine = ("h1", first["local_id"])
    wait_for(lambda: fleet.agent_processes(agent) == [mine], 10, what="h1's agent process")
    h1 = fleet.hosts["h1"]
    h1.kill9()  # the daemon only: its monitor and agent live on
    killed = time.monotonic()
    h1_dead: float | None = None
    while len(_starts(starts)) < 2:
        assert time.monotonic() - killed < LEASE * 8, "the agent was never revived"
        if h1_dead is None and mine not in fleet.agent_processes(agent):
            h1_dead = time.monotonic()  # no earlier than its real death
        time.sleep(0.01)
    (_, lid1), (t_revived, lid2) = _starts(starts)
    assert lid1 == first["local_id"] and lid2 != lid1
    assert h1_dead is not None, "h1's copy still ran when another host revived it"
    assert h1_dead < t_revived, (h1_dead - killed, t_revived - killed)
    w = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent), 20,
                 what="the revived copy RUNNING")
    assert w["host"] in ("h2", "h3") and w["generation"] == 2 and w["local_id"] == lid2
    # h1's monitor recorded why it killed its command, with the daemon down.
    status, exec_id = _lineage_exec(h1.home, lid1)
    assert status == "ACTIVE" and exec_id is not None
    [exit_file] = h1.home.glob(f"logs/*/{exec_id}.exit")
    assert '"outcome": "fenced"' in exit_file.read_text()
    # h1 comes back: it does not resume its copy; the lineage runs once, elsewhere.
    h1.start(pool=0, env=FAST, args=["--fleet", fleet.url, "--host-name", "h1"])
    with h1.client() as c:
        rec = wait_for(lambda: (c.lineage_get(lid1).status == "REAPED"
                                and c.lineage_get(lid1)), 20, what="h1 withdraws it")
        x = c.exec_get(exec_id)
    assert rec.exit_reason == "fenced" and rec.attempt == 1
    assert x.state == "CANCELLED"
    assert x.reason.startswith("fenced: host h1 lost its fleet lease"), x.reason
    time.sleep(LEASE)
    assert fleet.agent_processes(agent) == [(w["host"], lid2)]
    assert len(_starts(starts)) == 2


def test_a_daemon_back_within_its_lease_keeps_its_agents_running(
        fleet: Fleet, tmp_path: Path) -> None:
    slow = {"TETHER_FLEET_LEASE": "15"}
    h1 = fleet.add("h1", env=slow)
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    starts = tmp_path / "starts"
    agent = _place_stand_in(fleet, "h1", starts)
    w = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent), 20,
                 what="running on h1")
    wait_for(lambda: len(_starts(starts)) == 1, 10, what="the agent started")
    h1.kill9()
    killed = time.monotonic()
    h1.start(pool=0, env={**FAST, **slow}, args=["--fleet", fleet.url, "--host-name", "h1"])
    # Past the old lease's fence point (15 s less its margin): the new lease carried on.
    time.sleep(max(0.0, killed + 15 - time.monotonic()))
    assert fleet.agent_processes(agent) == [("h1", w["local_id"])]
    assert fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)["generation"] == 1
    with h1.client() as c:
        rec = c.lineage_get(w["local_id"])
        assert rec.status == "ACTIVE" and rec.attempt == 1
        assert rec.exec is not None and c.exec_get(rec.exec).state == "RUNNING"
    assert len(_starts(starts)) == 1


def test_a_plain_fleet_exec_outlives_its_dead_daemon_lease(fleet: Fleet) -> None:
    h1 = fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    plain = fleet.place("--host", "h1", "--", *SLEEPER)
    w = wait_for(lambda: fleet.work(plain)["state"] == "RUNNING" and fleet.work(plain), 20,
                 what="running on h1")
    child = h1.handles(w["local_id"])["child"]["pid"]
    h1.kill9()
    wait_for(lambda: fleet.work(plain)["state"] == "LOST", LEASE * 6, what="LOST")
    time.sleep(LEASE)  # well past the lease file's deadline
    os.kill(child, 0)  # not fenced: it runs on (raises if it is gone)
    assert Path(f"/proc/{child}/stat").read_text().split()[2] != "Z"


def test_a_daemon_back_between_its_fence_and_its_expiry_resumes_its_agent_for_free(
        fleet: Fleet, tmp_path: Path) -> None:
    """The narrow window: the monitor fenced at the lease file's deadline, the daemon is
    back before PostgreSQL's expiry (1/6 of the lease later), so its lease carries the
    placement over and the lineage resumes here, once: that revival is the fence's, not
    the agent's failure, so it spends no revival and starts the crash-loop window over."""
    lease = 24.0  # a window of 4 s between the fence point and the expiry
    slow = {"TETHER_FLEET_LEASE": str(lease)}
    h1 = fleet.add("h1", env=slow)
    h2 = fleet.add("h2")  # a live host that would revive it, were the lease expired
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    starts = tmp_path / "starts"
    agent = _place_stand_in(fleet, "h1", starts, "--max-revivals", "1")
    w = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent), 20,
                 what="running on h1")
    lid = w["local_id"]
    wait_for(lambda: fleet.agent_processes(agent) == [("h1", lid)], 10, what="its process")
    lease_file = h1.home / "fleet" / "lease"
    renewed = json.loads(lease_file.read_bytes())["deadline"]
    wait_for(lambda: json.loads(lease_file.read_bytes())["deadline"] != renewed, lease,
             what="a renewal")
    time.sleep(lease / 3 - 1)  # killed a second before the next one: fenced sooner
    h1.kill9()
    deadline = json.loads(lease_file.read_bytes())["deadline"]
    wait_for(lambda: not fleet.agent_processes(agent), lease, interval=0.01,
             what="the monitor fences its agent")
    fenced_at = time.monotonic()
    assert fenced_at >= deadline - 0.05, (fenced_at, deadline)
    h1.start(pool=0, env={**FAST, **slow}, args=["--fleet", fleet.url, "--host-name", "h1"])
    with h1.client() as c:
        rec = wait_for(lambda: (c.lineage_get(lid).status == "ACTIVE"
                                and c.lineage_get(lid).attempt == 2 and c.lineage_get(lid)),
                       20, what="the lineage resumed on h1")
    assert fleet.work(agent)["host"] == "h1" and fleet.work(agent)["generation"] == 1
    assert rec.revivals == 0 and rec.fenced_exits == 1, rec
    assert len(_recent_starts(h1.home, lid)) == 1  # the crash-loop window starts over
    wait_for(lambda: len(_starts(starts)) == 2, 10, what="the second attempt's start")
    assert [lineage for _, lineage in _starts(starts)] == [lid, lid]
    assert fleet.agent_processes(agent) == [("h1", lid)]
    assert not _local_starts(h2.home)  # h2 never started a copy
    # The budget is intact: with max_revivals 1, a real crash now is still revived.
    assert rec.exec is not None
    os.kill(h1.handles(rec.exec)["child"]["pid"], signal.SIGKILL)
    with h1.client() as c:
        rec = wait_for(lambda: (c.lineage_get(lid).attempt == 3
                                and c.lineage_get(lid).status == "ACTIVE"
                                and c.lineage_get(lid)), 20, what="revived after a crash")
    assert rec.revivals == 1 and rec.fenced_exits == 1
    assert fleet.work(agent)["host"] == "h1" and fleet.work(agent)["state"] == "RUNNING"


def _stall_past_the_fence_point(h1_pid: int, lease_file: Path, lease: float) -> float:
    """SIGSTOP the daemon ``h1_pid`` until 0.4 s past its lease file's deadline (its
    fence point), then SIGCONT it: it wakes before PostgreSQL's lease runs out (1/6 of
    the lease later), so it fences and at once takes a new lease carrying its rows.
    Stopped a second before a renewal was due, so the stall is short. Returns the
    deadline."""
    renewed = json.loads(lease_file.read_bytes())["deadline"]
    wait_for(lambda: json.loads(lease_file.read_bytes())["deadline"] != renewed, lease,
             what="a renewal")
    time.sleep(lease / 3 - 1)
    os.kill(h1_pid, signal.SIGSTOP)
    try:
        deadline = float(json.loads(lease_file.read_bytes())["deadline"])
        time.sleep(max(0.0, deadline + 0.4 - time.monotonic()))
    finally:
        os.kill(h1_pid, signal.SIGCONT)
    return deadline


def _fleet_journal(fleet: Fleet, work: int) -> list[dict[str, object]]:
    from tether.fleet import store as fs

    with fleet.db() as c:
        return [e for e in fs.journal(c) if e["work"] == work]


def test_a_daemon_stalled_past_its_fence_point_has_its_agents_revived_once(
        fleet: Fleet, tmp_path: Path) -> None:
    """Issue 22 #5, with the default 10 s lease: the host's daemon stalls (SIGSTOP) until
    just past its fence point. Waking, it fences (its agent withdrawn, REAPED) and takes a
    new lease while PostgreSQL's old one still runs, which carries the placement over.
    The placement is then revived once on the other host, never reported ENDED (it was:
    the agent was never revived anywhere)."""
    lease = 10.0
    h1 = fleet.add("h1", env={"TETHER_FLEET_LEASE": str(lease)})
    fleet.add("h2", env=BYSTANDER)
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    starts = tmp_path / "starts"
    agent = _place_stand_in(fleet, "h1", starts)
    w = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent), 20,
                 what="running on h1")
    lid = w["local_id"]
    wait_for(lambda: fleet.agent_processes(agent) == [("h1", lid)], 10, what="its process")
    _stall_past_the_fence_point(h1.pid, h1.home / "fleet" / "lease", lease)
    w2 = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                           and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                  lease * 2, what="the placement revived")
    assert w2["host"] == "h2", w2
    with h1.client() as c:
        rec = c.lineage_get(lid)
    assert rec.status == "REAPED" and "withdrawn" in (rec.reason or ""), rec
    wait_for(lambda: len(_starts(starts)) == 2, 10, what="the revived copy's start")
    time.sleep(2)  # h1's passes see the withdrawn copy again: nothing more happens
    assert [lineage for _, lineage in _starts(starts)] == [lid, w2["local_id"]]
    assert fleet.agent_processes(agent) == [("h2", w2["local_id"])]
    assert fleet.work(agent)["generation"] == 2 and fleet.work(agent)["state"] == "RUNNING"
    types = [e["type"] for e in _fleet_journal(fleet, agent)]
    assert types.count("work.revived") == 1 and "work.ended" not in types, types


def test_a_lone_host_stalled_past_its_fence_point_revives_its_agent_itself(
        fleet: Fleet, tmp_path: Path) -> None:
    """The same stall on a fleet of one host: no other host has room, so the host that
    withdrew the agent revives its placement itself, as the next generation, once."""
    lease = 10.0
    h1 = fleet.add("h1", env={"TETHER_FLEET_LEASE": str(lease)})
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    starts = tmp_path / "starts"
    agent = _place_stand_in(fleet, "h1", starts)
    w = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent), 20,
                 what="running on h1")
    lid = w["local_id"]
    wait_for(lambda: fleet.agent_processes(agent) == [("h1", lid)], 10, what="its process")
    _stall_past_the_fence_point(h1.pid, h1.home / "fleet" / "lease", lease)
    w2 = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                           and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                  lease * 2, what="the placement revived")
    assert w2["host"] == "h1" and w2["local_id"] != lid, w2
    wait_for(lambda: len(_starts(starts)) == 2, 10, what="the revived copy's start")
    time.sleep(2)
    assert [lineage for _, lineage in _starts(starts)] == [lid, w2["local_id"]]
    assert fleet.agent_processes(agent) == [("h1", w2["local_id"])]
    assert _local_starts(h1.home) == {f"fleet-{agent}-1": 1, f"fleet-{agent}-2": 1}
    types = [e["type"] for e in _fleet_journal(fleet, agent)]
    assert types.count("work.revived") == 1 and "work.ended" not in types, types
