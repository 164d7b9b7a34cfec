"""Fleet mode's one view: ``logs`` and ``events`` of work on another host, streamed from
that host's daemon through the host-to-host API (real PostgreSQL, real daemons)."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_fleet import FAST, LEASE, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import TETHER, DaemonProc, new_home, remove_home, wait_for
from tests.pg import PgCluster

pytestmark = fleet_marks

SPEAKER = [sys.executable, "-c", "import sys, time; print('hello from', 'h2', flush=True);"
           " print('to stderr', file=sys.stderr, flush=True); time.sleep(600)"]
COUNTER = [sys.executable, "-c", "import time\nfor i in range(3):\n print('tick', i, "
           "flush=True); time.sleep(0.4)"]


def _two_hosts(fleet: Fleet, h1_env: dict[str, str] | None = None,
               h2_env: dict[str, str] | None = None) -> None:
    fleet.add("h1", env=h1_env)
    fleet.add("h2", env=h2_env)
    wait_for(lambda: len(fleet.hosts_rows()) == 2
             and all(r["api"] for r in fleet.hosts_rows().values()), 15, what="two hosts")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_logs_and_events_of_work_on_another_host(fleet: Fleet, tmp_path: Path) -> None:
    """h2 serves its API over TLS; the CLI (h1's environment) trusts its certificate."""
    cert, key = _self_signed(tmp_path)
    _two_hosts(fleet, {"SSL_CERT_FILE": str(cert)},
               {"TETHER_FLEET_TLS_CERT": str(cert), "TETHER_FLEET_TLS_KEY": str(key)})
    assert fleet.hosts_rows()["h2"]["api"].startswith("https://127.0.0.1:")
    ident = fleet.place("--host", "h2", "--", *SPEAKER)
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 20, what="running on h2")
    wait_for(lambda: b"hello from h2" in fleet.cli("logs", str(ident)).stdout, 10,
             what="h2's output through the fleet")
    assert fleet.cli("logs", "--stderr", str(ident)).stdout == b"to stderr\n"
    # -f follows until the exec ends, then returns.
    ticks = fleet.place("--host", "h2", "--", *COUNTER)
    wait_for(lambda: fleet.work(ticks)["local_id"], 20, what="started")
    followed = fleet.cli("logs", "-f", str(ticks)).stdout.decode()
    assert followed == "tick 0\ntick 1\ntick 2\n"
    mine = [json.loads(line) for line in
            fleet.cli("events", "--work", str(ident), "--json").stdout.splitlines()]
    local = fleet.work(ident)["local_id"]
    assert mine and all(e["exec"] == local and e["host"] == "h2" for e in mine)
    assert "RUNNING" in {e["state"] for e in mine if e["type"] == "exec.state"}
    journal = fleet.cli("events").stdout.decode()
    assert "work.placed" in journal and "work.running" in journal
    host_events = fleet.cli("events", "--host", "h2", "--json").stdout.splitlines()
    assert len(host_events) >= len(mine)
    # An agent's placement: its lineage's current exec, and the lineage's events.
    agent = fleet.place("--host", "h2", "--agent", "generic", "--", *SPEAKER)
    wait_for(lambda: fleet.work(agent)["state"] == "RUNNING", 20, what="agent on h2")
    wait_for(lambda: b"hello from h2" in fleet.cli("logs", str(agent)).stdout, 10,
             what="the agent's output")
    lineage = fleet.work(agent)["local_id"]
    evs = [json.loads(x) for x in
           fleet.cli("events", "--work", str(agent), "--json").stdout.splitlines()]
    assert any(e["data"].get("lineage") == lineage for e in evs)
    untrusted = fleet.hosts["h1"].cli("--fleet", fleet.url, "logs", str(ident),
                                      env={"SSL_CERT_FILE": ""})
    assert untrusted.returncode == 125 and b"CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    _api_refusals(fleet, httpx.Client(verify=ssl.create_default_context(cafile=str(cert))))


def _api_refusals(fleet: Fleet, http: httpx.Client) -> None:
    """The host API wants the fleet's token and says what is wrong, then serves on."""
    api = fleet.hosts_rows()["h2"]["api"]
    bad = http.get(f"{api}/v1/logs", params={"exec": "x"},
                   headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and "fleet's token" in bad.json()["error"]["message"]
    assert http.get(f"{api}/v1/events").status_code == 401
    from tether.fleet import store as fs

    with fleet.db() as c:
        token = fs.secret(c)
    auth = {"Authorization": f"Bearer {token}"}
    missing = http.get(f"{api}/v1/logs", params={"exec": "nope"}, headers=auth)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "EXEC_NOT_FOUND"
    neither = http.get(f"{api}/v1/logs", headers=auth)
    assert neither.status_code == 400 and "?exec=ID" in neither.json()["error"]["message"]
    assert http.get(f"{api}/v1/events", headers=auth).status_code == 200  # still serving
    unknown = fleet.cli("logs", "999", check=False)
    assert unknown.returncode == 1 and "no placement 999" in unknown.stderr.decode()
    notwork = fleet.cli("logs", "abc", check=False)  # a name no placement has
    assert notwork.returncode == 1 and "no placement 'abc'" in notwork.stderr.decode()


ECHOER = [sys.executable, "-c", "import sys\nwhile True:\n line = sys.stdin.readline()\n"
          " if not line: break\n print('echo:' + line.strip().upper(), flush=True)"]


def test_attach_to_a_session_on_another_host(fleet: Fleet) -> None:
    import pexpect

    from tests.harness import TETHER

    _two_hosts(fleet)
    ident = fleet.place("--host", "h2", "-d", "-t", "--", *ECHOER)
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 20, what="running on h2")
    h1 = fleet.hosts["h1"]

    def attach(*flags: str) -> pexpect.spawn:
        return pexpect.spawn(TETHER[0], [*TETHER[1:], "--home", str(h1.home), "--fleet",
                                         fleet.url, "attach", *flags, str(ident)],
                             env=h1.env, dimensions=(24, 80), timeout=20)

    child = attach()
    child.send("hello\r")
    child.expect("echo:HELLO")
    child.sendcontrol("\\")
    child.expect(f"detached from placement {ident} on h2")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert fleet.work(ident)["state"] == "RUNNING"  # detaching never ends it
    watcher = attach("--read-only")
    watcher.send("dropped\r")
    with pytest.raises(pexpect.TIMEOUT):
        watcher.expect("echo:DROPPED", timeout=1.5)
    watcher.sendcontrol("\\")
    watcher.expect(pexpect.EOF)
    again = attach()
    again.send("bye\r")
    again.expect("echo:BYE")
    again.sendcontrol("d")  # EOF at the prompt: the program ends
    again.expect(f"placement {ident} on h2 exited with code 0")
    again.expect(pexpect.EOF)
    again.close()
    assert again.exitstatus == 0
    wait_for(lambda: fleet.work(ident)["state"] == "ENDED", 10, what="ENDED")
    ended = fleet.cli("attach", str(ident), check=False)
    assert ended.returncode == 1 and "nothing to attach to" in ended.stderr.decode()
    # The host dies: its placements' logs say they cannot be reached, and why.
    fleet.hosts["h2"].kill9()
    down = fleet.cli("logs", str(ident), check=False)
    assert down.returncode in (1, 125), down.stderr
    err = down.stderr.decode()
    assert "cannot reach host h2" in err or "no live lease" in err
    wait_for(lambda: not fleet.hosts_rows()["h2"]["live"], LEASE * 3, what="lease gone")
    api = fleet.hosts_rows()["h2"]["api"]
    for cmd, tail in ((("logs", str(ident)), "its logs are on its disk"),
                      (("events", "--work", str(ident)), "its events are on its disk"),
                      (("attach", str(ident)), "its sessions cannot be attached")):
        gone = fleet.cli(*cmd, check=False)
        assert gone.returncode == 1, gone.stderr
        assert gone.stderr.decode().splitlines()[0] == (
            f"tether: host h2 has no live lease and does not answer at {api}: {tail} "
            "until it comes back")


def test_typing_into_a_session_on_another_host_needs_a_grant(fleet: Fleet) -> None:
    """Issue 21 finding 5: /v1/attach wrote into terminals for anyone holding the fleet
    token (whoever can *read* the fleet database) while the API said it served only reads.
    Now it is read-only unless the caller proves it may *write* to the fleet database: an
    ``attach.grant`` row it journaled, naming the session and a nonce's digest, used once."""
    import hashlib
    import secrets

    from websockets.sync.client import connect

    from tether.fleet import store as fs

    _two_hosts(fleet)
    ident = fleet.place("--host", "h2", "-d", "-t", "--", *ECHOER)
    wait_for(lambda: fleet.work(ident)["state"] == "RUNNING", 20, what="running on h2")
    with fleet.db() as c:
        token = fs.secret(c)
    exec_id, api = fleet.work(ident)["local_id"], fleet.hosts_rows()["h2"]["api"]
    base = "ws" + api.removeprefix("http") + f"/v1/attach?exec={exec_id}"

    def session(query: str, grant: str | None = None) -> tuple[bool, str]:
        """(whether our line came back, the error if one) for one connection."""
        headers = {"Authorization": f"Bearer {token}"}
        if grant is not None:
            headers["X-Tether-Attach-Grant"] = grant
        seen = b""
        with connect(base + query, additional_headers=headers, open_timeout=10) as ws:
            word = secrets.token_hex(3)
            try:
                first = ws.recv(timeout=2)
            except TimeoutError:
                first = b""
            if isinstance(first, str) and "error" in json.loads(first):
                return False, json.loads(first)["error"]
            ws.send(f"{word}\r".encode())
            try:
                while f"echo:{word.upper()}".encode() not in seen:
                    msg = ws.recv(timeout=2)
                    seen += msg if isinstance(msg, bytes) else b""
            except TimeoutError:
                return False, ""
            return True, ""

    typed, error = session("&ro=0")
    assert not typed and "grant written into the fleet database" in error, error
    assert session("") == (False, "")  # no ro: read-only, the line is dropped
    assert session("&ro=0", grant=secrets.token_hex(32))[0] is False  # a made-up grant
    nonce = secrets.token_hex(32)
    with fleet.db() as c:
        fs.grant_attach(c, "h2", {"exec": exec_id}, hashlib.sha256(nonce.encode()).hexdigest())
    assert session("&ro=0", grant=nonce) == (True, "")
    assert session("&ro=0", grant=nonce)[0] is False  # once
    with fleet.db() as c:  # the fleet journal says who typed where
        grants = [r for r in fs.journal(c) if r["type"] == fs.ATTACH_GRANT]
    assert [(g["host"], g["data"]["target"]) for g in grants] == [("h2", {"exec": exec_id})]


def test_a_partitioned_host_still_serves_its_logs_through_the_fleet(fleet: Fleet) -> None:
    """h2 reaches no PostgreSQL (its lease is gone, it is swept DEAD) but its daemon and
    API are up: the fleet CLI still gets its ended exec's output and its events."""
    fleet.add("h1")
    h2 = fleet.add("h2", env={"TETHER_FAULT": "fleet.partition"})
    wait_for(lambda: len(fleet.hosts_rows()) == 2
             and all(r["api"] for r in fleet.hosts_rows().values()), 15, what="two hosts")
    ident = fleet.place("--host", "h2", "--", sys.executable, "-c", "print('said on h2')")
    wait_for(lambda: fleet.work(ident)["state"] == "ENDED", 20, what="ended on h2")
    (h2.home / "fleet.partition").touch()
    wait_for(lambda: fleet.hosts_rows()["h2"]["state"] == "DEAD", LEASE * 4,
             what="h2 swept DEAD")
    logs = fleet.cli("logs", str(ident))
    assert logs.stdout == b"said on h2\n" and logs.stderr == b""
    evs = [json.loads(x) for x in
           fleet.cli("events", "--work", str(ident), "--json").stdout.splitlines()]
    assert "FINISHED" in {e["state"] for e in evs if e["type"] == "exec.state"}
    assert h2.proc is not None and h2.proc.poll() is None
    assert not fleet.hosts_rows()["h2"]["live"]  # still partitioned throughout


def test_a_host_refuses_a_fleet_schema_older_than_its_own(pg: PgCluster) -> None:
    """A database at schema 1 (an older tether's) has no API columns nor token: the host
    says to upgrade it, and joins once `tether fleet init` did."""
    from tether.fleet import schema
    from tether.fleet import store as fs

    url = pg.new_db(f"old_{os.getpid()}")
    with fs.connect(url) as c, c.transaction():
        c.execute("CREATE TABLE fleet_schema (version integer PRIMARY KEY, "
                  "applied_at timestamptz NOT NULL DEFAULT now())")
        c.execute(schema.MIGRATIONS[0][1])
        c.execute("INSERT INTO fleet_schema (version) VALUES (1)")
    d = DaemonProc(new_home(), env=FAST)
    try:
        d.start(wait=False, pool=0, args=["--fleet", url, "--host-name", "h1"])
        assert d.proc is not None and d.proc.wait(20) == 1
        assert "older than this tether" in d.log_text() and "fleet init" in d.log_text()
        up = subprocess.run([*TETHER, "fleet", "init", url], capture_output=True, text=True)
        assert up.returncode == 0 and "applied 2" in up.stdout
        d.start(pool=0, args=["--fleet", url, "--host-name", "h1"])
        with fs.connect(url) as c:
            wait_for(lambda: any(h["api"] for h in fs.hosts(c)), 15, what="h1 advertised")
    finally:
        d.cleanup()
        remove_home(d.home)
