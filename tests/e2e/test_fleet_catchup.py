"""A host cut off from PostgreSQL (the database down, or the host partitioned) catches
up when it returns: its plain execs keep their real results, and what its local
journal recorded about fleet work reaches the fleet journal once, in local order."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_fleet import FAST, LEASE, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import wait_for
from tests.pg import PgCluster

pytestmark = fleet_marks


def _gated(gate: Path, code: int) -> list[str]:
    """A plain command that runs until ``gate`` exists, then exits ``code``."""
    return ["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done; exit {code}"]


def _journal(fleet: Fleet) -> list[dict[str, Any]]:
    from tether.fleet import store as fs

    with fleet.db() as c:
        return fs.journal(c)


def _relevant_local(home: Path) -> list[tuple[int, str, float]]:
    """(gseq, type, time) of the host's local events the relay must carry: every
    ``fleet.*`` event and the end of each exec started for a placement."""
    db = sqlite3.connect(f"file:{home / 'tether.db'}?mode=ro", uri=True)
    try:
        fleet_execs = {r[0] for r in db.execute(
            "SELECT id FROM execs WHERE request_key LIKE 'fleet-%'")}
        out = []
        for gseq, body in db.execute("SELECT gseq, body FROM events ORDER BY gseq"):
            ev = json.loads(body)
            if ev["type"].startswith("fleet.") or (
                    ev["type"] == "exec.state" and ev["exec"] in fleet_execs
                    and ev["state"] in ("FINISHED", "FAILED", "CANCELLED")):
                out.append((gseq, ev["type"], ev["time"]))
        return out
    finally:
        db.close()


def _relayed(fleet: Fleet, host: str) -> list[tuple[int, str, float]]:
    return [(e["local_gseq"], e["type"], e["local_at"]) for e in _journal(fleet)
            if e["host"] == host and e["local_gseq"] is not None]


def _caught_up(fleet: Fleet, host: str) -> bool:
    local = [g for g, _, _ in _relevant_local(fleet.hosts[host].home)]
    return [g for g, _, _ in _relayed(fleet, host)] == local


def _check_journal(fleet: Fleet, host: str) -> None:
    """Gap-free fleet gseq; every relevant local event of ``host`` relayed exactly once,
    in local order, with its local type and time."""
    journal = _journal(fleet)
    assert [e["gseq"] for e in journal] == list(range(1, len(journal) + 1))
    local, relayed = _relevant_local(fleet.hosts[host].home), _relayed(fleet, host)
    assert [(g, t) for g, t, _ in relayed] == [(g, t) for g, t, _ in local]
    assert all(abs(a - b) < 1e-3 for (_, _, a), (_, _, b) in zip(relayed, local, strict=True))


def test_postgresql_down_longer_than_the_lease_keeps_exec_results(
        fleet: Fleet, pg: PgCluster, tmp_path: Path) -> None:
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    gate1, gate2 = tmp_path / "one", tmp_path / "two"
    first = fleet.place("--host", "h1", "--", *_gated(gate1, 7))
    second = fleet.place("--host", "h1", "--", *_gated(gate2, 5))
    wait_for(lambda: all(fleet.work(i)["state"] == "RUNNING" for i in (first, second)), 20,
             what="both running on h1")
    token = fleet.hosts_rows()["h1"]["token"]
    pg.stop("immediate")
    try:
        time.sleep(LEASE * 0.5)
        gate1.touch()  # the first ends while PostgreSQL is away
        time.sleep(LEASE * 1.5)  # longer than the lease: every host fences itself
    finally:
        pg.start()
    w = wait_for(lambda: fleet.work(first)["state"] != "RUNNING" and fleet.work(first),
                 LEASE * 8, interval=0.2, what="the first settled")
    assert (w["state"], w["exit_code"]) == ("ENDED", 7), w
    # The sweep would have run by now (one lease after PostgreSQL came back).
    time.sleep(LEASE * 1.5)
    w2 = fleet.work(second)
    assert (w2["state"], w2["host"]) == ("RUNNING", "h1"), w2
    assert w2["token"] == fleet.hosts_rows()["h1"]["token"] > token
    gate2.touch()
    w2 = wait_for(lambda: fleet.work(second)["state"] == "ENDED" and fleet.work(second),
                  20, what="the second ended")
    assert w2["exit_code"] == 5
    journal = _journal(fleet)
    assert not [e for e in journal if e["type"] == "work.lost"]
    wait_for(lambda: _caught_up(fleet, "h1"), 20, what="h1's journal relayed")
    _check_journal(fleet, "h1")
    fenced = [e for e in journal if e["type"] == "fleet.fenced" and e["host"] == "h1"]
    assert len(fenced) == 1 and fenced[0]["data"]["token"] == token
    assert "fenced" in fleet.cli("events").stdout.decode()


def test_a_partitioned_host_reports_a_swept_exec_late(fleet: Fleet, tmp_path: Path) -> None:
    h1 = fleet.add("h1", env={"TETHER_FAULT": "fleet.partition"})
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    gate = tmp_path / "gate"
    ident = fleet.place("--host", "h1", "--", *_gated(gate, 3))
    w = wait_for(lambda: fleet.work(ident)["state"] == "RUNNING" and fleet.work(ident), 20,
                 what="running on h1")
    (h1.home / "fleet.partition").touch()
    lost = wait_for(lambda: fleet.work(ident)["state"] == "LOST" and fleet.work(ident),
                    LEASE * 6, interval=0.2, what="swept LOST by h2")
    assert "h1 lost its lease" in lost["reason"]
    gate.touch()  # it ran on, and ends with a real code while h1 is cut off
    with h1.client() as c:
        wait_for(lambda: c.exec_get(w["local_id"]).exit_code == 3, 10, what="exit 3")
    (h1.home / "fleet.partition").unlink()
    done = wait_for(lambda: fleet.work(ident)["state"] == "ENDED" and fleet.work(ident),
                    LEASE * 6, interval=0.2, what="reported late")
    assert done["exit_code"] == 3 and "reported late by host h1" in done["reason"]
    assert done["local_id"] == w["local_id"]
    ended = [e for e in _journal(fleet) if e["work"] == ident and e["type"] == "work.ended"]
    assert len(ended) == 1 and ended[0]["data"]["late"] is True
    wait_for(lambda: _caught_up(fleet, "h1"), 20, what="h1's journal relayed")
    _check_journal(fleet, "h1")


def test_a_host_killed_between_relay_batches_relays_each_event_once(
        fleet: Fleet, tmp_path: Path) -> None:
    env = {"TETHER_FLEET_RELAY_BATCH": "2",
           "TETHER_FAULT": "fleet.partition,fleet.after_relay#2"}
    h1 = fleet.add("h1", capacity=8, env=env)
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    gate = tmp_path / "gate"
    ids = [fleet.place("--host", "h1", "--", *_gated(gate, 4)) for _ in range(6)]
    wait_for(lambda: all(fleet.work(i)["state"] == "RUNNING" for i in ids), 20,
             what="all running")
    (h1.home / "fleet.partition").touch()  # a short cut: the six ends pile up locally
    gate.touch()
    wait_for(lambda: sum(t == "exec.state" for _, t, _ in _relevant_local(h1.home)) == 6,
             LEASE / 2, what="six local ends")
    (h1.home / "fleet.partition").unlink()
    assert h1.proc is not None
    h1.proc.wait(30)  # the fault point killed it after its second batch committed
    relayed = _relayed(fleet, "h1")
    assert relayed and len(_relevant_local(h1.home)) > len(relayed)  # some left to relay
    h1.start(pool=0, env={**FAST, "TETHER_FLEET_RELAY_BATCH": "2"},
             args=["--fleet", fleet.url, "--host-name", "h1", "--capacity", "8"])
    wait_for(lambda: all(fleet.work(i)["state"] == "ENDED" for i in ids), 30,
             what="every exec ENDED")
    assert all(fleet.work(i)["exit_code"] == 4 for i in ids)
    wait_for(lambda: _caught_up(fleet, "h1"), 20, what="h1's journal relayed")
    _check_journal(fleet, "h1")
