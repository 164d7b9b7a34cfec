"""The fleet as a newcomer meets it from the command line: two daemons given one host
name, malformed URLs and options, each answered with a precise error and exit code
(1 failure, 2 usage, 125 cannot reach) against a real PostgreSQL and real daemons."""

# ruff: noqa: F811 (the fleet fixtures are imported from test_fleet and used as params)
from __future__ import annotations

import time

import pytest

from tests.e2e.test_fleet import FAST, Fleet, fleet  # noqa: F401 (a fixture)
from tests.e2e.test_fleet import pytestmark as fleet_marks
from tests.harness import DaemonProc, new_home, remove_home, wait_for

pytestmark = fleet_marks


def test_a_second_daemon_with_a_taken_host_name_is_refused_and_the_first_keeps_it(
        fleet: Fleet) -> None:
    fleet.add("h1")
    wait_for(lambda: "h1" in fleet.hosts_rows(), 10, what="h1's lease")
    token = fleet.hosts_rows()["h1"]["token"]
    twin = DaemonProc(new_home(), env=FAST)
    try:
        proc = twin.start(wait=False, pool=0, args=["--fleet", fleet.url, "--host-name", "h1"])
        assert proc.wait(timeout=30) == 1
        log = twin.log_text()
        assert "host name 'h1' is held by another daemon" in log, log
        assert "--host-name" in log and str(fleet.hosts["h1"].home) in log, log
        time.sleep(2)  # the first one renews on, never fenced
        row = fleet.hosts_rows()["h1"]
        assert row["live"] and row["token"] == token
        assert "fenced" not in fleet.hosts["h1"].log_text()
    finally:
        twin.cleanup()
        remove_home(twin.home)


def test_a_taken_host_name_is_refused_by_the_acquisition_itself(fleet: Fleet) -> None:
    """Two daemons past their start checks at once: the lease's own transaction refuses
    the second while the first's lease is live, and lets it in once that expired."""
    from tether.fleet import identity
    from tether.fleet import store as fs

    kw = {"capacity": 1, "labels": {}, "version": "t", "home": "/h", "ttl": 1.0}
    with fleet.db() as c:
        first = fs.acquire(c, "twin", instance="one", **kw)
        assert fs.acquire(c, "twin", instance="one", **kw).token > first.token  # a restart
        with pytest.raises(identity.HostTaken, match="held by another daemon"):
            fs.acquire(c, "twin", instance="two", **kw)
        wait_for(lambda: not fleet.hosts_rows()["twin"]["live"], 10, what="lease expired")
        assert fs.acquire(c, "twin", instance="two", **kw).token > first.token


@pytest.mark.parametrize("url", ["notaurl", "postgres:/nope", "http://db/tether",
                                 "postgresql://a b@/x"])
def test_a_malformed_fleet_url_is_a_usage_error_not_an_unreachable_database(
        fleet: Fleet, url: str) -> None:
    home = new_home()
    try:
        d = DaemonProc(home)
        for args in (("--fleet", url, "hosts"), ("fleet", "init", url),
                     ("--fleet", url, "daemon", "--host-name", "h1")):
            r = d.cli(*args, timeout=30)
            assert r.returncode == 2, (args, r.returncode, r.stderr)
            assert b"is not a PostgreSQL URL" in r.stderr and b"postgresql://USER@HOST" \
                in r.stderr, r.stderr
    finally:
        remove_home(home)


@pytest.mark.parametrize("args, says", [
    (("--host-name", "a b'\"; DROP"), b"is not a host name"),
    (("--host-name", "x" * 1000), b"1000 characters"),
    (("--host-name", "\u00fcn\u00ef-\u2603"), b"is not a host name"),
    (("--label", "gpu"), b"'gpu' is not KEY=VALUE"),
])
def test_bad_fleet_host_options_are_refused_before_the_daemon_starts(
        fleet: Fleet, args: tuple[str, ...], says: bytes) -> None:
    home = new_home()
    try:
        r = DaemonProc(home).cli("daemon", "--fleet", fleet.url, *args, timeout=30)
        assert r.returncode == 2 and says in r.stderr, (r.returncode, r.stderr)
        assert fleet.hosts_rows() == {}
    finally:
        remove_home(home)


def test_fleet_host_options_without_fleet_are_a_usage_error(tmp_path: object) -> None:
    home = new_home()
    try:
        r = DaemonProc(home).cli("daemon", "--host-name", "h1", "--capacity", "2",
                                 timeout=30)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert b"--host-name, --capacity only apply to a fleet host: add --fleet URL" \
            in r.stderr, r.stderr
    finally:
        remove_home(home)


def test_run_options_a_placement_would_drop_are_refused(fleet: Fleet) -> None:
    fleet.add("h1")
    wait_for(lambda: "h1" in fleet.hosts_rows(), 10, what="h1's lease")
    for args, says in ((("--sandbox", "only-here"), b"--sandbox:"),
                       (("--timeout", "5", "--budget", "1"), b"--timeout, --budget:")):
        r = fleet.cli("run", "--host", "auto", *args, "--", "true", check=False)
        assert r.returncode == 2 and says in r.stderr, (r.returncode, r.stderr)
        assert b"does not carry" in r.stderr
    with fleet.db() as c:
        assert c.execute("SELECT count(*) AS n FROM work").fetchone()["n"] == 0
    assert fleet.cli("run", "--host", "auto", "-d", "-e", "A=1", "--", "true").returncode == 0
