"""`make demo-fleet`: three hosts on one machine, one PostgreSQL, a host dies.

A throw-away PostgreSQL cluster (``tests/pg.py``), ``tether fleet init``, three daemons
in separate homes as hosts ``build-1..3``; an agent placed with ``--host auto``, a
plain command placed on a named host; then ``build-1``'s daemon and monitors are
SIGKILLed (the host died) and its agent comes back on another host once, while its
plain command is marked lost; its output is read from its new host; that host is
drained with ``--now`` and the agent moves once more; the drain is undone. Then the
daemon alone of the agent's host is SIGKILLed (its monitors live, tether's usual
crash): the agent's monitor stops it at the lease file's deadline, before another host
revives it, so it never runs twice. Last, PostgreSQL itself is stopped for two leases
while a command ends: its exit code reaches the fleet when the database is back (the
host's local journal is the outbox). Every step is the real CLI; every claim is
checked (exit 1 when one fails); everything is cleaned up.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness import TETHER, DaemonProc, kill_strays, new_home, remove_home  # noqa: E402
from tests.pg import PgCluster  # noqa: E402

LEASE = "3"
ENV = {"TETHER_FLEET_LEASE": LEASE, "TETHER_FLEET_INTERVAL": "0.5",
       "TETHER_DEFAULT_RUNTIME": "process"}
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
#: The agent: says where it works, appends "<CLOCK_MONOTONIC> <its lineage>" to the file
#: named by $STARTS (one clock for every process of the machine), then sleeps.
WORKER = [sys.executable, "-c", "import os, time; print('agent at work in', os.getcwd(), "
          "flush=True); f = open(os.environ['STARTS'], 'a'); "
          "f.write(f'{time.monotonic()} {os.environ[\"TETHER_LINEAGE\"]}\\n'); f.close(); "
          "time.sleep(600)"]


def say(text: str) -> None:
    print(f"\n\033[1m# {text}\033[0m", flush=True)


def tether(url: str, *args: str) -> str:
    words = " ".join("$URL" if a == url else shlex.quote(a) for a in args)
    print(f"$ tether {'' if args[0] == 'fleet' else '--fleet $URL '}{words}", flush=True)
    r = subprocess.run([*TETHER, "--fleet", url, *args], capture_output=True, text=True,
                       env={**os.environ, **ENV})
    print(r.stdout + r.stderr, end="", flush=True)
    if r.returncode != 0:
        sys.exit(f"demo: `tether {args[0]}` failed ({r.returncode})")
    return r.stdout


def check(ok: bool, claim: str) -> None:
    print(("  ✓ " if ok else "  ✗ ") + claim, flush=True)
    if not ok:
        sys.exit(1)


def until(pred: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def main() -> int:
    pg = PgCluster()
    hosts: dict[str, DaemonProc] = {}
    try:
        pg.start()
        url = pg.url
        say("a PostgreSQL for the fleet's intent (a throw-away cluster here), then its schema")
        tether(url, "fleet", "init", url)
        say("three hosts: `tether daemon --fleet $URL --host-name build-N --capacity 4`")
        for i in (1, 2, 3):
            d = hosts[f"build-{i}"] = DaemonProc(new_home(), env=ENV)
            d.start(pool=0, env=ENV, args=["--fleet", url, "--host-name", f"build-{i}"])
        check(until(lambda: len(_hosts(url)) == 3, 15), "three hosts hold leases")
        tether(url, "hosts")
        say("an agent wherever there is room, and a command on build-1")
        starts = Path(tempfile.mkdtemp(prefix="tether-demo-fleet-")) / "starts"
        agent = int(tether(url, "run", "--host", "auto", "--agent", "generic",
                           "--crashed-after", "3600", "-e", f"STARTS={starts}",
                           "--", *WORKER).split()[0])
        where = _work(url, agent)["host"]
        cmd = int(tether(url, "run", "--host", "build-1", "--", *SLEEP).split()[0])
        check(until(lambda: _work(url, agent)["state"] == _work(url, cmd)["state"] == "RUNNING",
                    20), "both RUNNING on their hosts")
        tether(url, "ps")
        say(f"{where} dies: its daemon and its monitors get SIGKILL")
        victim = hosts[where]
        victim.kill9()
        kill_strays(victim.home, wait=5)
        t0 = time.monotonic()
        check(until(lambda: _work(url, agent)["generation"] == 2
                    and _work(url, agent)["state"] == "RUNNING", 30),
              f"the agent runs again on {_work(url, agent)['host']} after "
              f"{time.monotonic() - t0:.1f} s (lease {LEASE} s), exactly once")
        tether(url, "ps", "-a")
        tether(url, "hosts")
        if where == "build-1":
            check(_work(url, cmd)["state"] == "LOST", "build-1's command is marked LOST, "
                  "shown UNREACHABLE: a host's commands may outlive its daemon, and come "
                  "back RUNNING when it answers")
        say("its output, from whichever host runs it now (the hosts' API, the fleet token)")
        check("agent at work" in tether(url, "logs", str(agent)), "logs streamed from "
              f"{_work(url, agent)['host']}")
        tether(url, "events", "--work", str(agent))
        now_on = str(_work(url, agent)["host"])
        say(f"drain {now_on} --now: no new work goes there, and its agent moves at once")
        tether(url, "drain", "--now", now_on)
        check(until(lambda: _work(url, agent)["generation"] == 3
                    and _work(url, agent)["state"] == "RUNNING", 20),
              f"the agent was handed over to {_work(url, agent)['host']}, once")
        tether(url, "hosts")
        say(f"undrain {now_on}: it takes new work again")
        tether(url, "undrain", now_on)
        check(_host(url, now_on)["state"] == "ACTIVE", f"{now_on} is ACTIVE")

        w = _work(url, agent)
        host, lineage = str(w["host"]), str(w["local_id"])
        say(f"{host}'s daemon alone gets SIGKILL: its monitors and the agent live on")
        hosts[host].kill9()
        t0 = time.monotonic()
        gone: float | None = None
        while len(_starts(starts)) < 4 and time.monotonic() - t0 < 30:
            if gone is None and not _alive(lineage):
                gone = time.monotonic()
            time.sleep(0.01)
        t_new = _starts(starts)[-1][0] if len(_starts(starts)) == 4 else None
        check(gone is not None and t_new is not None and gone < t_new,
              f"its monitor stopped the agent {(gone or t0) - t0:.1f} s after the crash, "
              f"{(t_new or 0) - (gone or 0):.1f} s before another host revived it: "
              "never two copies")
        check(until(lambda: _work(url, agent)["state"] == "RUNNING"
                    and _work(url, agent)["generation"] == 4, 20),
              f"the agent runs on {_work(url, agent)['host']} (generation 4)")
        hosts[host].start(pool=0, env=ENV, args=["--fleet", url, "--host-name", host])
        check(until(lambda: bool(_host(url, host)["live"]), 20)
              and _work(url, agent)["generation"] == 4 and not _alive(lineage),
              f"{host}'s daemon is back and resumed nothing of its old lease")

        say("PostgreSQL stops for two leases while a command on build-2 ends with code 7")
        ended = int(tether(url, "run", "--host", "build-2", "--", "sh", "-c",
                           "sleep 2; exit 7").split()[0])
        check(until(lambda: _work(url, ended)["state"] == "RUNNING", 20), "it runs")
        pg.stop("immediate")
        print("$ tether --fleet $URL hosts   # while PostgreSQL is down", flush=True)
        down = subprocess.run([*TETHER, "--fleet", url, "hosts"], capture_output=True,
                              text=True, env={**os.environ, **ENV})
        print(down.stderr, end="", flush=True)
        time.sleep(float(LEASE) * 2)
        pg.start()
        check(down.returncode == 125, "the CLI says it cannot reach PostgreSQL (exit 125)")
        check(until(lambda: _work(url, ended)["state"] == "ENDED", 30)
              and _work(url, ended)["exit_code"] == 7,
              "back: its exit code 7 reached the fleet from build-2's local journal")
        check(until(lambda: _work(url, agent)["state"] == "RUNNING"
                    and _work(url, agent)["generation"] == 5, 30),
              f"the agent, stopped when every host fenced itself, runs again on "
              f"{_work(url, agent)['host']} (generation {_work(url, agent)['generation']})")
        tether(url, "ps", "-a")
        tether(url, "events")
        return 0
    finally:
        for d in hosts.values():
            d.cleanup()
            remove_home(d.home)
        pg.destroy()


def _starts(path: Path) -> list[tuple[float, str]]:
    """The agent's starts, in order: (CLOCK_MONOTONIC, lineage)."""
    if not path.exists():
        return []
    return [(float(t), lid) for t, lid in (ln.split() for ln in path.read_text().splitlines())]


def _alive(lineage: str) -> bool:
    """Whether a process of local lineage ``lineage`` runs on this machine (its daemon
    may be dead: this reads /proc, not a daemon)."""
    want = f"TETHER_LINEAGE={lineage}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


def _host(url: str, name: str) -> dict[str, object]:
    return next(h for h in _hosts(url) if h["name"] == name)


def _hosts(url: str) -> list[dict[str, object]]:
    from tether.fleet import store as fs

    with fs.connect(url) as c:
        return fs.hosts(c)


def _work(url: str, ident: int) -> dict[str, object]:
    from tether.fleet import store as fs

    with fs.connect(url) as c:
        row = fs.get_work(c, ident)
    assert row is not None
    return row


if __name__ == "__main__":
    sys.exit(main())
