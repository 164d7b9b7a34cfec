"""The egress policy, the proxy's request parsing, denial log and judging, the bridge's
relay, and the sandbox arguments of an agent behind the proxy: pure parts, and the proxy
and bridge run in this process or as a process against local servers (no sandbox)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.daemon.config import parse_test_resolve
from tether.egress import bridge as egress_bridge
from tether.egress import policy as p
from tether.egress import proxy as px
from tether.model.records import NetworkPolicy, SandboxSpec
from tether.runtime import bwrap
from tether.runtime.base import AgentView


# ---------------------------------------------------------------------- policy
@pytest.mark.parametrize(("text", "entry"), [
    ("api.example.com", p.Entry("api.example.com")),
    ("API.Example.COM.", p.Entry("api.example.com")),
    ("*.example.com", p.Entry("example.com", wildcard=True)),
    ("fake.test:8080", p.Entry("fake.test", 8080)),
    ("*.example.com:443", p.Entry("example.com", 443, wildcard=True)),
    ("10.1.2.3", p.Entry("10.1.2.3", address=True)),
    ("10.1.2.3:5432", p.Entry("10.1.2.3", 5432, address=True)),
    ("::1", p.Entry("::1", address=True)),
    ("[fd00::0005]:8080", p.Entry("fd00::5", 8080, address=True)),
    ("under_score.internal", p.Entry("under_score.internal")),
])
def test_entries_parse_and_print_back(text: str, entry: p.Entry) -> None:
    assert p.parse_entry(text) == entry
    assert p.parse_entry(str(entry)) == entry


@pytest.mark.parametrize(("text", "says"), [
    ("", "an empty entry"),
    ("http://x.example/", "without a scheme or path (x.example)"),
    ("x.example/path", "without a scheme or path"),
    ("a b", "is not a host pattern"),
    ("*", "is not a host pattern"),
    ("a.*.example", "is not a host pattern"),
    ("**.example", "is not a host pattern"),
    ("x.example:0", "the port must be a number from 1 to 65535"),
    ("x.example:99999", "the port must be a number from 1 to 65535"),
    ("x.example:http", "the port must be a number"),
    ("[::1", "write an IPv6 address as [ADDRESS]"),
    ("-bad.example", "is not a host pattern"),
    ("x" * 300, "is not a host pattern"),
])
def test_bad_entries_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(p.BadEntry) as err:
        p.parse_entry(text)
    assert says in str(err.value)


def test_matching_exact_wildcard_ports_and_addresses() -> None:
    pol = p.Policy.parse(["api.example.com", "*.cdn.example", "fake.test:8080", "10.0.0.5"])
    assert pol.match("api.example.com", 443) == p.Entry("api.example.com")
    assert pol.match("x.api.example.com", 443) is None  # exact means exact
    assert pol.match("a.b.cdn.example", 443) == p.Entry("cdn.example", wildcard=True)
    assert pol.match("cdn.example", 443) is None  # a wildcard is below the domain only
    assert pol.match("evilcdn.example", 443) is None
    assert pol.match("fake.test", 8080) is not None
    assert pol.match("fake.test", 8081) is None
    assert pol.match("10.0.0.5", 22) == p.Entry("10.0.0.5", address=True)
    assert pol.match("10.0.0.6", 22) is None
    # A name never stands for an address, nor an address for a name.
    assert p.Policy.parse(["localhost"]).match("127.0.0.1", 80) is None
    assert p.Policy.parse(["127.0.0.1"]).match("localhost", 80) is None


def test_an_exact_entry_wins_over_a_wildcard_for_the_same_host() -> None:
    pol = p.Policy.parse(["*.example.com", "api.example.com"])
    assert pol.match("api.example.com", 443) == p.Entry("api.example.com")


def test_policies_are_bounded_and_composed_without_repeats() -> None:
    with pytest.raises(p.BadEntry, match="at most 256"):
        p.Policy.parse([f"h{i}.example" for i in range(257)])
    assert p.compose(["a.example", "B.example"], ["b.example.", "c.example:1"]) == [
        "a.example", "b.example", "c.example:1"]


def test_public_addresses() -> None:
    for addr in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1",
                 "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00::1", "224.0.0.1",
                 "::ffff:127.0.0.1", "192.0.2.1"):
        assert not p.is_public(addr), addr
    for addr in ("8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"):
        assert p.is_public(addr), addr


def test_provider_defaults() -> None:
    assert "api.anthropic.com" in p.default_allow("claude")
    assert "api.openai.com" not in p.default_allow("claude")
    assert "api.openai.com" in p.default_allow("codex")
    assert "generativelanguage.googleapis.com" in p.default_allow("gemini")
    for other in ("generic", "aider", "my-provider-file"):
        assert {"api.anthropic.com", "api.openai.com",
                "generativelanguage.googleapis.com"} <= set(p.default_allow(other))
    for hosts in p.PROVIDER_HOSTS.values():
        for h in hosts:
            assert p.parse_entry(h) == p.Entry(h)


def test_network_modes() -> None:
    allow = NetworkPolicy(allow=["x.example"])
    assert p.network_mode(None, agent=True) == "proxy"
    assert p.network_mode(allow, agent=True) == "proxy"
    assert p.network_mode("host", agent=True) == "host"
    assert p.network_mode("none", agent=True) == p.network_mode("private", agent=True) == "none"
    for net in (None, allow, "none", "private"):  # plain execs never use the proxy
        assert p.network_mode(net, agent=False) == "none"
    assert p.network_mode("host", agent=False) == "host"


def test_the_test_name_map_is_read_strictly() -> None:
    assert parse_test_resolve("fake.test=127.0.0.1; API.test=10.0.0.2,fd00::2") == {
        "fake.test": ["127.0.0.1"], "api.test": ["10.0.0.2", "fd00::2"]}
    assert parse_test_resolve(None) == parse_test_resolve("") == {}
    for bad in ("fake.test", "fake.test=localhost", "10.0.0.1=10.0.0.2", "a b=1.2.3.4"):
        with pytest.raises(ValueError, match="TETHER_TEST_RESOLVE"):
            parse_test_resolve(bad)


# ---------------------------------------------------------------------- request heads
def test_a_connect_head() -> None:
    r = px.parse_head(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (r.host, r.port, r.head) == ("api.example.com", 443, None)
    r = px.parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")
    assert (r.host, r.port) == ("::1", 8443)


def test_a_plain_http_head_is_rewritten_for_the_origin() -> None:
    r = px.parse_head(b"POST http://user:pw@fake.test:8080/v1/messages?beta=true HTTP/1.1\r\n"
                      b"Host: evil.example\r\nProxy-Connection: keep-alive\r\n"
                      b"Proxy-Authorization: Basic x\r\nConnection: keep-alive\r\n"
                      b"Content-Length: 2\r\nX-Api-Key: k\r\n\r\n")
    assert (r.host, r.port) == ("fake.test", 8080)
    assert r.head == (b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: fake.test:8080\r\n"
                      b"Content-Length: 2\r\nX-Api-Key: k\r\nConnection: close\r\n\r\n")
    r = px.parse_head(b"GET http://fake.test?q=1 HTTP/1.0\r\n\r\n")
    assert (r.port, r.head) == (80, b"GET /?q=1 HTTP/1.0\r\nHost: fake.test\r\n"
                                     b"Connection: close\r\n\r\n")


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\n\r\n",  # origin form: not a proxy request
    b"GET https://x.example/ HTTP/1.1\r\n\r\n",  # https goes through CONNECT
    b"CONNECT x.example HTTP/1.1\r\n\r\n",  # no port
    b"CONNECT x.example:99999 HTTP/1.1\r\n\r\n",
    b"CONNECT x.example:443 SPDY/3\r\n\r\n",
    b"GET http://x.example/ HTTP/1.1\r\n folded: header\r\n\r\n",
    b"GET http://x.example/ HTTP/1.1\r\nno-colon\r\n\r\n",
    b"GARBAGE\r\n\r\n",
])
def test_bad_heads_are_refused(head: bytes) -> None:
    with pytest.raises(px.BadRequest):
        px.parse_head(head)


# ---------------------------------------------------------------------- the denial log
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_denials_are_written_once_per_window_and_summed(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(px.time, "monotonic", clock.monotonic)
    log = tmp_path / "denied.log"
    d = px.Denials(str(log))
    for _ in range(100):
        d.deny("k1", "flood.test", 443, "not in the allow-list")
    d.deny("k2", "flood.test", 443, "not in the allow-list")
    assert [(x["key"], x["count"]) for x in lines(log)] == [("k1", 1), ("k2", 1)]
    clock.now += 30
    d.flush()
    assert len(lines(log)) == 2  # the window has not passed
    clock.now += 31
    d.flush()
    assert [(x["key"], x["host"], x["count"]) for x in lines(log)][2:] == [
        ("k1", "flood.test", 99)]
    d.flush()
    assert len(lines(log)) == 3
    ns = [x["n"] for x in lines(log)]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)


def test_a_key_writes_at_most_its_lines_per_window_then_one_sum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(px.time, "monotonic", clock.monotonic)
    log = tmp_path / "denied.log"
    d = px.Denials(str(log))
    for i in range(px.DENIAL_LINES + 15):
        d.deny("k", f"h{i}.test", 80, "not in the allow-list")
    assert len(lines(log)) == px.DENIAL_LINES
    clock.now += px.DENIAL_WINDOW
    d.flush()
    last = lines(log)[-1]
    assert (last["host"], last["port"], last["count"]) == (None, None, 15)
    assert sum(x["count"] for x in lines(log)) == px.DENIAL_LINES + 15


def test_dropping_a_key_writes_its_pending_sums(tmp_path: Path) -> None:
    log = tmp_path / "denied.log"
    d = px.Denials(str(log))
    for _ in range(5):
        d.deny("k", "a.test", 80, "x")
    d.forget("k")
    assert sum(x["count"] for x in lines(log)) == 5


def test_line_numbers_keep_increasing_across_a_restart_of_the_proxy(tmp_path: Path) -> None:
    log = tmp_path / "denied.log"
    future = time.time_ns() + 10**15  # a clock that went back since the last line
    log.write_text(json.dumps({"n": future, "key": "k"}) + "\n")
    d = px.Denials(str(log))
    d.deny("k", "a.test", 80, "x")
    assert lines(log)[-1]["n"] == future + 1


# ---------------------------------------------------------------------- the proxy
class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"hello {self.path} for {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


def ask(sock: str, head: bytes, then: bytes = b"") -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(sock)
        s.sendall(head)
        out = b""
        if then:
            while b"\r\n\r\n" not in out:
                out += s.recv(4096)
            s.sendall(then)
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The real proxy process on a scratch directory; stopped by removing it."""
    root = tmp_path / "egress"
    (root / "keys").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(px.__file__).with_name(
        "run.py")), str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"resolve": {"fake.test": ["127.0.0.1"],
                                             "wild.fake.test": ["127.0.0.1"]}}).encode()
                     + b"\n")
    proc.stdin.close()
    ready = json.loads(proc.stdout.readline())
    assert ready["ready"] is True
    yield root, {**ready, "proc": proc}
    proc.kill()
    proc.wait()


def control(root: Path, req: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(root / "proxy.sock"))
        s.sendall(json.dumps(req).encode() + b"\n")
        out: dict[str, Any] = json.loads(s.makefile().readline())
    return out


def serve(root: Path, key: str, allow: list[str]) -> str:
    (root / "keys" / f"{key}.json").write_text(json.dumps({"allow": allow}))
    assert control(root, {"op": "serve", "key": key}) == {"ok": True}
    return str(root / "socks" / key / p.SOCKET_NAME)


def test_the_proxy_lets_through_only_its_keys_policy(proxy: tuple[Path, dict[str, Any]],
                                                    origin: int) -> None:
    root, _ = proxy
    a = serve(root, "a", [f"fake.test:{origin}", "*.fake.test"])
    b = serve(root, "b", [])
    ok = ask(a, f"GET http://fake.test:{origin}/x HTTP/1.1\r\nHost: y\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.0 200") or ok.startswith(b"HTTP/1.1 200")
    assert ok.endswith(f"hello /x for fake.test:{origin}".encode())
    tunnel = ask(a, f"CONNECT fake.test:{origin} HTTP/1.1\r\n\r\n".encode(),
                 b"GET /t HTTP/1.1\r\nHost: fake.test\r\nConnection: close\r\n\r\n")
    assert tunnel.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    assert tunnel.endswith(b"hello /t for fake.test")
    # The other key's socket allows nothing; the wrong port, a raw address, a wildcard
    # name resolving to loopback: denied, each with the proxy's 403.
    for sock, target, why in (
            (b, f"fake.test:{origin}", b"not in the allow-list"),
            (a, f"fake.test:{origin + 1}", b"not in the allow-list"),
            (a, f"127.0.0.1:{origin}", b"not in the allow-list"),
            (a, f"wild.fake.test:{origin}", b"not a public address")):
        out = ask(sock, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert out.startswith(b"HTTP/1.1 403 Forbidden"), (target, out)
        assert b"X-Proxy-Error: blocked-by-allowlist" in out and why in out, out
    bad = ask(a, b"GET /relative HTTP/1.1\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400")
    log = lines(root / "denied.log")
    assert [(x["key"], x["host"]) for x in log] == [
        ("b", "fake.test"), ("a", "fake.test"), ("a", "127.0.0.1"), ("a", "wild.fake.test")]


def test_sync_keeps_exactly_the_named_keys_and_drop_ends_their_connections(
        proxy: tuple[Path, dict[str, Any]], origin: int) -> None:
    root, _ = proxy
    serve(root, "a", [f"fake.test:{origin}"])
    serve(root, "b", [])
    (root / "keys" / "c.json").write_text(json.dumps({"allow": ["bad entry"]}))
    out = control(root, {"op": "sync", "keys": ["a", "c"], "resolve": {}})
    assert out["ok"] is True and "BadEntry" in out["failed"]["c"]
    assert control(root, {"op": "ping"})["keys"] == ["a"]
    assert not (root / "socks" / "b").exists()
    with socket.socket(socket.AF_UNIX) as s:  # an open tunnel ...
        s.settimeout(10)
        s.connect(str(root / "socks" / "a" / p.SOCKET_NAME))
        s.sendall(f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\n\r\n".encode())  # not allowed
        assert s.recv(100).startswith(b"HTTP/1.1 403")
    assert control(root, {"op": "drop", "key": "a"}) == {"ok": True}
    assert not (root / "socks" / "a").exists()


def test_the_proxy_exits_when_its_directory_is_gone(proxy: tuple[Path, dict[str, Any]]) -> None:
    root, ready = proxy
    for f in root.rglob("*"):
        if f.is_file() or f.is_socket():
            f.unlink()
    for d in sorted(root.rglob("*"), reverse=True):
        d.rmdir()
    root.rmdir()
    assert ready["proc"].wait(timeout=10) == 0


def test_one_proxy_per_home(proxy: tuple[Path, dict[str, Any]]) -> None:
    root, _ = proxy
    second = subprocess.run([sys.executable, "-I", "-S", str(Path(px.__file__).with_name(
        "run.py")), str(root)], input=b"{}\n", capture_output=True, timeout=30)
    assert json.loads(second.stdout) == {"running": True}


# ---------------------------------------------------------------------- the bridge
def test_the_bridge_relays_both_ways_and_passes_half_closes_on(tmp_path: Path) -> None:
    """The relay alone, on a Unix socket served here: a request, a large reply, EOF."""
    path = str(tmp_path / "s")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    big = os.urandom(3 << 20)

    def answer() -> None:
        conn, _ = srv.accept()
        data = b""
        while chunk := conn.recv(65536):  # until the client's half-close arrives
            data += chunk
        conn.sendall(data[::-1] + big)
        conn.close()
    threading.Thread(target=answer, daemon=True).start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    relay = egress_bridge.Relay(listener, path)
    threading.Thread(target=relay.run, daemon=True).start()
    with socket.create_connection(("127.0.0.1", port), 10) as c:
        c.sendall(b"hello")
        c.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := c.recv(65536):
            got += chunk
    assert got == b"olleh" + big
    srv.close()


def test_the_bridge_execs_the_command_in_its_own_process_and_the_relay_leaves(
        tmp_path: Path) -> None:
    """``bridge.py PORT SOCKET CMD``: CMD runs as the same pid, with SIGPIPE at its default
    (Python ignores it), and the relay is its child in a session of its own."""
    out = tmp_path / "out"
    port = 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (f"echo $$ > {out}; grep SigIgn /proc/self/status >> {out}; "
              f"cat /proc/$$/task/$$/children >> {out}")
    proc = subprocess.Popen([sys.executable, "-I", "-S", egress_bridge.__file__, str(port),
                             str(tmp_path / "nosock"), "/bin/sh", "-c", script])
    assert proc.wait(30) == 0
    pid, sigign, children = out.read_text().split("\n")[:3]
    assert int(pid) == proc.pid
    assert int(sigign.split()[1], 16) & (1 << 12) == 0  # SIGPIPE (13) not ignored
    relay = int(children.split()[0])
    assert os.getsid(relay) == relay  # its own session: the command's signals miss it
    os.kill(relay, 9)


# ---------------------------------------------------------------------- the sandbox
def test_an_agent_behind_the_proxy_gets_its_socket_dir_the_bridge_and_the_variables(
        tmp_path: Path) -> None:
    view = AgentView(egress=str(tmp_path / "sock"))
    spec = SandboxSpec(runtime="bwrap")
    argv = bwrap.wrap(["claude"], spec, cwd=str(tmp_path), tether_home=str(tmp_path / "h"),
                      tty=False, agent=view)
    assert "--unshare-net" in argv
    i = argv.index("--ro-bind", argv.index(str(tmp_path / "sock")) - 1)
    assert argv[i:i + 3] == ["--ro-bind", str(tmp_path / "sock"), p.SANDBOX_DIR]
    tail = argv[argv.index("--") + 1:]
    assert tail == [sys.executable, "-I", "-S", os.path.abspath(egress_bridge.__file__),
                    "3128", f"{p.SANDBOX_DIR}/{p.SOCKET_NAME}", "claude"]
    env = p.proxy_env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    # network: host opts out; none and private cut it off; without a socket, no way out.
    for net, unshared, bridged in (("host", False, False), ("none", True, False),
                                   ("private", True, False)):
        argv = bwrap.wrap(["x"], SandboxSpec(runtime="bwrap", network=net),  # type: ignore[arg-type]
                          cwd=str(tmp_path), tether_home=str(tmp_path / "h"), tty=False,
                          agent=view)
        assert ("--unshare-net" in argv) == unshared, net
        assert (p.SANDBOX_DIR in argv) == bridged, net
    argv = bwrap.wrap(["x"], spec, cwd=str(tmp_path), tether_home=str(tmp_path / "h"),
                      tty=False, agent=AgentView())
    assert "--unshare-net" in argv and p.SANDBOX_DIR not in argv


def test_a_plain_exec_never_goes_through_the_proxy(tmp_path: Path) -> None:
    spec = SandboxSpec(runtime="bwrap", network=NetworkPolicy(allow=["x.example"]))
    argv = bwrap.wrap(["x"], spec, cwd=str(tmp_path), tether_home=str(tmp_path / "h"),
                      tty=False)
    assert "--unshare-net" in argv and p.SANDBOX_DIR not in argv
    assert argv[argv.index("--") + 1:] == ["x"]


def test_the_proxy_module_runs_on_the_standard_library_alone() -> None:
    """``python -I -S``: nothing of the virtualenv; what it imports of tether is pure."""
    r = subprocess.run([sys.executable, "-I", "-S", "-c",
                        "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import tether.egress.proxy, tether.egress.bridge; "
                        "print(sorted(m for m in sys.modules if m.startswith('tether')))",
                        str(Path(px.__file__).parents[2])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert all(m.startswith(("tether.egress", "tether.hostio")) or m == "tether"
               for m in eval(r.stdout)), r.stdout
    asyncio.run(asyncio.sleep(0))


# ---------------------------------------------------------------------- journaling denials
def _service(home: Path) -> Any:
    from tether.daemon.egress import EgressService
    from tether.daemon.events.bus import EventBus
    from tether.daemon.journal import Journal
    from tether.model.layout import HomeLayout
    from tether.store import Store

    store = Store(home / "tether.db")
    return EgressService(store, HomeLayout(home), Journal(store, EventBus(store)))


def _lineage(store: Any, ident: str) -> None:
    from tether.model.records import AgentConfig, LineageRecord

    store.create_lineage(LineageRecord(id=ident, config=AgentConfig(argv=["x"])))


def _denied(store: Any, lineage: str) -> list[Any]:
    return [e for e in store.events_since(limit=10_000)
            if e.type == "agent.egress_denied" and e.data.get("lineage") == lineage]


def test_each_denial_line_is_journaled_once_across_restarts_and_rotation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.daemon import egress as daemon_egress

    (tmp_path / "egress").mkdir()
    svc = _service(tmp_path)
    _lineage(svc.store, "aaaaaaaaaa")
    log = px.Denials(str(tmp_path / "egress" / "denied.log"))
    log.deny("aaaaaaaaaa", "evil.example", 443, "not in the allow-list")
    log.deny("nobody0000", "x.example", 80, "not in the allow-list")  # no such lineage
    log.deny("aaaaaaaaaa", "two.example", 80, "not in the allow-list")
    assert svc.consume() == 2
    assert svc.consume() == 0  # nothing new
    ev = _denied(svc.store, "aaaaaaaaaa")
    assert [(e.data["host"], e.data["port"], e.data["count"]) for e in ev] == [
        ("evil.example", 443, 1), ("two.example", 80, 1)]
    assert ev[0].reason == "egress to evil.example:443 denied: not in the allow-list"
    rec = svc.store.get_lineage("aaaaaaaaaa")
    assert rec.egress.denied == 2 and rec.reason is None  # the lineage's reason untouched
    assert [h.host for h in rec.egress.hosts] == ["two.example", "evil.example"]
    # A new daemon reads the whole log again: nothing twice.
    again = _service(tmp_path)
    assert again.consume(start=True) == 0
    # Rotation past the threshold: the lines written meanwhile still come, once.
    monkeypatch.setattr(daemon_egress, "ROTATE_AT", 1)
    log.deny("aaaaaaaaaa", "three.example", 80, "not in the allow-list")
    assert again.consume() == 1
    assert not (tmp_path / "egress" / "denied.log").exists()
    log.deny("aaaaaaaaaa", "four.example", 80, "not in the allow-list")
    assert again.consume() == 1
    assert len(_denied(again.store, "aaaaaaaaaa")) == 4
    # A rotated log a killed daemon left is read at the next start, without repeats.
    monkeypatch.setattr(daemon_egress, "ROTATE_AT", 1 << 20)
    log.deny("aaaaaaaaaa", "five.example", 80, "not in the allow-list")
    assert again.consume() == 1
    log.deny("aaaaaaaaaa", "six.example", 80, "not in the allow-list")  # not read yet
    (tmp_path / "egress" / "denied.log").rename(tmp_path / "egress" / "denied.log.1")
    assert _service(tmp_path).consume(start=True) == 1
    assert not (tmp_path / "egress" / "denied.log.1").exists()
    assert [e.data["host"] for e in _denied(again.store, "aaaaaaaaaa")][-2:] == [
        "five.example", "six.example"]


def test_a_denial_line_is_checked_again_by_the_daemon(tmp_path: Path) -> None:
    (tmp_path / "egress").mkdir()
    svc = _service(tmp_path)
    _lineage(svc.store, "bbbbbbbbbb")
    lines = [{"n": 5, "key": "bbbbbbbbbb", "host": "bad\x1bhost", "port": 99999,
              "count": 10**30, "why": "x" * 10_000, "time": 1.0},
             "not json", {"n": "x", "key": "bbbbbbbbbb"},
             {"n": 3, "key": "bbbbbbbbbb", "host": "old.example", "port": 1, "count": 1}]
    (tmp_path / "egress" / "denied.log").write_text(
        "".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    assert svc.consume() == 1  # the last is older than the first (n 3 < 5): skipped
    ev = _denied(svc.store, "bbbbbbbbbb")[0]
    assert ev.data["host"] is None and ev.data["port"] is None
    assert ev.data["count"] == 1 << 40 and len(ev.data["why"]) == 300
