"""``--fleet`` reaches the fleet or nothing (issue 23, items 1 and 12): a command that
takes it acts on every host's placements (kill, wait, rm, lineage ls/inspect, run -it);
one that does not refuses it (exit 2) rather than act on this machine's daemon. And the
fleet's views say what is known: a plain exec whose host's daemon died is UNREACHABLE
(it runs on under its monitor), `ps` has NAME and EXIT, stopped hosts are DOWN.

Real PostgreSQL (tests/pg.py), real daemons as hosts, the CLI as a subprocess."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import json
import sys

from tests.e2e.test_fleet import FAST, LEASE, SLEEPER, Fleet, fleet  # noqa: F401
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import TETHER, wait_for

pytestmark = fleet_marks

EXIT7 = [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(7)"]


def _one_host(fleet: Fleet) -> None:
    fleet.add("h1")
    wait_for(lambda: "h1" in fleet.hosts_rows() and fleet.hosts_rows()["h1"]["api"], 15,
             what="h1's lease")


def test_fleet_commands_act_on_placements_never_on_this_machines_daemon(
        fleet: Fleet) -> None:
    """What the newcomer did: `--fleet URL kill victim` cancelled a local exec named
    victim, `--fleet URL wait 4` waited for a local exec, `--fleet URL lineage ls` listed
    local lineages. h1's home is also the CLI's home here, so a command that ignored
    --fleet would act on h1's own daemon."""
    _one_host(fleet)
    h1 = fleet.hosts["h1"]
    with h1.client() as c:
        local = c.exec_start(SLEEPER, name="victim", cwd="/tmp")
        c.agent_start(SLEEPER, provider="generic", name="local-agent", cwd="/tmp",
                      crashed_after=3600, stale_after=3600)
    # kill: no placement is named victim; the local exec is untouched.
    r = fleet.cli("kill", "victim", check=False)
    assert r.returncode == 1 and b"no placement 'victim'" in r.stderr, r.stderr
    # wait: placement N's own status, not a local exec's by prefix.
    ident = fleet.place("--host", "h1", "--name", "seven", "--", *EXIT7)
    r = fleet.cli("wait", str(ident), check=False)
    assert (r.returncode, r.stdout) == (7, b"7\n"), r.stderr
    assert fleet.cli("wait", "seven", check=False).returncode == 7
    # lineage ls: the fleet's agents, not this host's local ones.
    agent = fleet.place("--host", "h1", "--agent", "generic", "--name", "placed-agent",
                        "--crashed-after", "3600", "--stale-after", "3600", "--", *SLEEPER)
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING", 20, what="agent running")
    ls = fleet.cli("lineage", "ls").stdout.decode()
    assert "placed-agent" in ls and "local-agent" not in ls, ls
    assert fleet.work(agent)["local_id"] in ls
    # Every other command refuses --fleet with the fix, and does nothing here.
    for args in (("sandbox", "ls"), ("status",), ("lineage", "finish", "x"),
                 ("daemon", "stop"), ("cost",), ("digest",), ("hook", "ls"), ("df",),
                 ("prune",), ("schedule", "ls"), ("reap",), ("cp", "a", "b"),
                 ("metrics",), ("budget",)):
        r = fleet.cli(*args, check=False)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        err = r.stderr.decode()
        assert "acts on this machine's daemon only" in err and "leave out --fleet" in err, err
    assert fleet.cli("sandbox", "--help").returncode == 0  # help is still help
    with h1.client() as c:
        assert c.exec_get(local.id).state == "RUNNING"
        assert c.status().state == "RUNNING"  # `daemon stop` was refused


def test_kill_wait_and_rm_a_placement_by_number_or_name(fleet: Fleet) -> None:
    _one_host(fleet)
    ident = fleet.place("--host", "h1", "--name", "victim", "--", *SLEEPER)
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 20, what="running")
    live = fleet.cli("rm", "victim", check=False)
    assert live.returncode == 1 and f"kill {ident}".encode() in live.stderr, live.stderr
    assert fleet.cli("kill", "victim").stdout == f"{ident}\n".encode()
    r = fleet.cli("wait", "victim", check=False)
    assert (r.returncode, r.stdout) == (143, b"143\n"), r.stderr  # 128 + SIGTERM
    w = fleet.work(ident)
    assert w["state"] == "ENDED" and w["exit_code"] == 143
    with fleet.hosts["h1"].client() as c:
        assert c.exec_get(w["local_id"]).state == "CANCELLED"
    ps = fleet.cli("ps", "-a").stdout.decode().splitlines()
    assert ps[0].split()[:6] == ["WORK", "NAME", "KIND", "HOST", "STATE", "EXIT"], ps[0]
    row = next(line.split() for line in ps if line.split()[0] == str(ident))
    assert row[1:6] == ["victim", "exec", "h1", "ENDED", "143"], row
    assert fleet.cli("rm", "victim").stdout == f"{ident}\n".encode()
    assert str(ident) not in [line.split()[0] for line in
                              fleet.cli("ps", "-a").stdout.decode().splitlines()]
    gone = fleet.cli("wait", str(ident), check=False)
    assert gone.returncode == 1 and f"no placement {ident}".encode() in gone.stderr
    # An agent placement: kill ends the lineage (stopped, not revived), inspect shows it.
    agent = fleet.place("--host", "h1", "--agent", "generic", "--name", "ag",
                        "--crashed-after", "3600", "--stale-after", "3600", "--", *SLEEPER)
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING", 20, what="agent running")
    shown = fleet.cli("lineage", "inspect", "ag").stdout.decode()
    assert shown.startswith(f"placement {agent}  RUNNING on h1, generation 1"), shown
    assert f"lineage   {fleet.work(agent)['local_id']} (ag)" in shown, shown
    assert "status    ACTIVE" in shown, shown
    doc = json.loads(fleet.cli("lineage", "inspect", "--json", str(agent)).stdout)
    assert doc["placement"]["id"] == agent and doc["lineage"]["status"] == "ACTIVE"
    fleet.cli("kill", str(agent))
    wait_for(lambda: fleet.work(agent)["state"] == "ENDED", 20, what="agent ended")
    with fleet.hosts["h1"].client() as c:
        rec = c.lineage_get(fleet.work(agent)["local_id"])
    assert rec.status == "FINISHED" and rec.exit_reason == "killed", rec
    assert fleet.work(agent)["generation"] == 1  # never revived


def test_an_exec_whose_host_daemon_died_is_unreachable_not_lost_and_stops_hosts_down(
        fleet: Fleet) -> None:
    """h1's daemon is SIGKILLed, its monitors (and so its exec) live on; h2's sweep marks
    the exec LOST in the database. The views say UNREACHABLE, and RUNNING again once h1
    is back; a kill asked for meanwhile is carried out then."""
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    ident = fleet.place("--host", "h1", "--name", "lives-on", "--", *SLEEPER)
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 20, what="running on h1")
    h1 = fleet.hosts["h1"]
    h1.kill9()
    wait_for(lambda: fleet.work(ident)["state"] == "LOST", LEASE * 6, what="swept")
    ps = fleet.cli("ps").stdout.decode()  # still listed without -a
    row = next(line.split() for line in ps.splitlines() if line.split()[0] == str(ident))
    assert row[1:5] == ["lives-on", "exec", "h1", "UNREACHABLE"], ps
    hosts = {line.split()[0]: line.split() for line in
             fleet.cli("hosts").stdout.decode().splitlines()[1:]}
    assert hosts["h1"][1] == "DEAD" and hosts["h2"][1] == "ACTIVE", hosts
    said = fleet.cli("kill", "lives-on")
    assert b"does not answer; it stops it when it is back" in said.stderr, said.stderr
    h1.start(pool=0, args=["--fleet", fleet.url, "--host-name", "h1", "--capacity", "4"])
    w = wait_for(lambda: fleet.work(ident)["state"] == "ENDED" and fleet.work(ident),
                 LEASE * 6, what="reclaimed by h1, then killed")
    assert w["exit_code"] == 143, w
    journal = fleet.cli("events").stdout.decode()
    assert "work.reclaimed" in journal and "work.kill" in journal, journal
    # A graceful stop of every host: none is shown ACTIVE with an expired lease.
    for d in fleet.hosts.values():
        d.term()
    wait_for(lambda: not any(r["live"] for r in fleet.hosts_rows().values()), LEASE * 3,
             what="leases expired")
    lines = fleet.cli("hosts").stdout.decode().splitlines()[1:]
    assert {line.split()[1] for line in lines} == {"DOWN"}, lines
    assert all(" expired " in line and " ago " in line for line in lines), lines


def test_run_it_attaches_to_the_placement(fleet: Fleet) -> None:
    import pexpect

    _one_host(fleet)
    h1 = fleet.hosts["h1"]
    echoer = [sys.executable, "-c", "import sys\nfor line in sys.stdin:\n"
              " print('echo:' + line.strip().upper(), flush=True)"]
    child = pexpect.spawn(TETHER[0], [*TETHER[1:], "--home", str(h1.home), "--fleet",
                                      fleet.url, "run", "--host", "h1", "-it", "--", *echoer],
                          env=h1.env, dimensions=(24, 80), timeout=30)
    child.expect("placed on h1")
    child.send("hello\r")
    child.expect("echo:HELLO")
    child.sendcontrol("d")
    child.expect("exited with code 0")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
