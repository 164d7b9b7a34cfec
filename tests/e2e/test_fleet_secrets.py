"""Issue 21 finding 3: the fleet database's password stays out of every process list, log
and output. Four real fleet daemons on a real PostgreSQL (tests/pg.py), whose role now
needs a password (scram-sha-256), each given the URL a supported way; then every
``/proc/*/cmdline`` on the machine, every daemon's log, the CLI's ``--json`` outputs, and
what a bwrap-sandboxed agent of one of them can see from inside are searched for it.
On the old code the daemon started with ``tether daemon --fleet URL`` kept the URL,
password included, on its command line (``ps`` showed it to every local user)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tests.pg import PgCluster, bindir
from tether.runtime import bwrap

pytestmark = [pytest.mark.xdist_group("fleet"),
              pytest.mark.skipif(bindir() is None
                                 and os.environ.get("TETHER_REQUIRE_POSTGRES") != "1",
                                 reason="PostgreSQL is not installed (apt-get install "
                                 "postgresql)")]

NUL = b"\0"
FAST = {"TETHER_FLEET_LEASE": "3", "TETHER_FLEET_INTERVAL": "0.3", "TETHER_AGENT_TICK": "0.3"}
PEEK = r'''
import glob, os, sys
seen = [f"{k}={v}" for k, v in os.environ.items()]
for p in glob.glob("/proc/*/cmdline"):
    try:
        seen.append(open(p, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
for p in sys.argv[1:]:
    try:
        seen.append(open(p).read())
    except OSError as e:
        seen.append(f"cannot read {p}: {e.strerror}")
with open("seen.tmp", "w") as f:
    f.write("\n".join(seen))
os.rename("seen.tmp", "seen.txt")
'''


@pytest.fixture
def homes() -> Iterator[list[DaemonProc]]:
    made: list[DaemonProc] = []
    yield made
    for d in made:
        d.cleanup()
        remove_home(d.home)


def _password_role(pg: PgCluster, user: str, password: str, db: str) -> None:
    """A role that must give its password (the test cluster trusts everyone else)."""
    import psycopg

    hba = pg.data / "pg_hba.conf"
    rule = f"local all {user} scram-sha-256\n"
    if rule not in hba.read_text():
        hba.write_text(rule + hba.read_text())
    with psycopg.connect(f"postgresql://tether@/postgres?host={pg.sock}",
                         autocommit=True) as c:
        c.execute(f"CREATE ROLE {user} LOGIN SUPERUSER PASSWORD '{password}'")
        c.execute(f'CREATE DATABASE "{db}" OWNER {user}')
        c.execute("SELECT pg_reload_conf()")


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_the_fleet_password_is_in_no_process_list_log_or_output(
        pg: PgCluster, homes: list[DaemonProc], tmp_path: Path) -> None:
    tag = secrets.token_hex(4)
    user, db, password = f"fleet{tag}", f"secrets{tag}", f"pw{secrets.token_hex(12)}"
    _password_role(pg, user, password, db)
    plain = f"postgresql://{user}@/{db}?host={pg.sock}"
    with_pw = f"postgresql://{user}:{password}@/{db}?host={pg.sock}"
    url_file = _private(tmp_path / "fleet.url", with_pw + "\n")
    passfile = _private(tmp_path / "pgpass", f"*:*:*:{user}:{password}\n")
    run = subprocess.run
    tether = [sys.executable, "-m", "tether.cli.main"]

    # Without the password the database refuses (the role really needs it).
    r = run([*tether, "--fleet", plain, "hosts"], capture_output=True, text=True,
            env={**os.environ, "PGPASSFILE": "/nonexistent"})
    assert r.returncode == 125 and "password" in r.stderr, r.stderr
    # `fleet init` with the URL in the environment.
    r = run([*tether, "fleet", "init"], capture_output=True, text=True,
            env={**os.environ, "TETHER_FLEET_URL": with_pw})
    assert r.returncode == 0 and "fleet schema at version" in r.stdout, r.stderr

    ways: dict[str, tuple[list[str], dict[str, str]]] = {
        "file": (["--fleet-url-file", str(url_file)], {}),
        "env": ([], {"TETHER_FLEET_URL": with_pw, "TETHER_DEFAULT_RUNTIME": "auto"}),
        "pgpass": (["--fleet", plain], {"PGPASSFILE": str(passfile)}),
        "argv": (["--fleet", with_pw], {}),  # still works; warned about
    }
    for name, (args, env) in ways.items():
        d = DaemonProc(new_home(), env={**FAST, **env})
        homes.append(d)
        d.start(pool=0, args=[*args, "--host-name", f"h-{name}-{tag}"])

    def hosts() -> list[dict[str, object]]:
        r = run([*tether, "--fleet-url-file", str(url_file), "hosts", "--json"],
                capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [h for h in json.loads(r.stdout) if h["live"]]
    outputs = [json.dumps(wait_for(lambda: len(hosts()) == 4 and hosts(), timeout=30,
                                   what="four live hosts"))]

    # An agent of the "env" host, started by a client whose environment names the fleet
    # (`tether run` sends the whole shell's), in the default (bwrap) sandbox.
    d = homes[1]
    c = d.client()
    work = tmp_path / "work"
    work.mkdir()
    (work / "peek.py").write_text(PEEK)
    if bwrap.probe().available:
        c.agent_start([sys.executable, "peek.py", str(url_file), str(passfile)],
                      provider="generic", cwd=str(work),
                      env={**os.environ, "TETHER_FLEET_URL": with_pw})
        wait_for(lambda: (work / "seen.txt").exists(), timeout=30, what="the agent's look")
        seen = (work / "seen.txt").read_text()
        assert "cannot read" in seen and password not in seen
        assert c.exec_list(all=True)[0].sandbox == "default"
        assert c.sandbox_get("default").spec.runtime == "bwrap"

    for x in homes:
        outputs.append(x.cli("status", "--json").stdout.decode())
    outputs.append(run([*tether, "--fleet-url-file", str(url_file), "ps", "-a", "--json"],
                       capture_output=True, text=True).stdout)
    bad = run([*tether, "--fleet", with_pw.replace("postgresql://", "postgresql:/"), "hosts"],
              capture_output=True, text=True)  # a malformed URL: its error
    outputs.append(bad.stdout + bad.stderr)

    found = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = p.read_bytes()
        except OSError:
            continue
        if password.encode() in argv and str(os.getpid()) != p.parent.name:
            found.append(f"{p}: {argv.replace(NUL, b' ').decode(errors='replace')}")
    assert found == [], found
    logs = "".join(x.log_text() + ((x.home / "daemon.log").read_text()
                                   if (x.home / "daemon.log").exists() else "")
                   for x in homes)
    assert password not in logs
    assert "password is on this command line" in homes[3].log_text()  # the argv one
    for text in outputs:
        assert password not in text, text
