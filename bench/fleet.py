"""Fleet mode on a real PostgreSQL (a throw-away cluster, ``tests/pg.py``) with real
daemons in separate homes as hosts.

(1) placement latency: ``fleet.store.place`` on ``auto`` → the row RUNNING on its host,
beside a local ``exec.start`` → RUNNING on one daemon, same run; (2) failover: SIGKILL a
host's daemon and monitors, time until its agent RUNNING on another host (lease period
stated); (3) fleet ``ps`` over 3 hosts x 1,000 placements, the CLI and the query; (4)
PostgreSQL commits per second per idle host (``pg_stat_database.xact_commit``); (5)
``tether --fleet URL logs WORK`` through the owning host's API beside a local ``logs``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import Any

from bench.harness import BenchResult, Options, Row, percentile
from tests.harness import TETHER, DaemonProc, kill_strays, new_home, remove_home, wait_for
from tests.pg import PgCluster

LEASE = 3.0
ENV = {"TETHER_FLEET_LEASE": str(LEASE), "TETHER_FLEET_INTERVAL": "1.0",
       "TETHER_DEFAULT_RUNTIME": "process"}
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _host(url: str, name: str) -> DaemonProc:
    d = DaemonProc(new_home(), env=ENV)
    d.start(pool=1, env=ENV, args=["--fleet", url, "--host-name", name, "--capacity", "5000"])
    return d


def _state(conn: Any, ident: int) -> dict[str, Any]:
    from tether.fleet import store as fs

    row = fs.get_work(conn, ident)
    assert row is not None
    return row


def _placements(conn: Any, n: int) -> list[float]:
    from tether.fleet import store as fs

    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        row = fs.place(conn, "exec", {"argv": ["true"]}, labels={}, host=None,
                       revival="reap", request_key=uuid.uuid4().hex)
        wait_for(lambda r=row: _state(conn, r["id"])["state"] in ("RUNNING", "ENDED"), 30,
                 interval=0.002)
        out.append(time.perf_counter() - t0)
    return out


def _local_starts(d: DaemonProc, n: int) -> list[float]:
    out = []
    with d.client() as c:
        for _ in range(n):
            t0 = time.perf_counter()
            c.exec_start(["true"])
            out.append(time.perf_counter() - t0)
    return out


def _failovers(url: str, conn: Any, hosts: dict[str, DaemonProc], n: int) -> list[float]:
    from tether.fleet import store as fs

    out = []
    names = sorted(hosts)
    for i in range(n):
        victim = names[i % len(names)]
        # A host restarted by the previous round may not hold its new lease yet.
        wait_for(lambda v=victim: conn.execute(
            "SELECT state = 'ACTIVE' AND lease_expires > now() AS live FROM hosts "
            "WHERE name = %s", (v,)).fetchone()["live"], LEASE * 10)
        row = fs.place(conn, "agent", {"argv": SLEEPER, "provider": "generic",
                                       "revival": "revive", "crashed_after": 3600,
                                       "stale_after": 3600},
                       labels={}, host=victim, revival="revive", request_key=uuid.uuid4().hex)
        wait_for(lambda r=row: _state(conn, r["id"])["state"] == "RUNNING", 30)
        d = hosts[victim]
        d.kill9()
        kill_strays(d.home, wait=5)
        t0 = time.perf_counter()
        wait_for(lambda r=row: (_state(conn, r["id"])["generation"] == 2
                                and _state(conn, r["id"])["state"] == "RUNNING"),
                 LEASE * 10, interval=0.01)
        out.append(time.perf_counter() - t0)
        d.start(pool=1, env=ENV, args=["--fleet", url, "--host-name", victim,
                                       "--capacity", "5000"])
    return out


def _ps(url: str, conn: Any, per_host: int, names: list[str]) -> tuple[float, float]:
    from tether.fleet import store as fs

    with conn.transaction():
        for name in names:
            tok = conn.execute("SELECT token FROM hosts WHERE name = %s", (name,)
                               ).fetchone()["token"]
            conn.execute(
                "INSERT INTO work (kind, spec, host, token, state, local_id) SELECT 'exec', "
                "'{\"argv\": [\"sleep\", \"600\"]}', %s, %s, 'ENDED', 'x' || g "
                "FROM generate_series(1, %s) g", (name, tok, per_host))
    t0 = time.perf_counter()
    rows = fs.work(conn, all_=True)
    query = time.perf_counter() - t0
    assert len(rows) >= per_host * len(names)
    t0 = time.perf_counter()
    subprocess.run([*TETHER, "--fleet", url, "ps", "-a"], check=True, capture_output=True)
    return query, time.perf_counter() - t0


def _logs(url: str, conn: Any, host: DaemonProc, n: int) -> tuple[list[float], list[float]]:
    """``tether --fleet URL logs WORK`` (PostgreSQL, then the owning host's API) beside
    ``tether logs EXEC`` on that host, whole CLI runs."""
    from tether.fleet import store as fs

    row = fs.place(conn, "exec", {"argv": [sys.executable, "-c", "print('x' * 4000)"]},
                   labels={}, host="h2", revival="reap", request_key=uuid.uuid4().hex)
    local = wait_for(lambda: _state(conn, row["id"])["state"] == "ENDED"
                     and _state(conn, row["id"])["local_id"], 30)
    remote_t, local_t = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([*TETHER, "--fleet", url, "logs", str(row["id"])], check=True,
                       capture_output=True)
        remote_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        host.cli("logs", local)
        local_t.append(time.perf_counter() - t0)
    return remote_t, local_t


def _idle_commits(conn: Any, seconds: float) -> float:
    def commits() -> int:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE "
                                "datname = current_database()").fetchone()["xact_commit"])
    a = commits()
    time.sleep(seconds)
    return (commits() - a - 1) / seconds  # less the one read in between


def run(opts: Options) -> BenchResult:
    from tether.fleet import schema
    from tether.fleet import store as fs

    t_start = time.perf_counter()
    samples = 10 if opts.quick else 30
    failovers = 5 if opts.quick else 20
    data: dict[str, Any] = {"lease_s": LEASE}
    pg = PgCluster()
    hosts: dict[str, DaemonProc] = {}
    try:
        pg.start()
        url = pg.url
        conn = fs.connect(url)
        schema.migrate(conn)
        for name in ("h1", "h2", "h3"):
            hosts[name] = _host(url, name)
        wait_for(lambda: len(fs.hosts(conn)) == 3, 20)
        time.sleep(LEASE)
        data["idle_commits_per_s_per_host"] = _idle_commits(conn, 10.0 if not opts.quick
                                                            else 4.0) / 3
        local = _local_starts(hosts["h1"], samples)
        placed = _placements(conn, samples)
        data["local_start_ms"] = {"p50": percentile(local, 50) * 1e3,
                                  "p99": percentile(local, 99) * 1e3}
        data["placement_ms"] = {"p50": percentile(placed, 50) * 1e3,
                                "p99": percentile(placed, 99) * 1e3}
        rl, ll = _logs(url, conn, hosts["h2"], samples)
        data["fleet_logs_ms"] = {"p50": percentile(rl, 50) * 1e3,
                                 "p99": percentile(rl, 99) * 1e3}
        data["local_logs_ms"] = {"p50": percentile(ll, 50) * 1e3,
                                 "p99": percentile(ll, 99) * 1e3}
        fo = _failovers(url, conn, hosts, failovers)
        data["failover_s"] = {"p50": percentile(fo, 50), "p99": percentile(fo, 99),
                              "n": len(fo)}
        q, cli = _ps(url, conn, 1000, ["h1", "h2", "h3"])
        data["ps_query_ms"], data["ps_cli_ms"] = q * 1e3, cli * 1e3
        conn.close()
    finally:
        for d in hosts.values():
            d.cleanup()
            remove_home(d.home)
        pg.destroy()
    p, lo, f = data["placement_ms"], data["local_start_ms"], data["failover_s"]
    rows = [
        Row("fleet", "placement: --host auto → RUNNING on its host (p50 / p99)",
            f"{p['p50']:.0f} / {p['p99']:.0f} ms",
            f"local exec.start {lo['p50']:.0f} / {lo['p99']:.0f} ms"),
        Row("fleet", f"failover: host SIGKILLed → its agent RUNNING elsewhere (p50 / p99, "
            f"n={f['n']}, lease {LEASE:.0f} s)", f"{f['p50']:.2f} / {f['p99']:.2f} s",
            f"at most the lease ({LEASE:.0f} s) + one work pass (1 s)"),
        Row("fleet", "fleet ps over 3 hosts x 1,000 placements (CLI / query)",
            f"{data['ps_cli_ms']:.0f} / {data['ps_query_ms']:.0f} ms", ""),
        Row("fleet", "tether --fleet URL logs WORK of a host's exec, whole CLI (p50 / p99)",
            f"{data['fleet_logs_ms']['p50']:.0f} / {data['fleet_logs_ms']['p99']:.0f} ms",
            f"tether logs on that host {data['local_logs_ms']['p50']:.0f} / "
            f"{data['local_logs_ms']['p99']:.0f} ms"),
        Row("fleet", "PostgreSQL commits/s per idle host",
            f"{data['idle_commits_per_s_per_host']:.1f}/s",
            f"renewals every {LEASE / 3:.1f} s + a sweep per 1 s pass"),
    ]
    return BenchResult("fleet", "Fleet: placement, failover, fleet ps, idle PostgreSQL load",
                       {"samples": samples, "failovers": failovers, "lease": LEASE}, data,
                       rows, seconds=time.perf_counter() - t_start)
