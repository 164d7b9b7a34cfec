"""Fleet mode against a real PostgreSQL (a throw-away cluster, tests/pg.py) and three
real daemons in separate homes acting as three hosts; hosts die by SIGKILL."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, kill_strays, new_home, remove_home, wait_for
from tests.pg import PgCluster, bindir

# Skipped without PostgreSQL, unless TETHER_REQUIRE_POSTGRES=1 (CI, after provisioning).
pytestmark = [pytest.mark.xdist_group("fleet"),
              pytest.mark.skipif(bindir() is None
                                 and os.environ.get("TETHER_REQUIRE_POSTGRES") != "1",
                                 reason="PostgreSQL is not installed (apt-get install "
                                 "postgresql)")]

LEASE = 3.0
FAST = {"TETHER_FLEET_LEASE": str(LEASE), "TETHER_FLEET_INTERVAL": "0.3",
        "TETHER_AGENT_TICK": "0.3"}
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
_db = itertools.count()


class Fleet:
    """One fleet database and the hosts (daemons) a test starts on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.hosts: dict[str, DaemonProc] = {}

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        d = next(iter(self.hosts.values()), None) or DaemonProc(Path("/nonexistent"))
        r = d.cli("--fleet", self.url, *args)
        if check and r.returncode != 0:
            raise AssertionError(f"tether {' '.join(args)}: {r.returncode}\n"
                                 f"{r.stderr.decode()}")
        return r

    def add(self, name: str, capacity: int = 4, env: dict[str, str] | None = None,
            labels: tuple[str, ...] = ()) -> DaemonProc:
        d = DaemonProc(new_home(), env={**FAST, **(env or {})})
        self.hosts[name] = d
        d.start(pool=0, env=env, args=["--fleet", self.url, "--host-name", name,
                                       "--capacity", str(capacity),
                                       *(x for lab in labels for x in ("--label", lab))])
        return d

    def db(self) -> Any:
        from tether.fleet import store as fs

        return fs.connect(self.url)

    def hosts_rows(self) -> dict[str, dict[str, Any]]:
        from tether.fleet import store as fs

        with self.db() as c:
            return {r["name"]: r for r in fs.hosts(c)}

    def work(self, ident: int) -> dict[str, Any]:
        from tether.fleet import store as fs

        with self.db() as c:
            row = fs.get_work(c, ident)
        assert row is not None
        return row

    def place(self, *args: str) -> int:
        out = self.cli("run", *args).stdout.decode().split()
        return int(out[0])

    def live_copies(self, ident: int) -> list[tuple[str, str]]:
        """(host, lineage) of every local lineage of placement ``ident`` whose exec runs
        (or is starting), on every host still up: the at-most-one-host check."""
        return self.all_live_copies().get(ident, [])

    def all_live_copies(self, stale: frozenset[str] = frozenset(),
                        ) -> dict[int, list[tuple[str, str]]]:
        """:meth:`live_copies` of every placement, each host's database read once.
        ``stale``: hosts whose daemon is stopped (SIGSTOP), or woken but not yet past its
        lease loop's first pass: their records say what they were when it stopped, like
        a dead daemon's (their processes are still checked, by ``agent_processes``)."""
        found: dict[int, list[tuple[str, str]]] = {}
        for name, d in self.hosts.items():
            if d.proc is None or d.proc.poll() is not None or name in stale:
                continue
            db = sqlite3.connect(f"file:{d.home / 'tether.db'}?mode=ro", uri=True)
            try:
                rows = db.execute(
                    "SELECT l.id, json_extract(l.record, '$.request_key') FROM lineages l "
                    "JOIN execs x ON x.id = json_extract(l.record, '$.exec_id') WHERE "
                    "json_extract(l.record, '$.request_key') LIKE 'fleet-%' AND l.status "
                    "IN ('ACTIVE', 'REVIVING') AND x.state IN ('PENDING', 'RUNNING')",
                    ).fetchall()
            finally:
                db.close()
            for lid, key in rows:
                found.setdefault(_placement(key), []).append((name, lid))
        return found

    def agent_processes(self, ident: int) -> list[tuple[str, str]]:
        """(host, lineage) of every local lineage of placement ``ident`` that has a live
        process on this machine, on every host, its daemon up or not (its monitors and
        agents may outlive it): the at-most-one-copy check at the level of processes."""
        return self.all_agent_processes().get(ident, [])

    def all_agent_processes(self) -> dict[int, list[tuple[str, str]]]:
        """:meth:`agent_processes` of every placement, ``/proc`` scanned once (the long
        chaos run checks hundreds of placements many times a second)."""
        mine: dict[tuple[str, str], tuple[str, int]] = {}
        for name, d in self.hosts.items():
            db = sqlite3.connect(f"file:{d.home / 'tether.db'}?mode=ro", uri=True)
            try:
                rows = db.execute("SELECT id, json_extract(record, '$.request_key') FROM "
                                  "lineages WHERE json_extract(record, '$.request_key') "
                                  "LIKE 'fleet-%'").fetchall()
            finally:
                db.close()
            home = os.path.realpath(d.home)
            mine.update({(home, lid): (name, _placement(key)) for lid, key in rows})
        found: dict[int, set[tuple[str, str]]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue  # gone, or not ours
            var = dict(v.decode(errors="replace").split("=", 1) for v in env if b"=" in v)
            hit = mine.get((os.path.realpath(var.get("TETHER_HOME", "/")),
                            var.get("TETHER_LINEAGE", "")))
            if hit is not None:
                found.setdefault(hit[1], set()).add((hit[0], var["TETHER_LINEAGE"]))
        return {ident: sorted(procs) for ident, procs in found.items()}

    def cleanup(self) -> None:
        for d in self.hosts.values():
            d.cleanup()
            remove_home(d.home)


def _placement(request_key: str) -> int:
    """The placement id of a local request key ``fleet-<id>-<generation>``."""
    return int(request_key.split("-")[1])


@pytest.fixture
def fleet(pg: PgCluster) -> Iterator[Fleet]:
    url = pg.new_db(f"fleet_{os.getpid()}_{next(_db)}")
    r = subprocess.run([sys.executable, "-m", "tether.cli.main", "fleet", "init", url],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    f = Fleet(url)
    yield f
    f.cleanup()


def test_fleet_init_is_idempotent_and_hosts_needs_it(pg: PgCluster) -> None:
    url = pg.new_db(f"init_{os.getpid()}")
    tether = [sys.executable, "-m", "tether.cli.main"]
    r = subprocess.run([*tether, "--fleet", url, "hosts"], capture_output=True, text=True)
    assert r.returncode == 1 and "not initialised" in r.stderr and "fleet init" in r.stderr
    first = subprocess.run([*tether, "fleet", "init", url], capture_output=True, text=True)
    assert first.returncode == 0 and "applied 1" in first.stdout, first.stderr
    again = subprocess.run([*tether, "fleet", "init", url], capture_output=True, text=True)
    assert again.returncode == 0 and "up to date" in again.stdout
    bad = subprocess.run([*tether, "fleet", "init", "postgresql://x@/nope?host=/nonexistent"],
                         capture_output=True, text=True)
    assert bad.returncode == 125 and "cannot reach the fleet database" in bad.stderr


def test_three_hosts_register_and_run_host_auto_places_by_capacity(fleet: Fleet) -> None:
    for name, cap in (("h1", 1), ("h2", 2), ("h3", 3)):
        fleet.add(name, cap)
    rows = wait_for(lambda: len(fleet.hosts_rows()) == 3 and fleet.hosts_rows(), 15,
                    what="three hosts")
    assert all(r["live"] and r["state"] == "ACTIVE" for r in rows.values())
    assert "h2" in fleet.cli("hosts").stdout.decode()
    ids = [fleet.place("--host", "auto", "--", *SLEEPER) for _ in range(6)]
    placed = {i: fleet.work(i)["host"] for i in ids}
    assert sorted(placed.values()) == ["h1", "h2", "h2", "h3", "h3", "h3"]
    full = fleet.cli("run", "--host", "auto", "--", *SLEEPER, check=False)
    assert full.returncode == 1 and "free capacity" in full.stderr.decode()
    # Each host really runs what was placed on it.
    wait_for(lambda: all(fleet.work(i)["state"] == "RUNNING" for i in ids), 20,
             what="all RUNNING")
    for i, host in placed.items():
        with fleet.hosts[host].client() as c:
            assert c.exec_get(fleet.work(i)["local_id"]).state == "RUNNING"
    ps = fleet.cli("ps").stdout.decode()
    assert all(f"{i} " in ps for i in ids) and "h3" in ps
    named = fleet.cli("run", "--host", "h9", "--", "true", check=False)
    assert named.returncode == 1 and "no host named 'h9'" in named.stderr.decode()


def _agent(fleet: Fleet, host: str, *more: str) -> int:
    return fleet.place("--host", host, "--agent", "generic", "--crashed-after", "3600",
                       "--stale-after", "3600", *more, "--", *SLEEPER)


def test_a_dead_host_agents_are_revived_once_elsewhere_and_its_execs_lost(
        fleet: Fleet) -> None:
    for name in ("h1", "h2", "h3"):
        fleet.add(name)
    wait_for(lambda: len(fleet.hosts_rows()) == 3, 15, what="three hosts")
    agent = _agent(fleet, "h1")
    plain = fleet.place("--host", "h1", "--", *SLEEPER)
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING"
             and fleet.work(plain)["state"] == "RUNNING", 20, what="running on h1")
    h1 = fleet.hosts["h1"]
    h1.kill9()
    kill_strays(h1.home, wait=5)  # the host died: its monitors and agents with it
    w = wait_for(lambda: (fleet.work(agent)["generation"] == 2
                          and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent)),
                 LEASE * 6, what="the agent revived")
    assert w["host"] in ("h2", "h3")
    assert fleet.work(plain)["state"] == "LOST"
    assert "h1 lost its lease" in fleet.work(plain)["reason"]
    copies = fleet.live_copies(agent)
    assert copies == [(w["host"], w["local_id"])]
    assert fleet.hosts_rows()["h1"]["state"] == "DEAD"


def test_a_partitioned_host_fences_itself_and_does_not_resume(fleet: Fleet) -> None:
    h1 = fleet.add("h1", env={"TETHER_FAULT": "fleet.partition"})
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    agent = _agent(fleet, "h1")
    first = wait_for(lambda: fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                     20, what="running on h1")
    token = fleet.hosts_rows()["h1"]["token"]
    (h1.home / "fleet.partition").touch()  # h1 runs on, but reaches no PostgreSQL
    with h1.client() as c:
        wait_for(lambda: c.lineage_get(first["local_id"]).status == "REAPED", LEASE * 4,
                 what="h1 withdraws its agent")
    w = wait_for(lambda: fleet.work(agent)["generation"] == 2
                 and fleet.work(agent)["state"] == "RUNNING" and fleet.work(agent),
                 LEASE * 6, what="revived on h2")
    assert w["host"] == "h2"
    (h1.home / "fleet.partition").unlink()  # the partition heals
    wait_for(lambda: fleet.hosts_rows()["h1"]["live"]
             and fleet.hosts_rows()["h1"]["token"] > token, LEASE * 4, what="h1 back")
    assert fleet.live_copies(agent) == [("h2", w["local_id"])]
    assert fleet.work(agent)["host"] == "h2"
    assert h1.proc is not None and h1.proc.poll() is None  # it kept running throughout


def test_postgresql_restarted_mid_run_hosts_carry_on(fleet: Fleet, pg: PgCluster) -> None:
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    before = fleet.place("--host", "auto", "--", *SLEEPER)
    wait_for(lambda: fleet.work(before)["state"] == "RUNNING", 20, what="running")
    pg.stop("immediate")  # as if killed: recovery from its WAL at the next start
    try:
        down = fleet.cli("hosts", check=False)
        assert down.returncode == 125 and "cannot reach" in down.stderr.decode()
    finally:
        pg.start()
    after = fleet.place("--host", "auto", "--", "true")
    wait_for(lambda: fleet.work(after)["state"] == "ENDED", 20, what="new work ran")
    assert fleet.work(after)["exit_code"] == 0
    assert fleet.work(before)["state"] == "RUNNING"  # acknowledged before: not lost
    assert all(r["live"] for r in fleet.hosts_rows().values())


def _local_starts(home: Path) -> dict[str, int]:
    """How many local execs and lineages each fleet request key started on a host."""
    db = sqlite3.connect(f"file:{home / 'tether.db'}?mode=ro", uri=True)
    try:
        keys = [r[0] for r in db.execute(
            "SELECT request_key FROM execs WHERE request_key LIKE 'fleet-%' UNION ALL "
            "SELECT json_extract(record, '$.request_key') FROM lineages "
            "WHERE json_extract(record, '$.request_key') LIKE 'fleet-%'")]
    finally:
        db.close()
    counts: dict[str, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return counts


def _lease_deadline(d: DaemonProc) -> float:
    """The deadline in a host's lease file (0 when fenced, or before its first lease)."""
    try:
        return float(json.loads((d.home / "fleet" / "lease").read_bytes())["deadline"])
    except (OSError, ValueError, KeyError):
        return 0.0


CHAOS_ROUNDS = int(os.environ.get("TETHER_FLEET_CHAOS_ROUNDS", "8"))


# A sanity bound (it replaces `--timeout`): eight rounds take 1-3 minutes on a loaded machine.
@pytest.mark.timeout(300 + 30 * CHAOS_ROUNDS)
def test_randomised_host_kills_keep_every_lineage_on_one_host(fleet: Fleet) -> None:
    """Hosts die by SIGKILL or stall by SIGSTOP at random, in four ways that every four
    rounds take in a random order: the host dies (daemon, monitors and agents), back at
    once or after its lease; the daemon alone dies and comes back at once (its lease
    carries its agents over); the daemon alone dies and stays down until another host
    has revived the agents it ran (their monitors must have fenced them: the round a
    missing fence fails); the daemon of a host running an agent stalls (SIGSTOP) until a
    random moment around its fence point — before it, between it and PostgreSQL's expiry
    (fenced, its new lease carries the rows of the agents it withdrew: they must be
    revived, issue 22 #5), or after the expiry (revived elsewhere meanwhile) — then
    goes on (SIGCONT). The checker: every lineage on at most one host at a time (its
    records on live daemons that are not stalled, and its live processes on every host,
    dead or stalled daemon or not), every acknowledged placement started exactly once
    per generation, every agent placement RUNNING or PLACED at the end (none ended: the
    stand-in sleeps for ten minutes, so only a lost revival would end one), a journal
    without gap or duplicate. Eight rounds (two of each kind) in `make test`; `make
    chaos` runs 200 (TETHER_FLEET_CHAOS_ROUNDS, TETHER_FLEET_CHAOS_SEED to replay a
    failure)."""
    import random
    import signal
    import time

    rounds = CHAOS_ROUNDS
    seed = int(os.environ.get("TETHER_FLEET_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    names = ["h1", "h2", "h3"]
    for name in names:
        fleet.add(name, capacity=1000)
    wait_for(lambda: len(fleet.hosts_rows()) == 3, 15, what="three hosts")
    agents: list[int] = []
    acked: list[int] = []

    stale: set[str] = set()  # a stalled daemon's host: its records are not checked

    def at_most_one_copy() -> dict[int, list[tuple[str, str]]]:
        """Check every placement once; its live processes, for the caller to look at."""
        copies = fleet.all_live_copies(frozenset(stale))
        procs = fleet.all_agent_processes()
        for a in agents:
            assert len(copies.get(a, [])) <= 1, f"seed {seed}: placement {a} runs on {copies[a]}"
            assert len(procs.get(a, [])) <= 1, (
                f"seed {seed}: placement {a} has processes on {procs[a]}")
        return procs

    def revived_elsewhere(ids: list[int], victim: str) -> bool:
        """Placements ``ids`` run on other hosts than ``victim``, each one's process there
        its only one (checked in the same sample that sees them)."""
        procs = at_most_one_copy()
        for a in ids:
            w = fleet.work(a)
            if not (w["state"] == "RUNNING" and w["host"] != victim
                    and [h for h, _ in procs.get(a, [])] == [w["host"]]):
                return False
        return True

    modes: list[str] = []
    for _ in range(rounds):
        if not modes:
            modes = rng.sample(["host", "daemon", "daemon-down", "stall"], 4)
        mode = modes.pop()
        agents.append(_agent(fleet, "auto"))
        acked += [agents[-1], fleet.place("--host", "auto", "--", *SLEEPER)]
        at_most_one_copy()
        if mode in ("daemon-down", "stall"):  # the host of a running agent: one to revive
            wait_for(lambda: fleet.work(agents[-1])["state"] == "RUNNING", 20,
                     what=f"placement {agents[-1]} running (seed {seed})")
            name = rng.choice(sorted({fleet.work(a)["host"] for a in agents
                                      if fleet.work(a)["state"] == "RUNNING"}))
        else:
            name = rng.choice(names)
        victim = fleet.hosts[name]
        on_victim = [a for a in agents if fleet.work(a)["host"] == name
                     and fleet.work(a)["state"] == "RUNNING"]
        if mode == "stall":
            stale.add(name)
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                before = _lease_deadline(victim)
                until = before + rng.uniform(-0.5, LEASE / 6 + 1.0)  # around the fence point
                while time.monotonic() < until:
                    at_most_one_copy()
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            # Its lease loop's first pass renews, or fences (withdrawing its agents) and
            # takes a new lease: either way a later deadline, and records to check again.
            wait_for(lambda v=victim, b=before: _lease_deadline(v) > b, LEASE * 4,
                     what=f"{name} awake after its stall (seed {seed})")
            stale.discard(name)
            at_most_one_copy()
            continue
        victim.kill9()
        if mode == "host":
            kill_strays(victim.home, wait=5)  # the host died: its monitors and agents too
            if rng.random() < 0.5:
                t_end = time.monotonic() + LEASE * (1 + rng.random())
                while time.monotonic() < t_end:
                    at_most_one_copy()
        elif mode == "daemon-down":  # its monitors and agents live on, unsupervised
            wait_for(lambda v=name, ov=on_victim: revived_elsewhere(ov, v),
                     LEASE * 8, interval=0.05,
                     what=f"{name}'s agents {on_victim} revived elsewhere (seed {seed})")
        at_most_one_copy()
        victim.start(pool=0, env=FAST, args=["--fleet", fleet.url, "--host-name", name,
                                             "--capacity", "1000"])
        at_most_one_copy()

    def settled() -> bool:
        rows = {i: fleet.work(i) for i in acked}
        copies, procs = fleet.all_live_copies(), fleet.all_agent_processes()
        return all(r["state"] != "PLACED" for r in rows.values()) and all(
            len(copies.get(a, [])) == 1 and procs.get(a) == copies[a]
            for a in agents if rows[a]["state"] == "RUNNING")
    wait_for(settled, LEASE * 8, interval=0.2, what=f"the fleet to settle (seed {seed})")
    at_most_one_copy()
    ended = {a: (w["state"], w["reason"]) for a in agents
             if (w := fleet.work(a))["state"] not in ("RUNNING", "PLACED")}
    assert not ended, f"seed {seed}: agent placements ended, never revived: {ended}"
    starts: dict[str, int] = {}
    for d in fleet.hosts.values():
        for k, n in _local_starts(d.home).items():
            starts[k] = starts.get(k, 0) + n
    dup = {k: n for k, n in starts.items() if n > 1}
    assert not dup, f"seed {seed}: started more than once: {dup}"
    for i in acked:
        w = fleet.work(i)
        assert f"fleet-{i}-{w['generation']}" in starts or w["state"] in ("LOST", "REAPED"), w
    from tether.fleet import store as fs

    with fleet.db() as c:
        journal = fs.journal(c)
    assert [e["gseq"] for e in journal] == list(range(1, len(journal) + 1))
    placed = [e["work"] for e in journal if e["type"] == "work.placed"]
    assert sorted(placed) == sorted(acked)


def test_a_crash_between_the_local_start_and_running_starts_once(fleet: Fleet) -> None:
    slow = {"TETHER_FLEET_LEASE": "15"}  # the restart comes back within the lease
    h1 = fleet.add("h1", env={**slow, "TETHER_FAULT": "fleet.after_start"})
    wait_for(lambda: len(fleet.hosts_rows()) == 1, 15, what="h1")
    ident = fleet.place("--host", "h1", "--", *SLEEPER)
    assert h1.proc is not None
    h1.proc.wait(20)  # the fault point killed it after the local start
    assert fleet.work(ident)["state"] == "PLACED"
    h1.start(pool=0, env={**FAST, **slow}, args=["--fleet", fleet.url, "--host-name", "h1"])
    w = wait_for(lambda: fleet.work(ident)["state"] == "RUNNING" and fleet.work(ident), 20,
                 what="RUNNING after the restart")
    assert _local_starts(h1.home) == {f"fleet-{ident}-1": 1}
    with h1.client() as c:
        assert c.exec_get(w["local_id"]).state == "RUNNING"


def test_drain_stops_new_placements_and_keeps_what_runs(fleet: Fleet) -> None:
    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    first = fleet.place("--host", "h1", "--", *SLEEPER)
    assert "h1 draining" in fleet.cli("drain", "h1").stdout.decode()
    placed = [fleet.work(fleet.place("--host", "auto", "--", *SLEEPER))["host"]
              for _ in range(3)]
    assert placed == ["h2"] * 3
    refused = fleet.cli("run", "--host", "h1", "--", "true", check=False)
    assert refused.returncode == 1 and "DRAINING" in refused.stderr.decode()
    wait_for(lambda: fleet.work(first)["state"] == "RUNNING", 20, what="h1 keeps its work")
    assert fleet.hosts_rows()["h1"]["state"] == "DRAINING"
    unknown = fleet.cli("drain", "nope", check=False)
    assert unknown.returncode == 1 and "no host named 'nope'" in unknown.stderr.decode()


def test_host_labels_steer_placement(fleet: Fleet) -> None:
    fleet.add("cpu1")
    fleet.add("gpu1", labels=("gpu=1", "zone=a"))
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    assert fleet.hosts_rows()["gpu1"]["labels"] == {"gpu": "1", "zone": "a"}
    for _ in range(3):
        ident = fleet.place("--host", "auto", "--host-label", "gpu=1", "--", "true")
        assert fleet.work(ident)["host"] == "gpu1"
    none = fleet.cli("run", "--host-label", "tpu=1", "--", "true", check=False)
    assert none.returncode == 1 and "labels" in none.stderr.decode()


def test_a_host_refuses_an_uninitialised_fleet_but_starts_without_postgresql(
        pg: PgCluster) -> None:
    raw = pg.new_db(f"raw_{os.getpid()}")
    d = DaemonProc(new_home(), env=FAST)
    try:
        d.start(wait=False, pool=0, args=["--fleet", raw, "--host-name", "h1"])
        assert d.proc is not None and d.proc.wait(20) == 1
        assert "tether fleet init URL" in d.log_text()
        gone = "postgresql://tether@/nope?host=/nonexistent"
        d.start(pool=0, args=["--fleet", gone, "--host-name", "h1"])  # serves anyway
        with d.client() as c:
            assert c.exec_start(["true"]).id
    finally:
        d.cleanup()
        remove_home(d.home)


def test_postgresql_down_longer_than_the_lease_fences_and_the_agent_runs_once_after(
        fleet: Fleet, pg: PgCluster) -> None:
    import time

    fleet.add("h1")
    fleet.add("h2")
    wait_for(lambda: len(fleet.hosts_rows()) == 2, 15, what="two hosts")
    agent = _agent(fleet, "h1")
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING", 20, what="running")
    pg.stop("immediate")
    try:
        time.sleep(LEASE * 2)  # every host fences itself: its agents are withdrawn
    finally:
        pg.start()
    w = wait_for(lambda: (fleet.work(agent)["state"] == "RUNNING"
                          and len(fleet.live_copies(agent)) == 1 and fleet.work(agent)),
                 LEASE * 8, interval=0.2, what="the agent running again, once")
    assert w["generation"] == 2
    assert fleet.live_copies(agent) == [(w["host"], w["local_id"])]
    for d in fleet.hosts.values():
        assert d.proc is not None and d.proc.poll() is None  # hosts carried on
