"""Agents' egress (issue 21): a bwrap agent in the default sandbox has a network namespace of
its own whose only way out is the home's egress proxy, which lets through only its
policy's hosts. A real daemon, real bubblewrap, the real proxy and bridge, a real
PostgreSQL and the real dashboard on the host.

The allowed server runs in a network namespace this test creates (``ip netns`` and a veth
pair; it needs root, else it runs on the host's loopback), at an address on that
namespace's loopback, under a name the daemon's proxy resolves through
``TETHER_TEST_RESOLVE`` (docs/SECURITY.md): the sandbox itself resolves nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc, new_home, remove_home, wait_for
from tests.pg import PgCluster, bindir
from tether.client.errors import TetherError
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}"),
              pytest.mark.xdist_group("user-home")]  # agents share the real ~/.claude

SERVER = r'''
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(int(self.path.partition("=")[2])):
                self.wfile.write(f"{i}\n".encode())
                self.wfile.flush()
                time.sleep(0.1)
            return
        body = f"hello from {self.server.server_address[0]} for {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

srv = ThreadingHTTPServer((sys.argv[1], 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
'''


class Remote:
    """The allowed server: in a network namespace of the test's own, at an address of that
    namespace's loopback routed from the host through a veth pair; without root or
    iproute2, on the host's loopback (the proxy still resolves its name on the host)."""

    def __init__(self) -> None:
        n = os.getpid() % 200 + 20
        self.ns = f"tteg{os.getpid()}"
        self.host_if, self.ns_if = f"teg{os.getpid()}h", f"teg{os.getpid()}n"
        self.addr = f"10.232.{n}.1"
        self.netns = False
        if os.geteuid() == 0 and shutil.which("ip"):
            try:
                for cmd in (["netns", "add", self.ns],
                            ["link", "add", self.host_if, "type", "veth", "peer", "name",
                             self.ns_if],
                            ["link", "set", self.ns_if, "netns", self.ns],
                            ["addr", "add", f"10.231.{n}.1/30", "dev", self.host_if],
                            ["link", "set", self.host_if, "up"],
                            ["-n", self.ns, "addr", "add", f"10.231.{n}.2/30", "dev",
                             self.ns_if],
                            ["-n", self.ns, "link", "set", self.ns_if, "up"],
                            ["-n", self.ns, "link", "set", "lo", "up"],
                            ["-n", self.ns, "addr", "add", f"{self.addr}/32", "dev", "lo"],
                            ["route", "add", f"{self.addr}/32", "via", f"10.231.{n}.2"]):
                    subprocess.run(["ip", *cmd], check=True, capture_output=True)
                self.netns = True
            except subprocess.CalledProcessError:
                self.close()
        if not self.netns:
            self.addr = "127.0.0.1"
        prefix = ["ip", "netns", "exec", self.ns] if self.netns else []
        self.proc = subprocess.Popen([*prefix, sys.executable, "-c", SERVER, self.addr],
                                     stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def close(self) -> None:
        if getattr(self, "proc", None) is not None:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["ip", "route", "del", f"{self.addr}/32"], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


@pytest.fixture(scope="module")
def remote() -> Iterator[Remote]:
    r = Remote()
    yield r
    r.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster | None]:
    """A PostgreSQL on the host listening on 127.0.0.1 (and its Unix socket in /tmp)."""
    if bindir() is None:
        if os.environ.get("TETHER_REQUIRE_POSTGRES") == "1":
            raise RuntimeError("PostgreSQL is required (TETHER_REQUIRE_POSTGRES=1)")
        yield None
        return
    c = PgCluster(tcp_port=free_port())
    c.start()
    yield c
    c.destroy()


def home_env(remote: Remote) -> dict[str, str]:
    return {"TETHER_DEFAULT_RUNTIME": "auto", "TETHER_AGENT_TICK": "0.2",
            "TETHER_TEST_RESOLVE": f"remote.test={remote.addr};denied.test={remote.addr};"
                                   "flood.test=127.0.0.1"}


@pytest.fixture
def daemon_on(remote: Remote) -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env=home_env(remote))
    d.start()
    yield d
    d.cleanup()
    remove_home(d.home)


def tether(d: DaemonProc, *args: str, cwd: Path | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd,
                          capture_output=True, timeout=timeout, env=d.env)


def start_dashboard(d: DaemonProc) -> tuple[int, subprocess.Popen[bytes]]:
    """The real dashboard (``tether web``) on a loopback port of the host."""
    proc = subprocess.Popen([*TETHER, "--home", str(d.home), "web", "--listen", "127.0.0.1",
                             "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=d.env,
                            start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "http://" not in line:
        proc.kill()
        raise AssertionError(f"tether web did not start: {line!r} "
                             f"{proc.stderr.read().decode() if proc.stderr else ''}")
    port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
    return port, proc


# What the agent does inside its sandbox: every attempt out, each result in a report.
PROBE_AGENT = r'''
import json, os, socket, sys, urllib.request, urllib.error
args = json.loads(sys.argv[1])
port = args["port"]
out = {"env": {k: os.environ.get(k) for k in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY",
                                              "https_proxy", "http_proxy", "no_proxy")}}

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.headers.get("X-Proxy-Error")]
    except Exception as e:
        return ["error", repr(e)]

def connect(target, then=b""):
    """CONNECT through the proxy by hand: the status line, and what a request in the
    tunnel answered."""
    try:
        s = socket.create_connection(("127.0.0.1", 3128), 10)
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        status = head.split(b"\r\n")[0].decode()
        body = b""
        if then and " 200 " in status:
            s.sendall(then)
            while chunk := s.recv(4096):
                body += chunk
        s.close()
        return [status, body.decode(errors="replace")[-80:]]
    except Exception as e:
        return ["error", repr(e)]

def direct(host, p):
    try:
        socket.create_connection((host, p), 3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__ + ": " + str(e)

req = f"GET /x HTTP/1.1\r\nHost: remote.test\r\nConnection: close\r\n\r\n".encode()
out["allowed_http"] = get(f"http://remote.test:{port}/x")
out["allowed_connect"] = connect(f"remote.test:{port}", req)
out["denied_name"] = get(f"http://denied.test:{port}/x")
out["raw_ip_proxy"] = connect(f"{args['addr']}:{port}")
out["raw_ip_direct"] = direct(args["addr"], port)
out["public_ip_direct"] = direct("1.1.1.1", 443)
out["dashboard_direct"] = direct("127.0.0.1", args["dashboard"])
out["dashboard_proxy"] = connect(f"127.0.0.1:{args['dashboard']}")
out["dashboard_localhost"] = connect(f"localhost:{args['dashboard']}")
out["dashboard_no_proxy"] = get(f"http://localhost:{args['dashboard']}/")  # NO_PROXY: direct
if args.get("pg"):
    out["pg_direct"] = direct("127.0.0.1", args["pg"])
    out["pg_proxy"] = connect(f"127.0.0.1:{args['pg']}")
    out["pg_socket_seen"] = os.path.exists(args["pg_sock"])
try:
    socket.getaddrinfo("remote.test", port)
    out["resolves"] = True
except OSError:
    out["resolves"] = False
# Attacks on the proxy itself: its socket directory is read-only, the rest is hidden.
try:
    open("/run/tether-egress/planted", "w").close()
    out["plant"] = "written"
except OSError as e:
    out["plant"] = type(e).__name__
out["sees_egress_dir"] = os.path.exists(os.path.join(os.environ["TETHER_HOME"], "egress"))
with open("report.tmp", "w") as f:
    json.dump(out, f)
os.rename("report.tmp", "report.json")
'''


def run_agent(d: DaemonProc, work: Path, script: str, args: dict[str, Any],
              *extra: str) -> str:
    (work / "agent.py").write_text(script)
    r = tether(d, "run", "--agent", "generic", "--revival", "reap", "-d", *extra, "--",
               sys.executable, "agent.py", json.dumps(args), cwd=work)
    assert r.returncode == 0, r.stderr
    x = d.client().exec_get(r.stdout.decode().strip())
    assert x.lineage is not None
    return x.lineage


def egress_events(d: DaemonProc, lineage: str) -> list[Any]:
    c = d.client()
    return [e for e in c.events_list(limit=1000).events
            if e.type == "agent.egress_denied" and e.data.get("lineage") == lineage]


def test_an_agent_reaches_only_its_allowed_hosts_and_denials_are_journaled(
        daemon_on: DaemonProc, remote: Remote, pg: PgCluster | None, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    dash_port, dash = start_dashboard(d)
    try:
        lineage = run_agent(d, work, PROBE_AGENT, {
            "port": remote.port, "addr": remote.addr, "dashboard": dash_port,
            **({"pg": pg.tcp_port, "pg_sock": str(pg.sock)} if pg is not None else {})},
            "--allow-domain", "remote.test")
        rep = wait_for(lambda: json.loads((work / "report.json").read_text())
                       if (work / "report.json").exists() else None, timeout=60,
                       what="the agent's report")
    finally:
        dash.kill()
        dash.wait()
    assert rep["env"]["HTTPS_PROXY"] == rep["env"]["http_proxy"] == "http://127.0.0.1:3128"
    assert rep["env"]["NO_PROXY"] == "localhost,127.0.0.1,::1"
    # The allowed host, through the proxy, both ways (plain HTTP and a CONNECT tunnel).
    assert rep["allowed_http"] == [200, f"hello from {remote.addr} for remote.test:{remote.port}"]
    assert rep["allowed_connect"][0] == "HTTP/1.1 200 Connection Established"
    assert rep["allowed_connect"][1].endswith(f"hello from {remote.addr} for remote.test")
    # Everything else fails: a name not in the policy (though the proxy could resolve
    # it), the same server's raw address, the host's dashboard, PostgreSQL, the internet.
    assert rep["denied_name"] == [403, "blocked-by-allowlist"]
    assert rep["raw_ip_proxy"][0].startswith("HTTP/1.1 403")
    assert rep["raw_ip_direct"].startswith(("OSError", "ConnectionRefusedError")), rep
    assert rep["public_ip_direct"].startswith("OSError"), rep  # no route out at all
    assert rep["dashboard_direct"].startswith("ConnectionRefusedError"), rep  # its own lo
    assert rep["dashboard_proxy"][0].startswith("HTTP/1.1 403")
    assert rep["dashboard_localhost"][0].startswith("HTTP/1.1 403")
    assert "Connection refused" in rep["dashboard_no_proxy"][1]  # its own loopback
    if pg is not None:
        assert rep["pg_direct"].startswith("ConnectionRefusedError"), rep
        assert rep["pg_proxy"][0].startswith("HTTP/1.1 403")
        assert rep["pg_socket_seen"] is False  # the sandbox's /tmp is its own
    assert rep["resolves"] is False  # names are the proxy's to resolve, on the host
    assert rep["plant"] in ("OSError", "PermissionError")
    assert rep["sees_egress_dir"] is False

    # Journaled, each denied host once (rate-limited), and shown by lineage inspect.
    denied = {f"{remote.addr}:{remote.port}", f"denied.test:{remote.port}",
              f"127.0.0.1:{dash_port}", f"localhost:{dash_port}",
              *([f"127.0.0.1:{pg.tcp_port}"] if pg is not None else [])}

    def journaled() -> set[str] | None:
        got = {f"{e.data['host']}:{e.data['port']}" for e in egress_events(d, lineage)}
        return got if got >= denied else None
    assert wait_for(journaled, timeout=15, what="the denials journaled") == denied
    ev = next(e for e in egress_events(d, lineage) if e.data["host"] == "denied.test")
    assert ev.reason == f"egress to denied.test:{remote.port} denied: not in the allow-list"
    inspect = tether(d, "lineage", "inspect", "--json", lineage)
    assert inspect.returncode == 0, inspect.stderr
    egress = json.loads(inspect.stdout)["egress"]
    assert egress["network"] == "proxy"
    assert "remote.test" in egress["allow"] and "api.anthropic.com" in egress["allow"]
    assert egress["denied"] == len(denied)
    assert {f"{h['host']}:{h['port']}" for h in egress["denied_hosts"]} == denied


STREAM_AGENT = r'''
import json, os, socket, sys, time, urllib.request
args = json.loads(sys.argv[1])
port = args["port"]

def fetch():
    with urllib.request.urlopen(f"http://remote.test:{port}/x", timeout=10) as r:
        return r.status

s = socket.create_connection(("127.0.0.1", 3128), 10)
s.sendall(f"CONNECT remote.test:{port} HTTP/1.1\r\n\r\n".encode())
s.sendall(f"GET /stream?n=60 HTTP/1.1\r\nHost: remote.test\r\n\r\n".encode())
open("streaming", "w").close()
data = b""
while chunk := s.recv(4096):
    data += chunk
    if b"\n25\n" in data and not os.path.exists("mid.json"):
        while not os.path.exists("go.killed"):  # the test kills the daemon now
            time.sleep(0.02)
        with open("mid.tmp", "w") as f:
            json.dump({"new_request_while_down": fetch()}, f)
        os.rename("mid.tmp", "mid.json")
body = data.split(b"\r\n\r\n", 2)[2].decode()  # after the CONNECT and the GET heads
while not os.path.exists("go.restarted"):
    time.sleep(0.02)
with open("report.tmp", "w") as f:
    json.dump({"lines": body.split(), "after_restart": fetch()}, f)
os.rename("report.tmp", "report.json")
'''


def test_a_daemon_sigkill_cuts_no_connection_and_the_next_daemon_adopts_the_proxy(
        daemon_on: DaemonProc, remote: Remote, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    run_agent(d, work, STREAM_AGENT, {"port": remote.port}, "--allow-domain", "remote.test")
    wait_for(lambda: (work / "streaming").exists(), timeout=30, what="the stream")
    proxy = json.loads((d.home / "egress" / "proxy.json").read_text())
    d.kill9()  # mid-stream: the proxy, the bridge and the tunnel are not the daemon's
    (work / "go.killed").touch()
    mid = wait_for(lambda: json.loads((work / "mid.json").read_text())
                   if (work / "mid.json").exists() else None, timeout=30, what="mid.json")
    assert mid == {"new_request_while_down": 200}
    d.start()
    assert json.loads((d.home / "egress" / "proxy.json").read_text()) == proxy  # adopted
    (work / "go.restarted").touch()
    rep = wait_for(lambda: json.loads((work / "report.json").read_text())
                   if (work / "report.json").exists() else None, timeout=30, what="report")
    assert rep["lines"] == [str(i) for i in range(60)]  # not one line lost or cut
    assert rep["after_restart"] == 200


REVIVED_AGENT = r'''
import json, os, sys, time, urllib.request
port = json.loads(sys.argv[1])["port"]
with urllib.request.urlopen(f"http://remote.test:{port}/x", timeout=10) as r:
    res = r.status
attempt = os.environ["TETHER_ATTEMPT"]
with open(f"r.{attempt}.tmp", "w") as f:
    json.dump(res, f)
os.rename(f"r.{attempt}.tmp", f"r.{attempt}.json")
time.sleep(300)
'''


def _zygotes_with_bridge(ws: Path) -> list[int]:
    """bwrap pids of zygotes for ``ws`` whose sandbox runs the bridge before its stub."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"bwrap" and argv[-1] == b"tether-zygote" \
                and os.fsencode(str(ws)) in argv and any(a.endswith(b"egress/bridge.py")
                                                         for a in argv):
            found.append(int(d))
    return found


def test_a_revived_agent_starts_in_a_zygote_whose_bridge_already_listens(
        daemon_on: DaemonProc, remote: Remote, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(REVIVED_AGENT)
    r = tether(d, "run", "--agent", "generic", "-d", "--allow-domain", "remote.test", "--",
               sys.executable, "agent.py", json.dumps({"port": remote.port}), cwd=work)
    assert r.returncode == 0, r.stderr
    c = d.client()
    first = c.exec_get(r.stdout.decode().strip())
    assert wait_for(lambda: json.loads((work / "r.1.json").read_text())
                    if (work / "r.1.json").exists() else None, timeout=30, what="r.1") == 200
    zygotes = wait_for(lambda: _zygotes_with_bridge(work), timeout=30, what="a zygote")
    os.kill(d.handles(first.id)["child"]["pid"], 9)
    assert wait_for(lambda: json.loads((work / "r.2.json").read_text())
                    if (work / "r.2.json").exists() else None, timeout=30, what="r.2") == 200
    assert first.lineage is not None
    second = c.exec_get(c.lineage_get(first.lineage).exec or "")
    assert second.id != first.id and second.pid in zygotes  # the warm start, bridged


LOOP_AGENT = r'''
import json, os, sys, time, urllib.request
port = json.loads(sys.argv[1])["port"]
while not os.path.exists("stop"):
    try:
        with urllib.request.urlopen(f"http://remote.test:{port}/x", timeout=5) as r:
            res = str(r.status)
    except Exception as e:
        res = type(e).__name__
    with open("results", "a") as f:
        f.write(res + "\n")
    time.sleep(0.1)
'''


def test_a_killed_proxy_is_started_again_and_the_agent_gets_its_way_back(
        daemon_on: DaemonProc, remote: Remote, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    run_agent(d, work, LOOP_AGENT, {"port": remote.port}, "--allow-domain", "remote.test")
    results = work / "results"
    wait_for(lambda: results.exists() and "200" in results.read_text(), timeout=30,
             what="a first answer")
    old = json.loads((d.home / "egress" / "proxy.json").read_text())
    os.kill(old["pid"], 9)  # not the daemon's child: the daemon sees it gone by its pid
    seen = len(results.read_text().split())

    def new_proxy() -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            now = json.loads((d.home / "egress" / "proxy.json").read_text())
            return now if now["pid"] != old["pid"] else None
        return None
    wait_for(new_proxy, timeout=15, what="another proxy")
    wait_for(lambda: "200" in results.read_text().split()[seen + 1:], timeout=15,
             what="an answer through the new proxy")
    (work / "stop").touch()


FLOOD_AGENT = r'''
import json, sys, urllib.request, urllib.error
codes = []
def get(url):
    try:
        urllib.request.urlopen(url, timeout=10)
        return 200
    except urllib.error.HTTPError as e:
        return e.code
for _ in range(300):
    codes.append(get("http://flood.test/"))
for i in range(30):
    codes.append(get(f"http://h{i}.flood.test/"))
with open("report.tmp", "w") as f:
    json.dump(codes, f)
import os
os.rename("report.tmp", "report.json")
'''


def test_a_flood_of_denied_requests_writes_a_few_lines_not_a_flood(
        daemon_on: DaemonProc, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    lineage = run_agent(d, work, FLOOD_AGENT, {})
    codes = wait_for(lambda: json.loads((work / "report.json").read_text())
                     if (work / "report.json").exists() else None, timeout=60, what="report")
    assert codes == [403] * 330
    # While it ran: one line for the 300 to one host (their repeats summed later), then at
    # most 20 lines a minute for the sandbox: 19 of the 30 other hosts. Once it ended
    # (its key dropped), the sums: the 299 repeats, and the 11 hosts beyond the 20.
    def settled() -> list[Any] | None:
        events = egress_events(d, lineage)
        return events if sum(e.data["count"] for e in events) >= 330 else None
    events = wait_for(settled, timeout=20, what="every denial counted")
    assert sum(e.data["count"] for e in events) == 330  # none lost, none twice
    assert len(events) == 22
    assert [e.data["count"] for e in events[:20]] == [1] * 20
    assert events[0].data["host"] == "flood.test"
    assert {(e.data["host"], e.data["count"]) for e in events[20:]} == {
        ("flood.test", 299), (None, 11)}
    assert d.client().lineage_get(lineage).egress.denied == 330


def test_network_host_opts_out_of_the_proxy(remote: Remote, tmp_path: Path) -> None:
    d = DaemonProc(new_home(), env=home_env(remote))
    d.start()
    try:
        work = tmp_path / "work"
        work.mkdir()
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        script = ("import json, os, socket, sys\n"
                  "socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5).close()\n"
                  "json.dump({'proxy': os.environ.get('HTTPS_PROXY')}, open('r.tmp', 'w'))\n"
                  "os.rename('r.tmp', 'report.json')\n")
        (work / "agent.py").write_text(script)
        r = tether(d, "run", "--agent", "generic", "--revival", "reap", "--network", "host",
                   "-d", "--", sys.executable, "agent.py", str(srv.getsockname()[1]),
                   cwd=work)
        assert r.returncode == 0, r.stderr
        rep = wait_for(lambda: json.loads((work / "report.json").read_text())
                       if (work / "report.json").exists() else None, timeout=30, what="rep")
        srv.close()
        assert rep == {"proxy": None}  # the host's network, as before: no proxy at all
        assert not (d.home / "egress" / "keys").exists() or \
            not list((d.home / "egress" / "keys").iterdir())
    finally:
        d.cleanup()
        remove_home(d.home)


def test_the_policy_file_goes_when_the_lineage_ends_and_the_proxy_stops_serving_it(
        daemon_on: DaemonProc, remote: Remote, tmp_path: Path) -> None:
    d = daemon_on
    work = tmp_path / "work"
    work.mkdir()
    lineage = run_agent(d, work, "import time\ntime.sleep(0.5)\n", {})
    keys = d.home / "egress" / "keys"
    wait_for(lambda: not (keys / f"{lineage}.json").exists()
             and not (d.home / "egress" / "socks" / lineage).exists(), timeout=20,
             what="the key dropped, then its socket")
    with contextlib.suppress(FileNotFoundError):
        assert not list(keys.iterdir())


def test_an_allow_list_entry_that_is_not_a_host_is_refused_before_anything_runs(
        daemon_on: DaemonProc, tmp_path: Path) -> None:
    r = tether(daemon_on, "run", "--agent", "generic", "--allow-domain", "http://x.example/",
               "--", "true", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert b"--allow-domain: 'http://x.example/' is not a host pattern" in r.stderr
    c = daemon_on.client()  # the SDK's callers are told the same by the daemon
    with pytest.raises(TetherError) as err:
        c.agent_start(["true"], provider="generic", cwd=str(tmp_path),
                      allow_domains=["api.example.com", "bad host"])
    assert err.value.code == "INVALID_PARAMS"
    assert "allow_domains: 'bad host' is not a host pattern" in err.value.message
    assert c.lineage_list(all=True) == []


def test_an_agent_whose_proxy_cannot_start_fails_with_a_reason_and_the_daemon_serves_on(
        daemon_on: DaemonProc, tmp_path: Path) -> None:
    d = daemon_on
    (d.home / "egress" / "proxy.log").mkdir(parents=True)  # the proxy's stderr cannot open
    r = tether(d, "run", "--agent", "generic", "--", "true", cwd=tmp_path)
    assert r.returncode == 1
    assert b"the egress proxy cannot serve this agent" in r.stderr, r.stderr
    assert b"network: host" in r.stderr  # what to do next
    assert d.client().health().status == "SERVING"


def test_a_plain_command_cannot_ask_for_an_allow_list(daemon_on: DaemonProc,
                                                      tmp_path: Path) -> None:
    r = tether(daemon_on, "run", "--allow-domain", "x.example", "--", "true", cwd=tmp_path)
    assert r.returncode == 2
    assert b"--allow-domain is for agents" in r.stderr
