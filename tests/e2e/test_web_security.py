"""The dashboard under attack (issue 21, finding 2 and the web parts of 5), with the real
`tether web`, the real daemon, Debian's chromium and real bubblewrap:

* no tether credential reaches another port of the host (browsers send a host's cookies
  to every port): a server the same browser visits sees none, and its page cannot act;
* an agent in a real bwrap sandbox, running a dev server the user's browser visits,
  gets nothing it can use against the dashboard, and nothing runs outside its sandbox;
* commands started through the dashboard, the SDK and the raw socket run sandboxed in a
  project directory or are refused, never run unsandboxed;
* ``GET //evil.example/x?token=T`` redirects nowhere; a foreign ``Host`` is refused;
* 1,500 half-sent requests are dropped after the header deadline and never hold more
  than the connection cap, while the dashboard keeps answering;
* what agents write (command lines, handoffs) is shown as text under a strict
  Content-Security-Policy, never run as script.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.harness import TETHER, DaemonProc, RawConn, new_home, remove_home, wait_for
from tests.webpage import Web, chromium, need_browser, open_page
from tether.client.errors import TetherError
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.xdist_group("browser")
AUTO = {"TETHER_DEFAULT_RUNTIME": "auto"}


@pytest.fixture
def d() -> Iterator[DaemonProc]:
    home = new_home()
    proc = DaemonProc(home)
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()
        remove_home(home)


@pytest.fixture
def web(d: DaemonProc) -> Iterator[Web]:
    w = Web(d)
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A real user home directory under /home (the daemon's $HOME)."""
    home = Path(f"/home/tetherweb-{uuid.uuid4().hex[:8]}")
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("key")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def auto(user_home: Path) -> Iterator[DaemonProc]:
    """A daemon with the product's default sandbox (``auto``: bwrap here)."""
    if not PROBE.available:
        pytest.skip(f"bwrap: {PROBE.reason}")
    proc = DaemonProc(new_home(), env={**AUTO, "HOME": str(user_home)})
    proc.start()
    yield proc
    proc.cleanup()
    remove_home(proc.home)


def request(base: str, path: str, *, method: str = "GET", body: Any = None,
            **headers: str) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Recorder:
    """A local HTTP server on another port, as an agent's dev server would be: it keeps
    every request's headers."""

    def __init__(self, page: bytes = b"<html><body>dev server</body></html>") -> None:
        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------- credentials
def test_no_tether_credential_reaches_a_server_on_another_port(
        d: DaemonProc, web: Web) -> None:
    """The browser opened the dashboard with its token, then visits a local server on
    another port (an agent's dev server): that server receives no cookie, no token, no
    session key; its page cannot start anything on the dashboard; the dashboard still
    works."""
    need_browser()
    outside = d.home.parent / f"web-csrf-{uuid.uuid4().hex[:6]}"
    attack = (f"<script>fetch('{web.base}/api/start', {{method: 'POST', credentials: 'include',"
              f" headers: {{'Content-Type': 'text/plain'}}, body: JSON.stringify({{argv: ['sh', "
              f"'-c', 'touch {outside}'], cwd: '/tmp'}})}}).then(r => document.title = 'status ' "
              f"+ r.status, e => document.title = 'refused')</script>")
    other = Recorder(attack.encode())
    try:
        with chromium() as ctx:
            page = open_page(ctx, web.url)
            key = page.evaluate("() => localStorage.getItem('tether.session')")
            assert key and key != web.token
            assert ctx.cookies() == [] and page.evaluate("() => document.cookie") == ""
            assert "token" not in page.url
            visit = ctx.new_page()
            visit.goto(f"http://127.0.0.1:{other.port}/")
            wait_for(lambda: visit.title() in ("refused", "status 401", "status 403"), 10,
                     what="the other page's request to the dashboard")
            visit.goto(f"http://localhost:{other.port}/")
            assert visit.evaluate("() => localStorage.getItem('tether.session')") is None
            page.reload()
            page.wait_for_selector("#daemon.ok")
        assert other.seen, "the browser did not visit the other server"
        for headers in other.seen:
            blob = json.dumps(headers)
            assert web.token not in blob and key not in blob, headers
            assert "cookie" not in headers, headers
        assert not outside.exists()
    finally:
        other.close()


def test_the_token_is_exchanged_once_and_a_restarted_dashboard_forgets_its_keys(
        d: DaemonProc) -> None:
    need_browser()
    w = Web(d)
    port = w.port
    try:
        with chromium() as ctx:
            page = open_page(ctx, w.url)
            assert page.url == f"{w.base}/"  # the token left the address bar
            assert w.token not in page.content()
            page.go_back()  # the entry the token was in now holds the plain URL
            assert "token" not in page.url
            page.go_forward()
            w.stop()
            w = Web(d, "--port", str(port))  # a new process on the same port (origin)
            page.wait_for_selector("#login", state="visible", timeout=20000)
            assert page.text_content("#daemon") == "no key"
            old = page.evaluate("() => localStorage.getItem('tether.session')")
            status, _, _ = request(w.base, "/api/overview", Authorization=f"Bearer {old}")
            assert status == 401
            page.goto(w.url)
            page.wait_for_selector("#daemon.ok", timeout=15000)
    finally:
        w.stop()


def test_the_token_guards_every_route_and_read_only_refuses_actions(d: DaemonProc) -> None:
    w = Web(d, "--read-only")
    try:
        token = w.token
        status, _, body = request(w.base, "/api/overview")
        assert status == 401 and b"token" in body
        assert request(w.base, "/api/overview", Authorization="Bearer wrong")[0] == 401
        assert request(w.base, f"/api/overview?token={token}")[0] == 401  # headers only
        status, _, body = request(w.base, "/api/overview", Authorization=f"Bearer {token}")
        assert status == 200 and json.loads(body)["read_only"] is True
        assert request(w.base, "/api/kill", method="POST", body={},
                       Authorization=f"Bearer {token}", Origin="http://evil.example")[0] == 403
        status, _, body = request(w.base, "/api/kill", method="POST", body={},
                                  Authorization=f"Bearer {token}")
        assert status == 403 and json.loads(body)["error"]["code"] == "READ_ONLY"
        status, _, body = request(w.base, "/metrics", Authorization=f"Bearer {token}")
        assert status == 200 and b"# TYPE tether_" in body
        assert request(w.base, "/metrics")[0] == 401
        # The page and its assets hold no data: served to anyone, with no credential.
        status, headers, body = request(w.base, "/")
        assert status == 200 and b'content=""' in body and "Set-Cookie" not in headers
        status, _, _ = request(w.base, "/?token=wrong")
        assert status == 401
        mode = (d.home / "web.token").stat().st_mode & 0o777
        assert mode == 0o600 and (d.home / "web.token").read_text() == token
    finally:
        w.stop()


def test_no_redirect_leaves_the_dashboard_and_a_foreign_host_is_refused(
        d: DaemonProc, web: Web) -> None:
    for path in (f"//evil.example/x?token={web.token}", f"/\\evil.example?token={web.token}",
                 f"//evil.example/?token={web.token}"):
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        assert not 300 <= r.status < 400 and r.getheader("Location") is None, (path, r.status)
        conn.close()
    # A page served from another name that resolves here (DNS rebinding) is refused.
    for path in ("/", "/api/overview"):
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        conn.request("GET", path, headers={"Host": f"evil.example:{web.port}",
                                           "Authorization": f"Bearer {web.token}"})
        assert conn.getresponse().status == 403
        conn.close()


def test_what_agents_write_is_shown_as_text_under_a_strict_csp(
        d: DaemonProc, web: Web) -> None:
    need_browser()
    c = d.client()
    x = c.exec_start(["sh", "-c", "echo '<img src=x onerror=window.__pwned=1>'; sleep 30",
                      "<script>window.__pwned=2</script>"], name="markup")
    for path in ("/", "/execs", "/static/app.js", "/api/overview"):
        _, headers, _ = request(web.base, path, Authorization=f"Bearer {web.token}")
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, csp
        assert headers["referrer-policy"] == "no-referrer"
    with chromium() as ctx:
        page = open_page(ctx, web.url)
        page.wait_for_selector(f'tr[data-exec="{x.id}"]')
        assert "<script>window.__pwned=2</script>" in page.text_content(f'tr[data-exec="{x.id}"]')
        page.goto(f"{web.base}/exec/{x.id}")
        page.wait_for_function("() => (document.querySelector('#logs')?.textContent || '')"
                               ".includes('onerror')")
        assert page.evaluate("() => window.__pwned") is None


# ---------------------------------------------------------------------- slow clients
def test_half_sent_requests_are_dropped_and_never_hold_more_than_the_cap(
        d: DaemonProc, web: Web) -> None:
    """1,500 connections each send half a request and stop. The dashboard keeps
    answering, its process never holds more sockets than its cap, and once the header
    deadline passed it has closed every one of them."""
    from tether.web.server import HEADER_TIMEOUT, MAX_CONNECTIONS

    def sockets() -> int:
        n = 0
        for fd in os.listdir(f"/proc/{web.proc.pid}/fd"):
            with contextlib.suppress(OSError):
                n += os.readlink(f"/proc/{web.proc.pid}/fd/{fd}").startswith("socket:")
        return n

    held: list[socket.socket] = []
    t0 = time.monotonic()
    try:
        for _ in range(1500):
            s = socket.create_connection(("127.0.0.1", web.port), timeout=10)
            s.sendall(b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
            held.append(s)
        status, _, _ = request(web.base, "/api/overview", Authorization=f"Bearer {web.token}")
        assert status == 200
        most = sockets()
        assert most <= MAX_CONNECTIONS + 32, f"{most} sockets held"
        sent = time.monotonic()

        def closed(s: socket.socket) -> bool:
            s.setblocking(False)
            try:
                return s.recv(1024) == b""
            except BlockingIOError:
                return False  # open, nothing to read
            except OSError:
                return True
        still = held
        while still and time.monotonic() < sent + HEADER_TIMEOUT + 5:
            time.sleep(0.5)
            still = [s for s in still if not closed(s)]
        assert not still, f"{len(still)} half-sent requests still open after the deadline"
        assert time.monotonic() - t0 > HEADER_TIMEOUT - 1  # closed at the deadline, not at once
        assert request(web.base, "/api/overview",
                       Authorization=f"Bearer {web.token}")[0] == 200
    finally:
        for s in held:
            s.close()


# ---------------------------------------------------------------------- sandboxed starts
def test_the_dashboard_starts_commands_sandboxed_in_a_project_directory_or_refuses(
        auto: DaemonProc, user_home: Path) -> None:
    w = Web(auto)
    auth = {"Authorization": f"Bearer {w.token}"}
    project = user_home / "src" / "app"
    project.mkdir(parents=True)
    probe = (f"pwd; test -e {user_home}/.ssh/id_ed25519 && echo sees-ssh; "
             f"test -S {auto.home}/tether.sock && echo sees-tether; echo done")
    try:
        for body, code in (({"argv": ["sh", "-c", "id"]}, "CWD_REQUIRED"),
                           ({"argv": ["sh", "-c", "id"], "cwd": str(user_home)},
                            "CANNOT_SANDBOX_HERE"),
                           ({"argv": ["sh", "-c", "id"], "cwd": "/"}, "CANNOT_SANDBOX_HERE")):
            status, _, reply = request(w.base, "/api/start", method="POST", body=body, **auth)
            assert status == 400, (body, status, reply)
            err = json.loads(reply)["error"]
            assert err["code"] == code, err
            assert "unsandboxed" not in err["message"] or "not run unsandboxed" in err["message"]
        status, _, reply = request(w.base, "/api/start", method="POST",
                                   body={"argv": ["sh", "-c", probe], "cwd": str(project)}, **auth)
        assert status == 200, reply
        x = json.loads(reply)
        c = auto.client()
        done = c.exec_wait(x["id"], timeout=30)
        assert done.exit_code == 0 and done.notice is None
        assert b"".join(c.read_logs(x["id"])) == f"{project}\ndone\n".encode()
        assert [e.id for e in c.exec_list(all=True)] == [x["id"]]  # nothing else ran
    finally:
        w.stop()


def test_the_sdk_and_the_socket_refuse_what_the_default_sandbox_cannot_confine(
        auto: DaemonProc, user_home: Path, tmp_path: Path) -> None:
    c = auto.client()
    for kw in ({}, {"cwd": str(user_home)}, {"cwd": "/"}):
        with pytest.raises(TetherError) as e:
            c.exec_start(["sh", "-c", "id"], **kw)
        assert e.value.code == "CANNOT_SANDBOX_HERE", e.value
        assert "not run unsandboxed" in e.value.message
    with RawConn(auto.socket) as conn:
        reply = conn.call("exec.start", {"argv": ["pwd"]})
    assert reply["error"]["data"]["code"] == "CANNOT_SANDBOX_HERE", reply
    assert c.exec_list(all=True) == []  # nothing was started, nothing journaled as started
    work = tmp_path / "work"
    work.mkdir()
    x = c.exec_start(["pwd"], cwd=str(work))
    assert c.exec_wait(x.id, timeout=30).exit_code == 0 and x.notice is None


def test_a_home_without_bubblewrap_refuses_instead_of_running_unsandboxed(
        user_home: Path, tmp_path: Path) -> None:
    """``auto`` finds no sandbox when bwrap is missing: the SDK is refused; ``tether run``
    (at its user's terminal) still runs the command, as before."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for p in Path("/usr/bin").iterdir():
        if p.name != "bwrap":
            (bin_dir / p.name).symlink_to(p)
    env = {**AUTO, "HOME": str(user_home), "PATH": f"{Path(sys.executable).parent}:{bin_dir}"}
    proc = DaemonProc(new_home(), env=env)
    proc.start()
    try:
        c = proc.client()
        assert c.sandbox_get("default").spec.runtime == "process"
        with pytest.raises(TetherError) as e:
            c.exec_start(["true"], cwd=str(tmp_path))
        assert e.value.code == "CANNOT_SANDBOX_HERE"
        assert "found no sandbox on this host" in e.value.message, e.value.message
        r = proc.cli("run", "--", "echo", "at-the-terminal")
        assert r.returncode == 0 and r.stdout == b"at-the-terminal\n", r
    finally:
        proc.cleanup()
        remove_home(proc.home)


# ---------------------------------------------------------------------- from a sandbox
AGENT = r'''
import json, os, sys, threading, time, urllib.request, urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
dash, outside, home = sys.argv[1], sys.argv[2], sys.argv[3]
seen, results = [], []

class Dev(BaseHTTPRequestHandler):
    def do_GET(self):
        seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200); self.send_header("Content-Type", "text/html"); self.end_headers()
        self.wfile.write(b"<html><body>my dev server</body></html>")
    def log_message(self, *a): pass

srv = ThreadingHTTPServer(("127.0.0.1", 0), Dev)
threading.Thread(target=srv.serve_forever, daemon=True).start()
with open("port.tmp", "w") as f: f.write(str(srv.server_address[1]))
os.rename("port.tmp", "port")

def attempt(what, path, method="GET", headers=None):
    body = json.dumps({"argv": ["sh", "-c", f"id > {outside}/pwned-{len(results)}"]}).encode()
    req = urllib.request.Request(dash + path, data=body if method == "POST" else None,
                                 method=method, headers={"Content-Type": "application/json",
                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            results.append([what, path, r.status])
    except urllib.error.HTTPError as e:
        results.append([what, path, e.code])
    except OSError as e:
        results.append([what, path, f"unreachable: {e}"])

deadline = time.time() + 120  # the test says when the browser's visit is over
while not os.path.exists("visit.done") and time.time() < deadline:
    time.sleep(0.1)
creds = []
for h in seen:
    if "cookie" in h: creds.append({"Cookie": h["cookie"]})
    if "authorization" in h: creds.append({"Authorization": h["authorization"]})
for hdr in [{}] + creds:
    attempt(f"with {sorted(hdr)}", "/api/start", "POST", hdr)
    attempt(f"with {sorted(hdr)}", "/api/overview", "GET", hdr)
try:
    open(os.path.join(home, "web.token")).read()
    results.append(["read web.token", "", "READ"])
except OSError as e:
    results.append(["read web.token", "", type(e).__name__])
with open("attack.tmp", "w") as f: json.dump({"seen": seen, "results": results}, f)
os.rename("attack.tmp", "attack.json")
'''


def test_an_agent_in_a_bwrap_sandbox_gets_nothing_from_the_dashboard(
        auto: DaemonProc, tmp_path: Path) -> None:
    """The whole of finding 2, from inside: a sandboxed ``--agent generic`` runs a dev
    server; the user's browser, logged into the dashboard, visits it; the agent replays
    whatever credential it received against ``/api/start`` (a command writing outside
    its sandbox) and ``/api/overview``, and tries to read the token file. Everything is
    refused, nothing runs outside the sandbox, and the dashboard keeps working."""
    need_browser()
    w = Web(auto)
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    outside = tmp_path / "outside"
    outside.mkdir()
    try:
        r = subprocess.run([*TETHER, "--home", str(auto.home), "run", "--agent", "generic",
                            "-d", "--", sys.executable, "agent.py", w.base, str(outside),
                            str(auto.home)], cwd=work, env=auto.env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        port = int(wait_for(lambda: (work / "port").exists() and (work / "port").read_text(),
                            30, what="the agent's dev server"))
        with chromium() as ctx:
            page = open_page(ctx, w.url)
            key = page.evaluate("() => localStorage.getItem('tether.session')")
            visit = ctx.new_page()
            try:
                visit.goto(f"http://127.0.0.1:{port}/", timeout=10000)
                visited = True
            except PlaywrightError:  # the agent has a network of its own: unreachable too
                visited = False
            # The agent attacks once the visit is over, however long the browser took to
            # get there: a fixed 20 s wait in the agent lost that race under load.
            (work / "visit.done").write_text(str(visited))
            report = json.loads(wait_for(lambda: (work / "attack.json").exists() and
                                         (work / "attack.json").read_text(), 60,
                                         what="the agent's report"))
            page.reload()
            page.wait_for_selector("#daemon.ok")
        blob = json.dumps(report["seen"])
        assert report["seen"] or not visited, "the browser's visit did not reach the agent"
        assert w.token not in blob and key not in blob, report["seen"]
        statuses = [res[2] for res in report["results"] if res[1]]
        assert statuses and all(s in (401, 403) or str(s).startswith("unreachable")
                                for s in statuses), report["results"]
        assert report["results"][-1][2] != "READ", report["results"]
        assert list(outside.iterdir()) == []
    finally:
        w.stop()
