"""Abusive clients cannot take the daemon's memory nor starve everyone else."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, RawConn, wait_for
from tests.rawrpc import health
from tether.client.blocking import Client
from tether.model.errors import TetherError
from tether.store import Store

SUB = b'{"jsonrpc":"2.0","id":%d,"method":"events.subscribe","params":{"since":0}}\n'


def _seed(home: Path, n: int) -> None:
    store = Store(home / "tether.db")
    try:
        for i in range(n):
            store.append_event(None, "test.filler", reason="x" * 300, data={"i": i})
    finally:
        store.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _open(sock: Path, payload: bytes = b"") -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(sock))
    if payload:
        s.sendall(payload)
    return s


def _lines_until_eof(s: socket.socket) -> list[dict[str, Any]]:
    buf = b""
    while chunk := s.recv(65536):
        buf += chunk
    return [json.loads(x) for x in buf.splitlines() if x.strip()]


def test_unread_subscriptions_hold_bounded_memory(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.home.mkdir(parents=True, exist_ok=True)
    _seed(d.home, 2000)
    d.start()
    before = _rss_mib(d.pid)
    socks = [_open(d.socket, b"".join(SUB % i for i in range(64))) for _ in range(4)]
    with RawConn(d.socket) as c:  # the subscriptions exist once a later request is answered
        wait_for(lambda: c.result("daemon.status")["counts"]["subscriptions"] == 256, 30,
                 what="256 subscriptions")
    assert health(d.socket, timeout=10) == "SERVING"
    grown = _rss_mib(d.pid) - before
    for s in socks:
        s.close()
    # 256 catch-ups of 2000 events (~0.5 KiB each) would be ~250 MiB if buffered.
    assert grown < 64, f"daemon RSS grew {grown:.0f} MiB for 256 unread subscriptions"


def test_a_slow_reader_of_many_subscriptions_gets_every_event_once(
        stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.home.mkdir(parents=True, exist_ok=True)
    _seed(d.home, 1500)
    d.start()
    with RawConn(d.socket, timeout=30) as c:
        c.send_raw(b"".join(SUB % i for i in range(64)))
        subs: dict[str, list[int]] = {}
        replies = 0
        while replies < 64 or min(len(v) for v in subs.values()) < 1500:
            msg = json.loads(c.recv_line())
            if "id" in msg:
                replies += 1
                subs.setdefault(msg["result"]["subscription"], [])
            elif msg["method"] == "events.event":
                subs.setdefault(msg["params"]["subscription"], []).append(
                    msg["params"]["event"]["gseq"])
        assert len(subs) == 64
        for gseqs in subs.values():
            assert gseqs[:1500] == list(range(1, 1501))


def test_daemon_wide_subscription_limit(daemon: DaemonProc) -> None:
    socks = [_open(daemon.socket, b"".join(SUB % i for i in range(64))) for _ in range(16)]
    try:
        with RawConn(daemon.socket) as c:
            wait_for(lambda: c.result("daemon.status")["counts"]["subscriptions"] == 1024, 30,
                     what="1024 subscriptions")
            reply = c.call("events.subscribe", {"since": 0})
            assert reply["error"]["data"] == {"code": "TOO_MANY_SUBSCRIPTIONS",
                                              "limit": 1024, "scope": "daemon"}
            assert c.result("daemon.health")["status"] == "SERVING"
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("busy", [True, False])
def test_connection_limit(stopped_daemon: DaemonProc, busy: bool) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_MAX_CONNECTIONS": "8"})
    held = [_open(d.socket, SUB % 1 if busy else b"") for _ in range(8)]
    try:
        with RawConn(d.socket) as probe:
            if busy:  # 8 subscribers: nobody to evict, the newcomer is refused
                msgs = _lines_until_eof(probe.sock)
                assert msgs[0]["error"]["data"] == {"code": "TOO_MANY_CONNECTIONS", "limit": 8}
                assert "close some clients" in msgs[0]["error"]["message"]
                with pytest.raises(TetherError) as e:
                    Client(d.home, autostart=False, reconnect=0.5).health()
                assert e.value.code == "TOO_MANY_CONNECTIONS"
                held.pop().close()
                wait_for(lambda: health(d.socket) == "SERVING", 10, what="room again")
            else:  # 8 idle: the longest idle one makes room
                assert probe.result("daemon.health")["status"] == "SERVING"
                msgs = _lines_until_eof(held[0])
                assert msgs[-1]["error"]["data"]["code"] == "CONNECTION_EVICTED"
    finally:
        for s in held:
            s.close()


def test_a_client_slow_to_send_still_reads_why_it_was_refused(
        stopped_daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full daemon writes its refusal and closes without reading; a client that sends
    only after that (descheduled on a loaded machine) gets EPIPE. It must still report
    the refusal (TOO_MANY_CONNECTIONS, what to do), not "no daemon answers" (seen in a
    run under stress-ng)."""
    import time

    from tether.client import blocking

    d = stopped_daemon
    d.start(env={"TETHER_MAX_CONNECTIONS": "2"})
    held = [_open(d.socket, SUB % 1) for _ in range(2)]
    sent = blocking._Conn.send

    def late(self: blocking._Conn, data: bytes) -> None:
        time.sleep(0.3)  # the daemon has refused and closed by now
        sent(self, data)
    monkeypatch.setattr(blocking._Conn, "send", late)
    try:
        with pytest.raises(TetherError) as e:
            Client(d.home, autostart=False, reconnect=0.5).health()
        assert e.value.code == "TOO_MANY_CONNECTIONS"
        assert "close some clients" in e.value.message
    finally:
        for s in held:
            s.close()


def test_half_line_times_out(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_HALF_LINE_TIMEOUT": "0.5"})
    half = _open(d.socket, b'{"jsonrpc":"2.0","id":1,"meth')
    whole = _open(d.socket, b'{"jsonrpc":"2.0","id":1,"method":"daemon.health"}\n')
    msgs = _lines_until_eof(half)
    assert msgs[0]["error"]["data"]["code"] == "REQUEST_TIMEOUT"
    assert json.loads(whole.recv(65536))["result"]["status"] == "SERVING"
    whole.sendall(b'{"jsonrpc":"2.0","id":2,"method":"daemon.health"}\n')
    assert json.loads(whole.recv(65536))["id"] == 2  # an idle whole-line client stays
    half.close()
    whole.close()


def test_many_half_lines_hold_bounded_memory_and_give_it_back(
        stopped_daemon: DaemonProc) -> None:
    """Issue 22 finding 9: 6,000 connections each holding a 60 KB half-line raised the
    daemon's RSS 56 → 120 MB, and it stayed there once they closed (glibc keeps what
    CPython frees). Now the unfinished lines of all connections hold at most 32 MiB
    (past it the oldest are dropped with their connections), and the freed memory is
    handed back to the system."""
    import resource
    import time

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    d = stopped_daemon
    d.start()
    time.sleep(0.5)
    before = _rss_mib(d.pid)
    half = b'{"jsonrpc":"2.0","id":1,"method":"daemon.health","params":{"x":"' + b"a" * 60000
    socks: list[socket.socket] = []
    peak = before
    try:
        for i in range(4000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(d.socket))
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # a full buffer: enough of it
                s.send(half)
            socks.append(s)
            if i % 250 == 249:
                time.sleep(0.1)
                peak = max(peak, _rss_mib(d.pid))
        wait_for(lambda: health(d.socket) == "SERVING", 30, what="an answer mid-flood")
        peak = max(peak, _rss_mib(d.pid))
        first = socks[0]
        first.setblocking(True)
        first.settimeout(10)
        codes = [m["error"]["data"]["code"] for m in _lines_until_eof(first)]
        assert codes and codes[0] in ("TOO_MANY_UNFINISHED_LINES", "CONNECTION_EVICTED"), codes
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: _rss_mib(d.pid) < before + 12, 15, interval=0.5,
             what=f"the memory handed back ({_rss_mib(d.pid):.0f} MiB, {before:.0f} before)")
    assert peak - before < 32 + 30, f"RSS {before:.0f} -> {peak:.0f} MiB"
    assert health(d.socket) == "SERVING"
