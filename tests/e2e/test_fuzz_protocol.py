"""Protocol edge cases against ONE real daemon: the cases an adversarial report found,
then property-based fuzzing (hypothesis) of every method's params and of the envelope.

Every request must get a well-formed JSON-RPC reply that is never ``INTERNAL_ERROR``,
on a connection that stays open, and the daemon must still answer ``SERVING`` and
have logged no traceback afterwards. Side effects are real but harmless: execs run
``true``/``echo``, agents a shell that records its token and exits, copies stay
inside a scratch directory.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.harness import DaemonProc, RawConn, new_home, remove_home, wait_for
from tether.daemon.api import METHODS

PARSE_ERROR = -32700
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MAX_DEPTH = 128  # src/tether/rpc/server.py MAX_DEPTH (documented limit)
# Bounded to fit `make test`; raise it to hunt (TETHER_FUZZ_EXAMPLES=5000).
EXAMPLES = int(os.environ.get("TETHER_FUZZ_EXAMPLES", "300"))
# CI replays the same examples every run (a red build is then reproducible, never a
# coin toss); a developer's run explores new ones. TETHER_FUZZ_RANDOM=1 explores in CI too.
DERANDOMIZE = bool(os.environ.get("CI")) and not os.environ.get("TETHER_FUZZ_RANDOM")

# Methods whose refs name things; the fuzzer feeds them real ones as well as junk.
_REF_FIELDS = ("exec", "sandbox", "lineage", "subscription", "session")


class _Raw:
    """Bytes to send as they are."""

    def __init__(self, line: bytes) -> None:
        self.line = line


class Fuzz:
    """The daemon under test, one long-lived connection, and the things made so far."""

    def __init__(self, daemon: DaemonProc, scratch: Path) -> None:
        self.daemon = daemon
        self.scratch = scratch
        self.conn = RawConn(daemon.socket, timeout=90)
        self.refs: dict[str, list[str]] = {k: [] for k in _REF_FIELDS}
        self.tokens: list[tuple[str, str]] = []
        self.sent = 0

    def request(self, msg: Any) -> Any:
        """Send one message; return its reply (notifications skipped)."""
        try:
            line = msg.line if isinstance(msg, _Raw) else json.dumps(msg).encode()
            self.conn.send_raw(line + b"\n")
            while True:
                reply = self.conn.recv_obj()
                if not (isinstance(reply, dict) and "method" in reply and "id" not in reply):
                    return reply
        except OSError as e:  # ConnectionError included
            self.conn.close()
            self.conn = RawConn(self.daemon.socket, timeout=90)  # for the next test
            raise AssertionError(f"the daemon dropped the connection: {_short(msg)}") from e

    def call(self, method: str, params: Any, *, omit: bool = False) -> dict[str, Any]:
        self.sent += 1
        rid = self.sent
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if not omit:
            msg["params"] = params
        reply = self.request(msg)
        if depth(msg) > MAX_DEPTH:  # refused as a whole, before its id is known
            assert reply["error"]["code"] == PARSE_ERROR, reply
            check_reply(reply, None, f"{method} {_short(params)}")
            return reply
        check_reply(reply, rid, f"{method} {_short(params)}")
        if "result" in reply:
            self.remember(method, params, reply["result"])
        return reply

    def pick(self, kind: str, index: int) -> str:
        """A real ref of ``kind`` chosen by a drawn index: the pool grows as the test
        runs, and hypothesis needs the same draws to replay an example."""
        pool = self.refs[kind]
        return pool[index % len(pool)] if pool else "none"

    def remember(self, method: str, params: Any, result: Any) -> None:
        if not isinstance(result, dict):
            return
        if method == "exec.start" and isinstance(result.get("id"), str):
            self.refs["exec"].append(result["id"])
        elif method == "sandbox.create" and isinstance(result.get("name"), str):
            self.refs["sandbox"].append(result["name"])
        elif method == "agent.start" and isinstance(result.get("id"), str):
            self.refs["lineage"].append(result["id"])
            self.refs["session"].append(result["id"])
        elif method == "events.subscribe" and isinstance(result.get("subscription"), str):
            self.refs["subscription"].append(result["subscription"])


def depth(value: Any) -> int:
    """Levels of arrays and objects: ``1`` is 0, ``[1]`` is 1."""
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def check_reply(reply: Any, rid: Any, what: str) -> None:
    assert isinstance(reply, dict), f"{what}: reply is not an object: {_short(reply)}"
    assert reply.get("jsonrpc") == "2.0", f"{what}: {_short(reply)}"
    assert reply.get("id") == rid, f"{what}: id {reply.get('id')!r} != {rid!r}"
    assert ("result" in reply) != ("error" in reply), f"{what}: {_short(reply)}"
    if "error" in reply:
        err = reply["error"]
        assert isinstance(err.get("code"), int) and isinstance(err.get("message"), str), \
            f"{what}: malformed error {err!r}"
        assert err["code"] != INTERNAL_ERROR, f"{what}: {err['message']}"
        if "data" in err:
            assert isinstance(err["data"].get("code"), str), f"{what}: {err!r}"


@pytest.fixture(scope="module")
def fuzz() -> Iterator[Fuzz]:
    home = new_home()
    scratch = Path(tempfile.mkdtemp(prefix="tether-fuzz-"))
    d = DaemonProc(home)
    d.start()
    f = Fuzz(d, scratch)
    try:
        f.refs["sandbox"] += ["default"]
        f.call("sandbox.create", {"name": "fz", "workspace": str(scratch)})
        x = f.call("exec.start", {"argv": ["echo", "hello"], "sandbox": "fz"})["result"]
        f.call("exec.wait", {"exec": x["id"], "timeout": 10})
        # An agent that hands its credentials to the test, so authenticated methods are
        # fuzzed past the token check too.
        creds = scratch / "creds"
        agent = f.call("agent.start", {
            "argv": ["sh", "-c", f'echo "$TETHER_SESSION $TETHER_TOKEN" > {creds}; sleep 60'],
            "sandbox": "fz", "cwd": str(scratch), "revival": "reap",
        })["result"]
        wait_for(lambda: creds.exists() and creds.read_text().strip(), 10, what="agent creds")
        session, token = creds.read_text().split()
        assert session == agent["id"]
        f.tokens.append((session, token))
        yield f
        f.conn.close()
        _assert_healthy(d)
    finally:
        f.conn.close()
        d.cleanup()
        remove_home(home)
        shutil.rmtree(scratch, ignore_errors=True)


def _assert_healthy(d: DaemonProc) -> None:
    with RawConn(d.socket, timeout=10) as c:
        assert c.result("daemon.health")["status"] == "SERVING"
    log = d.log_text()
    assert "Traceback" not in log, log[-5000:]


# ------------------------------------------------------------ the reported cases
def _send_line(f: Fuzz, line: bytes) -> dict[str, Any]:
    reply: dict[str, Any] = f.request(_Raw(line))
    return reply


@pytest.mark.parametrize("line", [
    b"[" * 2000 + b"]" * 2000,
    b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b'{"jsonrpc":"2.0","id":1,"method":"daemon.health","params":{"a":'
    + b"[" * 2000 + b"]" * 2000 + b"}}",
    b'{"jsonrpc":"2.0","id":1,"method":"agent.authorize_tool","params":{"input":'
    + b"[" * 200 + b"]" * 200 + b',"session":"s","token":"t","tool":"x"}}',
], ids=["array", "object", "in-params", "just-over-the-limit"])
def test_deep_nesting_is_a_parse_error(fuzz: Fuzz, line: bytes) -> None:
    reply = _send_line(fuzz, line)
    assert reply["error"]["code"] == PARSE_ERROR, reply
    assert reply["error"]["data"]["code"] == "PARSE_ERROR"
    assert "nested" in reply["error"]["message"]
    assert fuzz.call("daemon.health", None, omit=True)["result"]["status"] == "SERVING"


def test_nesting_within_the_limit_is_served(fuzz: Fuzz) -> None:
    deep: Any = []
    for _ in range(60):
        deep = [deep]
    reply = fuzz.call("agent.authorize_tool", {"session": "s", "token": "t", "tool": "x",
                                               "input": deep})
    assert reply["error"]["data"]["code"] == "BAD_TOKEN", reply


@pytest.mark.parametrize("since", [2**63 - 1, 2**63, 2**64 + 5, 10**40])
def test_huge_since_on_events_list(fuzz: Fuzz, since: int) -> None:
    reply = fuzz.call("events.list", {"since": since})
    if since < 2**63:
        assert reply["result"]["events"] == []
    else:
        assert reply["error"]["code"] == INVALID_PARAMS, reply


def test_huge_since_on_subscribe_keeps_the_connection(fuzz: Fuzz) -> None:
    ok = fuzz.call("events.subscribe", {"since": 0})["result"]["subscription"]
    reply = fuzz.call("events.subscribe", {"since": 2**63})
    assert reply["error"]["code"] == INVALID_PARAMS, reply
    time.sleep(0.3)  # a pump that failed would have closed the connection by now
    assert fuzz.call("events.unsubscribe", {"subscription": ok})["result"] == {"ok": True}


@pytest.mark.parametrize("sig", ["9" * 5000, "²", "\u0661", "+9", " 9", "9" * 40, 2**70, -1],
                         ids=lambda v: repr(v)[:12])
def test_odd_signals_are_invalid_params(fuzz: Fuzz, sig: Any) -> None:
    reply = fuzz.call("exec.cancel", {"exec": fuzz.refs["exec"][0], "signal": sig})
    assert reply["error"]["code"] == INVALID_PARAMS, reply
    assert "signal" in reply["error"]["message"]


_BAD_EXEC_PARAMS = [
    {"argv": ["true\0x"]},
    {"argv": ["true", "a\0b"]},
    {"argv": ["true"], "env": {"A": "b\0c"}},
    {"argv": ["true"], "env": {"": "c"}},
    {"argv": ["true"], "env": {"A=B": "c"}},
    {"argv": ["true"], "env": {"A\0": "c"}},
    {"argv": ["true"], "cwd": "/tmp\0"},
]


@pytest.mark.parametrize("params", _BAD_EXEC_PARAMS)
@pytest.mark.parametrize("method", ["exec.start", "agent.start"])
def test_nul_and_bad_env_names_are_refused_before_commit(fuzz: Fuzz, method: str,
                                                        params: dict[str, Any]) -> None:
    before = len(fuzz.call("exec.list", {"all": True})["result"]["execs"])
    reply = fuzz.call(method, {**params, "sandbox": "fz"})
    assert reply["error"]["code"] == INVALID_PARAMS, reply
    assert reply["error"]["data"]["code"] == "INVALID_PARAMS"
    assert len(fuzz.call("exec.list", {"all": True})["result"]["execs"]) == before


@pytest.mark.parametrize("params", [
    {"name": "fz-bad1", "env": {"A=B": "c"}},
    {"name": "fz-bad2", "env": {"": "c"}},
    {"name": "fz-bad3", "env": {"A": "b\0c"}},
    {"name": "fz-bad4", "spec": {"runtime": "process", "env": {"A": "b\0c"}}},
    {"name": "fz-bad5", "spec": {"runtime": "process", "labels": {"a": "b\0c"}}},
    {"name": "fz-bad6", "workspace": "/tmp\0"},
])
def test_bad_sandbox_env_is_refused_before_commit(fuzz: Fuzz, params: dict[str, Any]) -> None:
    reply = fuzz.call("sandbox.create", params)
    assert reply["error"]["code"] == INVALID_PARAMS, reply
    assert fuzz.call("sandbox.get", {"sandbox": params["name"]})["error"]["code"] == 1001


def test_huge_ints_in_agent_turn(fuzz: Fuzz) -> None:
    session, token = fuzz.tokens[0]
    reply = fuzz.call("agent.turn", {"session": session, "token": token,
                                     "usage": {"input_tokens": 2**64}})
    assert reply["error"]["code"] == INVALID_PARAMS, reply


# ------------------------------------------------------------------- the fuzzer
_ODD_TEXT = st.sampled_from([
    "", " ", "\0", "a\0b", "=", "A=B", "..", "../..", "/", "-", "--help", "\n", "\r\n",
    "\ud7ff", "\U0001f600", "é" * 300, "x" * 5000, "9" * 4301, "²", "\u0661", "TERM", "SIGKILL",
    "default", "0", "-1", "null", "true", "{}", "%s%n", "\\", "'\"",
])
_TEXT = st.one_of(_ODD_TEXT, st.text(max_size=40),
                  st.text(alphabet=string.ascii_letters + string.digits + "_.-", max_size=20))
_INTS = st.one_of(st.integers(-3, 70), st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, 2**63,
                                                         2**64, -(2**63) - 1, 10**30]),
                  st.integers())
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_SCALARS = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, _TEXT)
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


_DEEP = st.integers(1, 200).map(_nested)
_VALUES = st.one_of(*[_JSON] * 9, _DEEP)  # mostly shallow: a deep one is refused whole


@st.composite
def _value_for(draw: st.DrawFn, f: Fuzz, method: str, field: str) -> Any:
    """A value for one param: junk of any type, or (for refs and commands) a real or a
    harmless one, so that requests also get past the first checks."""
    if field in _REF_FIELDS and draw(st.booleans()):
        return f.pick(field, draw(st.integers(0, 1 << 16)))
    if field == "token" and draw(st.booleans()):
        return f.tokens[0][1]
    if field == "argv" and draw(st.integers(0, 3)):
        head = draw(st.sampled_from(["true", "echo", "/bin/true", "/nonexistent/cmd",
                                     "true\0x", ""]))
        return [head, *draw(st.lists(_TEXT, max_size=3))]
    if field in ("src", "dst", "cwd", "workspace", "worktree", "base_dir") and draw(
            st.booleans()):
        leaf = draw(st.text(alphabet=string.ascii_letters + "\0 .=é", min_size=1,
                            max_size=12)).replace(".", "_")
        return str(f.scratch / ("f" + leaf))
    if field == "spec" and draw(st.booleans()):
        return {"runtime": "process",
                **draw(st.dictionaries(st.sampled_from(["env", "labels", "ttl", "idle_timeout",
                                                        "workspace", "mounts"]),
                                       _VALUES, max_size=2))}
    return draw(_VALUES)


def _fields(params_type: type[Any]) -> list[str]:
    return [fi.name for fi in msgspec.structs.fields(params_type)]


_HARMFUL_COPY = ("src", "dst")


def _valid(draw: st.DrawFn, f: Fuzz, method: str) -> dict[str, Any]:
    """Params that pass validation, for the fuzzer to spoil one field at a time (so that
    requests get past the first check into the services)."""
    def ref(kind: str) -> str:
        return f.pick(kind, draw(st.integers(0, 1 << 16)))

    session, token = f.tokens[0]
    auth = {"session": session, "token": token}
    path = st.sampled_from(["a", "b", "dir"]).map(lambda n: str(f.scratch / n))
    return {
        "sandbox.create": lambda: {"name": "fz-" + draw(st.from_regex(r"[a-z0-9]{1,8}",
                                                                         fullmatch=True))},
        "sandbox.get": lambda: {"sandbox": ref("sandbox")},
        "sandbox.start": lambda: {"sandbox": ref("sandbox")},
        "sandbox.stop": lambda: {"sandbox": ref("sandbox"), "grace": 0},
        "sandbox.delete": lambda: {"sandbox": ref("sandbox"), "grace": 0},
        "sandbox.copy": lambda: {"sandbox": "fz", "direction": draw(st.sampled_from(
            ["in", "out"])), "src": draw(path), "dst": draw(path)},
        "exec.start": lambda: {"argv": ["true"], "sandbox": "fz"},
        "exec.get": lambda: {"exec": ref("exec")},
        "exec.wait": lambda: {"exec": ref("exec"), "timeout": 5},
        "exec.cancel": lambda: {"exec": ref("exec")},
        "exec.logs": lambda: {"exec": ref("exec")},
        "events.unsubscribe": lambda: {"subscription": ref("subscription")},
        "agent.start": lambda: {"argv": ["true"], "sandbox": "fz", "cwd": str(f.scratch),
                                "revival": "reap"},
        "agent.turn": lambda: dict(auth),
        "agent.heartbeat": lambda: dict(auth),
        "agent.authorize_tool": lambda: {**auth, "tool": "Bash"},
        "agent.handoff": lambda: {**auth, "text": "next"},
        "agent.hook": lambda: {**auth, "provider": "claude", "event": "Stop"},
        "lineage.get": lambda: {"lineage": ref("lineage")},
        "lineage.resolve": lambda: {"lineage": ref("lineage"), "action": "reap"},
        "hook.add": lambda: {"name": "fz", "on": ["exec.*"], "url": "http://127.0.0.1:9/"},
        "hook.show": lambda: {"name": "fz"},
        "hook.retry": lambda: {"name": "fz"},
        "hook.remove": lambda: {"name": "fz"},
    }.get(method, dict)()


@st.composite
def _request(draw: st.DrawFn, f: Fuzz) -> tuple[str, Any, bool]:
    method = draw(st.sampled_from(sorted(METHODS)))
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return method, None, True  # no params at all
    if shape == 1:
        return method, draw(_VALUES), False  # params of any type
    params = _valid(draw, f, method)
    names = _fields(METHODS[method])
    spoiled = draw(st.lists(st.sampled_from(names), unique=True, max_size=3)) if names else []
    params.update({n: draw(_value_for(f, method, n)) for n in spoiled})
    if shape == 2:
        params.update(draw(st.dictionaries(_TEXT, _VALUES, max_size=2)))  # unknown names
    if method == "sandbox.copy":
        # Host paths stay in the scratch directory: copying "/" somewhere is not a test.
        for key in _HARMFUL_COPY:
            value = params.get(key)
            if isinstance(value, str) and not value.startswith(str(f.scratch)):
                params[key] = value.lstrip("/") or "x"
    if method in ("exec.start", "agent.start"):
        argv = params.get("argv")
        if isinstance(argv, list) and argv and isinstance(argv[0], str) and \
                argv[0] not in ("true", "echo", "/bin/true") and "\0" not in argv[0]:
            argv[0] = "/nonexistent/" + argv[0].replace("/", "_")
    return method, params, False


@given(data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
def test_fuzz_every_method(fuzz: Fuzz, data: st.DataObject) -> None:
    method, params, omit = data.draw(_request(fuzz))
    reply = fuzz.call(method, params, omit=omit)
    # --hypothesis-show-statistics shows how far requests get.
    event(f"{method}: {reply['error']['data'].get('code') if 'error' in reply else 'ok'}")


@given(msg=st.one_of(
    _VALUES,
    st.fixed_dictionaries({"jsonrpc": st.one_of(st.just("2.0"), _SCALARS),
                           "method": st.one_of(st.sampled_from(sorted(METHODS)), _SCALARS)},
                          optional={"id": _VALUES, "params": _VALUES}),
    st.lists(st.fixed_dictionaries({"jsonrpc": st.just("2.0"),
                                    "method": st.sampled_from(["daemon.health",
                                                               "events.list", "exec.get"]),
                                    "id": _INTS}, optional={"params": _VALUES}),
             min_size=1, max_size=5),
))
@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_fuzz_envelope(fuzz: Fuzz, msg: Any) -> None:
    """Any JSON value as a whole message: answered, or (a notification) not, never
    with INTERNAL_ERROR and never by dropping the connection."""
    ping = {"jsonrpc": "2.0", "id": "ping", "method": "daemon.health"}
    # The message, then a ping on the same line-stream: every reply up to the ping's.
    reply = fuzz.request(_Raw(json.dumps(msg).encode() + b"\n" + json.dumps(ping).encode()))
    while True:
        members = reply if isinstance(reply, list) else [reply]
        for r in members:
            check_reply(r, r.get("id"), f"envelope {_short(msg)}")
        if isinstance(reply, dict) and reply.get("id") == "ping":
            break
        reply = fuzz.request(_Raw(b""))


def test_daemon_healthy_after_fuzzing(fuzz: Fuzz) -> None:
    for x in fuzz.call("exec.list", {})["result"]["execs"]:
        fuzz.call("exec.cancel", {"exec": x["id"], "signal": "KILL", "grace": 0})
    _assert_healthy(fuzz.daemon)
    assert os.path.isdir(fuzz.scratch)
