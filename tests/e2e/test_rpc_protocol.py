"""JSON-RPC 2.0 over the real socket of a real daemon: every error class, batches,
the line-size limit, and isolation between clients.

Everything here talks to the daemon subprocess through ``RawConn`` (bytes on the
wire); nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, RawConn, new_home, raw_call, remove_home, wait_for

MAX_LINE = 1024 * 1024  # src/tether/rpc/framing.py MAX_LINE (documented limit)
MAX_BATCH = 1000  # src/tether/rpc/server.py MAX_BATCH

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
# Application errors (src/tether/model/errors.py RpcCode).
NOT_FOUND = 1001
AMBIGUOUS = 1002
CONFLICT = 1003
INVALID_STATE = 1004
START_FAILED = 1006

# Every method the "Protocol" section names.
METHODS = [
    "daemon.health", "daemon.status",
    "sandbox.create", "sandbox.get", "sandbox.list", "sandbox.stop", "sandbox.delete",
    "exec.start", "exec.get", "exec.list", "exec.wait", "exec.cancel", "exec.logs",
    "events.list", "events.subscribe", "events.unsubscribe",
]


# ---------------------------------------------------------------------- helpers
class Conn(RawConn):
    """RawConn plus request/response helpers."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        super().__init__(path, timeout)
        self._n = 0

    def call(self, method: str, params: Any = None, rid: Any = None) -> dict[str, Any]:
        if rid is None:
            self._n += 1
            rid = f"r{self._n}"
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_obj(msg)
        return self.recv_reply(rid)

    def recv_reply(self, rid: Any) -> dict[str, Any]:
        """The next response with ``rid`` (notifications in between are skipped)."""
        while True:
            msg = self.recv_obj()
            if isinstance(msg, dict) and "method" in msg and "id" not in msg:
                continue
            assert isinstance(msg, dict), msg
            assert msg.get("id") == rid, f"expected a response to {rid!r}, got {msg}"
            return msg

    def raw(self, data: bytes) -> Any:
        """Send one raw line and return the one message that answers it."""
        self.send_raw(data if data.endswith(b"\n") else data + b"\n")
        return self.recv_obj()

    def expect_silence(self, data: bytes) -> None:
        """``data`` must produce no response: the next line answers a sentinel sent after it."""
        self.send_raw(data if data.endswith(b"\n") else data + b"\n")
        self._n += 1
        sentinel = f"sentinel-{self._n}"
        self.send_obj({"jsonrpc": "2.0", "id": sentinel, "method": "daemon.health"})
        msg = self.recv_obj()
        assert isinstance(msg, dict) and msg.get("id") == sentinel, (
            f"{data[:100]!r} must get no response, but got {msg}")
        assert msg["result"]["status"] == "SERVING"


def check_error(resp: Any, code: int, data_code: str, rid: Any = "any") -> dict[str, Any]:
    """A well-formed JSON-RPC error with this numeric code, data.code and a useful message."""
    assert isinstance(resp, dict), resp
    assert resp.get("jsonrpc") == "2.0", resp
    assert "result" not in resp, resp
    assert "error" in resp, resp
    if rid != "any":
        assert "id" in resp and resp["id"] == rid, resp
    err = resp["error"]
    assert err["code"] == code, resp
    msg = err.get("message")
    assert isinstance(msg, str) and len(msg.strip()) >= 10, f"unhelpful message: {resp}"
    assert msg.strip() != data_code, f"message only repeats the code: {resp}"
    assert isinstance(err.get("data"), dict), f"error has no data: {resp}"
    assert err["data"].get("code") == data_code, resp
    return dict(err)


def req(method: str, params: Any = None, rid: Any = 1, *, notification: bool = False,
        ) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if not notification:
        msg["id"] = rid
    if params is not None:
        msg["params"] = params
    return msg


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def proc_status(pid: int, field: str) -> int:
    """A /proc/<pid>/status figure in KiB."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith(field + ":"):
            return int(row.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def assert_serving(daemon: DaemonProc) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log_text()
    resp = raw_call(daemon.socket, "daemon.health")
    assert resp["result"]["status"] == "SERVING", resp
    status = raw_call(daemon.socket, "daemon.status")["result"]
    assert status["pid"] == daemon.pid, "the daemon restarted"
    log = daemon.log_text()
    assert "connection handler failed" not in log, log
    assert "internal error" not in log, log


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProc]:
    """One daemon for the tests that only send requests and read replies (fast)."""
    home = new_home()
    d = DaemonProc(home)
    d.start()
    try:
        yield d
        assert_serving(d)  # nothing the module sent disturbed it
    finally:
        d.cleanup()
        remove_home(home)


@pytest.fixture
def conn(shared: DaemonProc) -> Iterator[Conn]:
    c = Conn(shared.socket)
    yield c
    c.close()


@pytest.fixture
def fresh(daemon: DaemonProc) -> Iterator[Conn]:
    """A connection to a daemon of the test's own."""
    c = Conn(daemon.socket)
    yield c
    c.close()


# ---------------------------------------------------------------------- -32700
@pytest.mark.parametrize("data", [
    b"{bad",
    b'{"jsonrpc": "2.0", "method": "daemon.health", "id": 1',
    b'{"jsonrpc": "2.0", "method": "daemon.health", "id": 1}}',
    b"not json at all",
    b"\xff\xfe\xfd",  # invalid UTF-8
    b'{"jsonrpc": "2.0", "method": "daemon.\xc3\x28health", "id": 1}',  # invalid UTF-8 inside
    b'[{"jsonrpc": "2.0", "method": "daemon.health", "id": 1}, {"jsonrpc": "2.0", "method"]',
    b"\x00\x01\x02",
], ids=["garbage-object", "truncated", "trailing", "words", "bad-utf8", "bad-utf8-inside",
        "broken-batch", "nul-bytes"])
def test_parse_error(conn: Conn, data: bytes) -> None:
    resp = conn.raw(data)
    check_error(resp, PARSE_ERROR, "PARSE_ERROR", rid=None)
    # The connection survives a parse error.
    assert conn.call("daemon.health")["result"]["status"] == "SERVING"


# ---------------------------------------------------------------------- -32600
@pytest.mark.parametrize("obj, rid", [
    (42, None),
    ("daemon.health", None),
    (None, None),
    (True, None),
    ({"id": 7, "method": "daemon.health"}, 7),  # no "jsonrpc"
    ({"jsonrpc": "1.0", "id": 7, "method": "daemon.health"}, 7),
    ({"jsonrpc": 2.0, "id": 7, "method": "daemon.health"}, 7),
    ({"jsonrpc": "2.0", "id": 7}, 7),  # no method
    ({"jsonrpc": "2.0", "id": 7, "method": 5}, 7),
    ({"jsonrpc": "2.0", "id": 7, "method": None}, 7),
    ({"jsonrpc": "2.0", "id": 7, "method": ["daemon.health"]}, 7),
    ({"jsonrpc": "2.0", "id": [1], "method": "daemon.health"}, None),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "daemon.health"}, None),
    ({"jsonrpc": "2.0", "id": True, "method": "daemon.health"}, None),
], ids=["number", "string", "null", "bool", "no-jsonrpc", "jsonrpc-1.0", "jsonrpc-number",
        "no-method", "method-number", "method-null", "method-array", "id-array", "id-object",
        "id-bool"])
def test_invalid_request(conn: Conn, obj: Any, rid: Any) -> None:
    resp = conn.raw(line(obj))
    check_error(resp, INVALID_REQUEST, "INVALID_REQUEST", rid=rid)
    assert conn.call("daemon.health")["result"]["status"] == "SERVING"


def test_empty_batch_is_one_invalid_request(conn: Conn) -> None:
    resp = conn.raw(b"[]")
    # The spec: a single Response object, not an array.
    check_error(resp, INVALID_REQUEST, "INVALID_REQUEST", rid=None)


def test_batch_over_the_limit_is_refused_whole(conn: Conn) -> None:
    batch = [req("sandbox.create", {"name": f"over{i}"}, rid=i) for i in range(MAX_BATCH + 1)]
    resp = conn.raw(line(batch))
    err = check_error(resp, INVALID_REQUEST, "INVALID_REQUEST", rid=None)
    assert str(MAX_BATCH) in err["message"]
    assert err["data"].get("limit") == MAX_BATCH
    # Refused whole: not one of its requests ran.
    names = {s["name"] for s in conn.call("sandbox.list", {"all": True})["result"]["sandboxes"]}
    assert not any(n.startswith("over") for n in names)


def test_batch_at_the_limit_is_served(conn: Conn) -> None:
    batch = [req("daemon.health", rid=i) for i in range(MAX_BATCH)]
    resp = conn.raw(line(batch))
    assert isinstance(resp, list) and len(resp) == MAX_BATCH
    assert sorted(r["id"] for r in resp) == list(range(MAX_BATCH))
    assert all(r["result"]["status"] == "SERVING" for r in resp)


@pytest.mark.parametrize("obj", [
    {"foo": "boo"},
    {"jsonrpc": "2.0", "method": 1, "params": "bar"},
    {"method": "daemon.health"},
], ids=["foo-boo", "method-number", "no-jsonrpc"])
def test_invalid_request_without_id_is_still_answered(conn: Conn, obj: Any) -> None:
    conn.send_raw(line(obj))
    conn.send_obj(req("daemon.health", rid="sentinel"))
    first = conn.recv_obj()
    check_error(first, INVALID_REQUEST, "INVALID_REQUEST", rid=None)
    assert conn.recv_obj()["id"] == "sentinel"


def test_batch_answers_invalid_member_without_id(conn: Conn) -> None:
    resp = conn.raw(line([req("daemon.health", rid="a"), {"foo": "boo"}]))
    assert isinstance(resp, list) and len(resp) == 2, resp
    by_id = {r["id"]: r for r in resp}
    assert by_id["a"]["result"]["status"] == "SERVING"
    check_error(by_id[None], INVALID_REQUEST, "INVALID_REQUEST", rid=None)


# ---------------------------------------------------------------------- -32601
@pytest.mark.parametrize("name", ["nope", "", "daemon", "daemon.health.x", "DAEMON.HEALTH",
                                  "exec.start ", "sandbox.nuke", "rpc.discover"])
def test_unknown_method(conn: Conn, name: str) -> None:
    resp = conn.call(name, rid=11)
    err = check_error(resp, METHOD_NOT_FOUND, "METHOD_NOT_FOUND", rid=11)
    assert repr(name) in err["message"] or name in err["message"]


def test_every_documented_method_exists(conn: Conn) -> None:
    """Each method is routed: a bad param gives -32602, never -32601."""
    for name in METHODS:
        resp = conn.call(name, {"zz_not_a_param": 1})
        err = check_error(resp, INVALID_PARAMS, "INVALID_PARAMS")
        assert name in err["message"] or "zz_not_a_param" in err["message"], err


# ---------------------------------------------------------------------- -32602
@pytest.mark.parametrize("method, params, hint", [
    ("exec.get", [1], "object"),
    ("exec.get", ["abc"], "object"),
    ("exec.get", "abc", "object"),
    ("exec.get", 5, "object"),
    ("daemon.health", [], "object"),
    ("exec.get", {}, "exec"),  # missing required field
    ("sandbox.create", {}, "name"),
    ("exec.start", {}, "argv"),
    ("exec.get", {"exec": 1}, "exec"),  # wrong type
    ("exec.get", {"exec": None}, "exec"),
    ("exec.get", {"exec": ""}, "exec"),
    ("exec.get", {"exec": "x", "extra": 1}, "extra"),  # unknown field
    ("daemon.health", {"verbose": True}, "verbose"),
    ("sandbox.list", {"all": "yes"}, "all"),
    ("sandbox.list", {"all": 1}, "all"),
    ("exec.start", {"argv": []}, "argv"),
    ("exec.start", {"argv": "echo hi"}, "argv"),
    ("exec.start", {"argv": ["echo", 1]}, "argv"),
    ("exec.start", {"argv": ["true"], "env": {"A": 1}}, "env"),
    ("exec.start", {"argv": ["true"], "timeout": 0}, "timeout"),
    ("exec.start", {"argv": ["true"], "timeout": -1}, "timeout"),
    ("exec.start", {"argv": ["true"], "name": "has space"}, "name"),
    ("exec.start", {"argv": ["true"], "request_key": "short"}, "request_key"),
    ("exec.logs", {"exec": "x", "offset": -1}, "offset"),
    ("exec.logs", {"exec": "x", "offset": "10"}, "offset"),
    ("exec.logs", {"exec": "x", "offset": 1.5}, "offset"),
    ("exec.logs", {"exec": "x", "offset": True}, "offset"),
    ("exec.logs", {"exec": "x", "limit": 0}, "limit"),
    ("exec.logs", {"exec": "x", "limit": 1024 * 1024 + 1}, "limit"),
    ("exec.logs", {"exec": "x", "stream": "stdin"}, "stream"),
    ("exec.logs", {"exec": "x", "wait": 61}, "wait"),
    ("exec.wait", {"exec": "x", "timeout": -0.5}, "timeout"),
    ("exec.cancel", {"exec": "x", "grace": -1}, "grace"),
    ("sandbox.stop", {"sandbox": "default", "grace": -1}, "grace"),
    ("sandbox.create", {"name": "-leading-dash"}, "name"),
    ("sandbox.create", {"name": "x" * 200}, "name"),
    ("sandbox.create", {"name": "ok", "labels": ["a"]}, "labels"),
    ("events.list", {"since": -1}, "since"),
    ("events.list", {"limit": 0}, "limit"),
    ("events.list", {"limit": 10001}, "limit"),
    ("events.subscribe", {"since": -5}, "since"),
    ("events.unsubscribe", {}, "subscription"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_invalid_params(conn: Conn, method: str, params: Any, hint: str) -> None:
    resp = conn.call(method, params, rid=21)
    err = check_error(resp, INVALID_PARAMS, "INVALID_PARAMS", rid=21)
    # The message says what is wrong (names the field, or that params must be an object).
    assert hint in err["message"], err


@pytest.mark.parametrize("method, params, hint", [
    ("exec.cancel", {"exec": "x", "signal": "BOGUS"}, "BOGUS"),
    ("exec.cancel", {"exec": "x", "signal": 999}, "999"),
    ("exec.start", {"argv": ["true"], "cwd": "relative/dir"}, "cwd"),
    ("exec.start", {"argv": ["true"], "cwd": "/no/such/dir/anywhere"}, "/no/such/dir"),
    ("sandbox.create", {"name": "rt", "runtime": "vm9000"}, "vm9000"),
    ("sandbox.create", {"name": "ws", "workspace": "rel/path"}, "workspace"),
    ("sandbox.create", {"name": "ws2", "workspace": "/no/such/ws"}, "workspace"),
], ids=["signal-name", "signal-number", "cwd-relative", "cwd-missing", "runtime",
        "workspace-relative", "workspace-missing"])
def test_semantic_invalid_params(conn: Conn, method: str, params: Any, hint: str) -> None:
    err = check_error(conn.call(method, params, rid=22), INVALID_PARAMS, "INVALID_PARAMS",
                      rid=22)
    assert hint in err["message"], err


def test_null_or_absent_params_mean_no_params(conn: Conn) -> None:
    assert conn.raw(line(req("daemon.health", rid=1)))["result"]["status"] == "SERVING"
    resp = conn.raw(b'{"jsonrpc": "2.0", "id": 2, "method": "daemon.health", "params": null}')
    assert resp["result"]["status"] == "SERVING"
    assert conn.call("daemon.health", {}, rid=3)["result"]["status"] == "SERVING"


# ---------------------------------------------------------------------- application errors
@pytest.mark.parametrize("method, params", [
    ("exec.get", {"exec": "nosuchexec"}),
    ("exec.wait", {"exec": "nosuchexec", "timeout": 0}),
    ("exec.cancel", {"exec": "nosuchexec"}),
    ("exec.logs", {"exec": "nosuchexec"}),
])
def test_exec_not_found(conn: Conn, method: str, params: dict[str, Any]) -> None:
    err = check_error(conn.call(method, params, rid=31), NOT_FOUND, "EXEC_NOT_FOUND", rid=31)
    assert "nosuchexec" in err["message"]
    assert "tether ps" in err["message"]  # says how to list what exists
    assert err["data"]["ref"] == "nosuchexec"


@pytest.mark.parametrize("method, params", [
    ("sandbox.get", {"sandbox": "nosuchsb"}),
    ("sandbox.stop", {"sandbox": "nosuchsb"}),
    ("sandbox.delete", {"sandbox": "nosuchsb"}),
    ("exec.start", {"argv": ["true"], "sandbox": "nosuchsb"}),
    ("exec.list", {"sandbox": "nosuchsb"}),
    ("events.list", {"sandbox": "nosuchsb"}),
    ("events.subscribe", {"sandbox": "nosuchsb"}),
])
def test_sandbox_not_found(conn: Conn, method: str, params: dict[str, Any]) -> None:
    err = check_error(conn.call(method, params, rid=32), NOT_FOUND, "SANDBOX_NOT_FOUND",
                      rid=32)
    assert "nosuchsb" in err["message"]
    assert "tether sandbox ls" in err["message"]


def test_ambiguous_sandbox_prefix(conn: Conn) -> None:
    # 17 ids over 16 hex digits: two share a first character (pigeonhole).
    batch = [req("sandbox.create", {"name": f"amb{i}"}, rid=i) for i in range(17)]
    ids = [r["result"]["id"] for r in conn.raw(line(batch))]
    by_first: dict[str, list[str]] = {}
    for i in ids:
        by_first.setdefault(i[0], []).append(i)
    prefix, group = next((k, v) for k, v in by_first.items() if len(v) > 1)
    err = check_error(conn.call("sandbox.get", {"sandbox": prefix}, rid=33), AMBIGUOUS,
                      "AMBIGUOUS", rid=33)
    assert prefix in err["message"]
    assert set(group) <= set(err["data"]["matches"])
    # A unique prefix resolves.
    one = ids[0]
    got = conn.call("sandbox.get", {"sandbox": one[:10]})["result"]
    assert got["id"] == one


def test_ambiguous_exec_prefix(fresh: Conn) -> None:
    conn = fresh  # a fresh daemon: every exec id on it is one of ours
    batch = [req("exec.start", {"argv": ["true"]}, rid=i) for i in range(17)]
    resp = conn.raw(line(batch))
    ids = [r["result"]["id"] for r in resp]
    by_first: dict[str, list[str]] = {}
    for i in ids:
        by_first.setdefault(i[0], []).append(i)
    prefix, group = next((k, v) for k, v in by_first.items() if len(v) > 1)
    err = check_error(conn.call("exec.get", {"exec": prefix}, rid=34), AMBIGUOUS, "AMBIGUOUS",
                      rid=34)
    assert prefix in err["message"]
    assert len(err["data"]["matches"]) >= 2
    assert set(err["data"]["matches"]) <= set(ids)
    assert conn.call("exec.get", {"exec": group[0]})["result"]["id"] == group[0]


def test_sandbox_name_in_use(conn: Conn) -> None:
    assert conn.call("sandbox.create", {"name": "dup"})["result"]["state"] == "READY"
    err = check_error(conn.call("sandbox.create", {"name": "dup"}, rid=35), CONFLICT,
                      "NAME_IN_USE", rid=35)
    assert "dup" in err["message"]
    assert err["data"]["name"] == "dup"


def test_exec_name_in_use(conn: Conn) -> None:
    x = conn.call("exec.start", {"argv": ["sleep", "30"], "name": "busy"})["result"]
    try:
        err = check_error(conn.call("exec.start", {"argv": ["true"], "name": "busy"}, rid=36),
                          CONFLICT, "NAME_IN_USE", rid=36)
        assert "busy" in err["message"] and "tether kill" in err["message"]
    finally:
        conn.call("exec.cancel", {"exec": x["id"], "signal": "KILL", "grace": 0})
    done = conn.call("exec.wait", {"exec": x["id"], "timeout": 10})["result"]
    assert done["state"] == "CANCELLED"
    # Once it ended, the name is free again.
    y = conn.call("exec.start", {"argv": ["true"], "name": "busy"})["result"]
    assert y["name"] == "busy"


def test_sandbox_not_ready_when_stopped(conn: Conn) -> None:
    sb = conn.call("sandbox.create", {"name": "halted"})["result"]
    assert conn.call("sandbox.stop", {"sandbox": "halted"})["result"]["state"] == "STOPPED"
    err = check_error(conn.call("exec.start", {"argv": ["true"], "sandbox": "halted"},
                                rid=37), INVALID_STATE, "SANDBOX_NOT_READY", rid=37)
    assert "halted" in err["message"] and "STOPPED" in err["message"]
    assert "tether sandbox start" in err["message"]
    assert err["data"]["sandbox"] == sb["id"]
    # Nothing was started in it.
    listing = conn.call("exec.list", {"sandbox": "halted", "all": True})["result"]["execs"]
    assert listing == []


def test_start_failed_for_missing_command(conn: Conn) -> None:
    err = check_error(conn.call("exec.start", {"argv": ["/no/such/command-xyz"]}, rid=38),
                      START_FAILED, "START_FAILED", rid=38)
    assert "/no/such/command-xyz" in err["message"]
    x = conn.call("exec.get", {"exec": err["data"]["exec"]})["result"]
    assert x["state"] == "FAILED"
    assert x["reason"]


def test_default_sandbox_cannot_be_deleted(conn: Conn) -> None:
    err = check_error(conn.call("sandbox.delete", {"sandbox": "default"}, rid=39),
                      INVALID_STATE, "DEFAULT_SANDBOX", rid=39)
    assert "default" in err["message"]
    assert conn.call("sandbox.get", {"sandbox": "default"})["result"]["state"] == "READY"


def test_deleted_sandbox_is_not_found(conn: Conn) -> None:
    conn.call("sandbox.create", {"name": "gone"})
    assert conn.call("sandbox.delete", {"sandbox": "gone"})["result"]["state"] == "DELETED"
    check_error(conn.call("sandbox.get", {"sandbox": "gone"}), NOT_FOUND, "SANDBOX_NOT_FOUND")


# ---------------------------------------------------------------------- notifications, ids
def test_notifications_get_no_response(conn: Conn) -> None:
    conn.expect_silence(line(req("daemon.health", notification=True)))
    # Even a notification that fails is not answered (spec: not confirmable).
    conn.expect_silence(line(req("no.such.method", notification=True)))
    conn.expect_silence(line(req("exec.get", {"bogus": 1}, notification=True)))
    conn.expect_silence(line(req("exec.get", {"exec": "nosuch"}, notification=True)))
    # ...but it is executed.
    conn.expect_silence(line(req("sandbox.create", {"name": "bynote"}, notification=True)))
    assert conn.call("sandbox.get", {"sandbox": "bynote"})["result"]["name"] == "bynote"


@pytest.mark.parametrize("rid", [0, -7, 2**53, "", "x" * 300, "ünïcødé", None])
def test_response_echoes_id(conn: Conn, rid: Any) -> None:
    resp = conn.raw(line(req("daemon.health", rid=rid)))
    assert "id" in resp and resp["id"] == rid and type(resp["id"]) is type(rid)
    assert resp["jsonrpc"] == "2.0"
    assert resp["result"]["status"] == "SERVING"
    err = conn.raw(line(req("nope", rid=rid)))
    assert "id" in err and err["id"] == rid
    check_error(err, METHOD_NOT_FOUND, "METHOD_NOT_FOUND")


def test_pipelined_requests_each_get_their_own_response(conn: Conn) -> None:
    """300 requests written before reading any reply (more than the in-flight cap)."""
    n = 300
    payload = b"".join(
        line(req("daemon.health", rid=i) if i % 3 else req("exec.get", {"exec": f"no{i}"},
                                                         rid=f"s{i}"))
        for i in range(n))
    conn.send_raw(payload)
    seen: dict[Any, dict[str, Any]] = {}
    for _ in range(n):
        msg = conn.recv_obj()
        assert msg["id"] not in seen, f"duplicate response {msg}"
        seen[msg["id"]] = msg
    for i in range(n):
        if i % 3:
            assert seen[i]["result"]["status"] == "SERVING"
        else:
            err = check_error(seen[f"s{i}"], NOT_FOUND, "EXEC_NOT_FOUND")
            assert err["data"]["ref"] == f"no{i}"


# ---------------------------------------------------------------------- batches
def test_batch_mixed_valid_invalid_and_notifications(conn: Conn) -> None:
    batch = [
        req("daemon.health", rid="a"),
        req("daemon.health", notification=True),
        1,
        req("no.such", rid="b"),
        req("exec.get", {"exec": 5}, rid="c"),
        req("exec.get", {"exec": "nosuch"}, rid="d"),
        req("sandbox.create", {"name": "inbatch"}, rid="e"),
        req("sandbox.create", {"name": "noted"}, notification=True),
        {"jsonrpc": "2.0", "id": "f", "method": 9},
        req("daemon.status", rid=7),
    ]
    resp = conn.raw(line(batch))
    assert isinstance(resp, list)
    assert len(resp) == 8, resp  # two notifications produce nothing
    ids = [r["id"] for r in resp]
    assert sorted(map(str, ids)) == sorted(map(str, ["a", None, "b", "c", "d", "e", "f", 7]))
    by_id = {r["id"]: r for r in resp}
    assert by_id["a"]["result"]["status"] == "SERVING"
    check_error(by_id[None], INVALID_REQUEST, "INVALID_REQUEST", rid=None)
    check_error(by_id["b"], METHOD_NOT_FOUND, "METHOD_NOT_FOUND")
    check_error(by_id["c"], INVALID_PARAMS, "INVALID_PARAMS")
    check_error(by_id["d"], NOT_FOUND, "EXEC_NOT_FOUND")
    assert by_id["e"]["result"]["name"] == "inbatch"
    check_error(by_id["f"], INVALID_REQUEST, "INVALID_REQUEST")
    assert by_id[7]["result"]["pid"] > 0
    # The notification in the batch ran.
    assert conn.call("sandbox.get", {"sandbox": "noted"})["result"]["state"] == "READY"


def test_batch_of_invalid_members(conn: Conn) -> None:
    resp = conn.raw(b"[1, 2, 3]")
    assert isinstance(resp, list) and len(resp) == 3
    for r in resp:
        check_error(r, INVALID_REQUEST, "INVALID_REQUEST", rid=None)


def test_batch_of_one_is_an_array(conn: Conn) -> None:
    resp = conn.raw(line([req("daemon.health", rid="only")]))
    assert isinstance(resp, list) and len(resp) == 1 and resp[0]["id"] == "only"


def test_all_notification_batch_gets_no_response_at_all(conn: Conn) -> None:
    batch = [req("daemon.health", notification=True) for _ in range(5)]
    batch.append(req("sandbox.create", {"name": "silent"}, notification=True))
    batch.append(req("no.such", notification=True))
    conn.expect_silence(line(batch))
    assert conn.call("sandbox.get", {"sandbox": "silent"})["result"]["name"] == "silent"


def test_batch_reply_is_capped_and_every_member_answered(conn: Conn) -> None:
    """A batch whose replies would be huge: the reply stays bounded, and each member
    still gets exactly one response (a result, or an error saying it was not run)."""
    conn.raw(line([req("sandbox.create", {"name": f"cap{i}"}, rid=i) for i in range(200)]))
    n = 300  # each events.list reply is 80 KB or more: ~24 MB in all
    resp = conn.raw(line([req("events.list", {"limit": 10000}, rid=i) for i in range(n)]))
    assert isinstance(resp, list)
    assert sorted(r["id"] for r in resp) == list(range(n))
    ok = [r for r in resp if "result" in r]
    refused = [r for r in resp if "error" in r]
    assert ok and refused, "expected some members run and the rest refused"
    for r in refused:
        err = check_error(r, INVALID_REQUEST, "BATCH_REPLY_TOO_LARGE")
        assert "batch" in err["message"]
    assert len(json.dumps(resp)) < 16 * 1024 * 1024
    assert conn.call("daemon.health")["result"]["status"] == "SERVING"


def test_nested_batch_member_is_invalid(conn: Conn) -> None:
    resp = conn.raw(line([[req("daemon.health", rid=1)], req("daemon.health", rid=2)]))
    assert isinstance(resp, list) and len(resp) == 2
    by_id = {r["id"]: r for r in resp}
    check_error(by_id[None], INVALID_REQUEST, "INVALID_REQUEST")
    assert by_id[2]["result"]["status"] == "SERVING"


# ---------------------------------------------------------------------- size limit
def _too_large(resp: Any) -> None:
    err = check_error(resp, INVALID_REQUEST, "REQUEST_TOO_LARGE", rid=None)
    assert err["data"]["limit"] == MAX_LINE
    assert str(MAX_LINE) in err["message"]


def test_line_over_limit_refused_and_connection_keeps_working(conn: Conn) -> None:
    head = b'{"jsonrpc": "2.0", "id": "big", "method": "daemon.health", "params": {"pad": "'
    big = head + b"a" * (2 * MAX_LINE) + b'"}}\n'
    conn.send_raw(big)
    _too_large(conn.recv_obj())
    # The rest of that line was discarded, not parsed as new requests.
    assert conn.call("daemon.health", rid="next")["result"]["status"] == "SERVING"
    # Twice in a row, and a pipelined request right behind the big line.
    conn.send_raw(big + line(req("daemon.health", rid="behind")))
    _too_large(conn.recv_obj())
    assert conn.recv_obj()["id"] == "behind"


def test_limit_boundary(conn: Conn) -> None:
    base = line(req("daemon.health", rid="edge"))[:-1]
    exact = base + b" " * (MAX_LINE - len(base))
    assert len(exact) == MAX_LINE
    assert conn.raw(exact + b"\n")["id"] == "edge"
    _too_large(conn.raw(exact + b" \n"))
    assert conn.call("daemon.health")["result"]["status"] == "SERVING"


def test_huge_line_does_not_grow_daemon_memory(daemon: DaemonProc, fresh: Conn) -> None:
    conn = fresh
    pid = daemon.pid
    conn.call("daemon.health")
    rss_before = proc_status(pid, "VmRSS")
    chunk = b"x" * (1024 * 1024)
    conn.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "daemon.health", "params": {"p": "')
    for _ in range(50):  # 50 MiB, one line
        conn.send_raw(chunk)
    conn.send_raw(b'"}}\n')
    _too_large(conn.recv_obj())
    assert conn.call("daemon.health", rid="after")["result"]["status"] == "SERVING"
    rss_after = proc_status(pid, "VmRSS")
    hwm_after = proc_status(pid, "VmHWM")
    grown = (rss_after - rss_before) // 1024
    peak = (hwm_after - rss_before) // 1024
    assert grown < 16, f"RSS grew by {grown} MiB reading a 50 MiB line"
    assert peak < 24, f"RSS peaked {peak} MiB above its start reading a 50 MiB line"


def test_unterminated_huge_line_then_disconnect(daemon: DaemonProc) -> None:
    with Conn(daemon.socket) as c:
        c.send_raw(b"[" * (3 * MAX_LINE))
        _too_large(c.recv_obj())
    assert_serving(daemon)


# ---------------------------------------------------------------------- isolation
def _background(fn: Any, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(OSError):  # the daemon pushed back or closed us
            fn(stop)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_misbehaving_clients_never_disturb_another(daemon: DaemonProc) -> None:
    # Large responses for the client that never reads them.
    with Conn(daemon.socket) as setup:
        batch = [req("sandbox.create", {"name": f"fill{i}"}, rid=i) for i in range(200)]
        assert all("result" in r for r in setup.raw(line(batch)))
        running = setup.call("exec.start", {"argv": ["sleep", "30"]})["result"]["id"]

    stop = threading.Event()
    sent = {"garbage": 0, "unread": 0}
    pushed_back = {"garbage": False, "unread": False}
    socks: list[socket.socket] = []

    def garbage(stop: threading.Event) -> None:
        with Conn(daemon.socket, timeout=0.2) as c:
            blob = b"".join(os.urandom(512) + b"\n{]" + b"\n" for _ in range(16))
            while not stop.is_set():
                try:
                    c.send_raw(blob)
                    sent["garbage"] += len(blob)
                except TimeoutError:
                    # It never reads its parse errors, so the daemon stopped reading it.
                    pushed_back["garbage"] = True

    def never_reads(stop: threading.Event) -> None:
        with Conn(daemon.socket, timeout=0.2) as c:
            reqs = b"".join(line(req("exec.list", {"all": True}, rid=i)) for i in range(50))
            while not stop.is_set():
                try:
                    c.send_raw(reqs)
                    sent["unread"] += 1
                except TimeoutError:
                    pushed_back["unread"] = True

    # Stalled clients: half a line; half of an oversized line; a long poll then silence.
    half = Conn(daemon.socket)
    half.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "daemon.he')
    half_big = Conn(daemon.socket)
    half_big.send_raw(b'{"p": "' + b"z" * (MAX_LINE + 10))
    poller = Conn(daemon.socket)
    poller.send_obj(req("exec.wait", {"exec": running, "timeout": 60}))
    poller.send_obj(req("events.subscribe", {"since": 0}, rid=2))
    for _ in range(20):  # clients that vanish mid-request
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.socket))
        s.sendall(line(req("exec.wait", {"exec": running, "timeout": 60})) + b'{"jsonrpc"')
        socks.append(s)
    for s in socks[::2]:
        s.close()

    threads = [_background(garbage, stop), _background(never_reads, stop)]
    try:
        wait_for(lambda: ((sent["garbage"] > 500_000 or pushed_back["garbage"])
                          and (sent["unread"] > 100 or pushed_back["unread"])),
                 timeout=20, what="misbehaving clients under way")
        with Conn(daemon.socket, timeout=10) as good:
            worst = 0.0
            t_all = time.monotonic()
            for i in range(100):
                t0 = time.monotonic()
                r = good.call("exec.get", {"exec": running}, rid=i)
                worst = max(worst, time.monotonic() - t0)
                assert r["result"]["state"] == "RUNNING"
            sb = good.call("sandbox.create", {"name": "undisturbed"})["result"]
            assert sb["state"] == "READY"
            total = time.monotonic() - t_all
        # Generous sanity bounds: disturbed service would take seconds per call.
        assert worst < 5.0, f"a call took {worst:.2f}s while other clients misbehaved"
        assert total < 30.0, f"100 calls took {total:.2f}s"
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    # The stalled half line is still pending on its own connection and can complete.
    half.send_raw(b'alth"}\n')
    assert half.recv_obj()["result"]["status"] == "SERVING"
    half_big.send_raw(b'"}\n' + line(req("daemon.health", rid="hb")))
    _too_large(half_big.recv_obj())
    assert half_big.recv_obj()["id"] == "hb"
    for c in (half, half_big, poller):
        c.close()
    for s in socks[1::2]:
        s.close()

    assert_serving(daemon)

    def settled() -> bool:
        counts = raw_call(daemon.socket, "daemon.status")["result"]["counts"]
        return bool(counts["subscriptions"] == 0 and counts["connections"] <= 1)

    wait_for(settled, timeout=10, what="closed connections and subscriptions released")
    with Conn(daemon.socket) as c:
        c.call("exec.cancel", {"exec": running, "signal": "KILL", "grace": 0})
        done = c.call("exec.wait", {"exec": running, "timeout": 10})["result"]
        assert done["state"] == "CANCELLED"


def test_client_that_never_reads_costs_bounded_memory(daemon: DaemonProc) -> None:
    """A client that never reads its replies: its own connection stalls, and the daemon
    neither buffers its replies without bound nor stops serving others."""
    with Conn(daemon.socket) as setup:
        batch = [req("sandbox.create", {"name": f"big{i}"}, rid=i) for i in range(300)]
        setup.raw(line(batch))  # ~600 events: each events.list reply is ~120 KB
    pid = daemon.pid
    rss_before = proc_status(pid, "VmRSS")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(daemon.socket))
    s.settimeout(0.5)
    reqs = b"".join(line(req("events.list", {"limit": 10000}, rid=i)) for i in range(20))
    written = 0
    deadline = time.monotonic() + 3
    try:
        # Offer 3,000 requests (far more than the in-flight cap) or push for 3 s.
        while written < 3000 and time.monotonic() < deadline:
            try:
                s.sendall(reqs)
                written += 20
            except TimeoutError:
                pass  # back-pressure: the daemon stopped reading this client
        r = raw_call(daemon.socket, "daemon.health")
        assert r["result"]["status"] == "SERVING"
        time.sleep(1.0)  # let whatever the daemon accepted run
        peak = (proc_status(pid, "VmHWM") - rss_before) // 1024
        assert peak < 64, (f"daemon RSS grew {peak} MiB for one client that never reads "
                           f"({written} requests written)")
    finally:
        s.close()
        assert_serving(daemon)
