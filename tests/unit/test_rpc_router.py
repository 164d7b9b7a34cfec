"""The method table decides how a request is scheduled (a long poll runs as a task), from
the decoded method name — never from bytes that merely appear in the params."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether.daemon.api import METHODS
from tether.daemon.tasks import Tasks
from tether.rpc.messages import Empty
from tether.rpc.server import Method, Router


async def _handler(p: Any, c: Any) -> Any:
    return None


def router() -> Router:
    r = Router()
    r.add("exec.wait", Empty, _handler, long=True)
    r.add("exec.get", Empty, _handler)
    return r


def test_long_polls_come_from_the_method_table() -> None:
    r = router()
    assert r.is_long({"jsonrpc": "2.0", "id": 1, "method": "exec.wait"})
    assert not r.is_long({"jsonrpc": "2.0", "id": 1, "method": "exec.get",
                          "params": {"exec": "exec.wait"}})
    assert r.is_long([{"method": "exec.get"}, {"method": "exec.wait"}])
    assert not r.is_long([{"method": "exec.get"}, "junk", 3])
    assert not r.is_long({"method": 7}) and not r.is_long("exec.wait")
    assert not r.is_long({"method": "no.such"})


def test_tasks_refuse_work_until_the_daemon_lends_its_group() -> None:
    tasks = Tasks()

    async def work() -> int:
        return 7

    assert not tasks.open
    with pytest.raises(RuntimeError, match="not open"):
        tasks.spawn(work())

    async def main() -> int:
        async with asyncio.TaskGroup() as tg:
            tasks.bind(tg)
            t = tasks.spawn(work(), name="w")
        return t.result()

    assert asyncio.run(main()) == 7


def test_params_built_without_convert_equal_the_converted_ones() -> None:
    """A request without params skips msgspec.convert where ``{}`` would convert: the bare
    constructor must give the very value convert gives, for every method's params."""
    bare = 0
    for name, params in METHODS.items():
        method = Method(name, params, _handler)
        try:
            want = msgspec.convert({}, params, strict=True)
        except msgspec.ValidationError:
            assert not method.bare, name
            continue
        assert method.bare, name
        assert method.params() == want, name
        bare += 1
    assert bare >= 5  # daemon.health, daemon.status, the lists…


def test_the_common_case_path_answers_as_the_full_one(tmp_path: Path) -> None:
    """Requests without params to a method whose params are all optional are answered
    in the connection loop itself (``daemon.health``'s path); they must get exactly the
    replies the full validation path gives, errors included, over a real socket — for a
    coroutine handler and for a plain function (called, not awaited) alike."""
    from tether.model.errors import RpcCode, TetherError
    from tether.rpc.server import RpcServer

    async def ok(p: Any, c: Any) -> Any:
        return {"a": 1}

    async def refused(p: Any, c: Any) -> Any:
        raise TetherError(RpcCode.NOT_FOUND, "NOT_FOUND", "no such thing")

    async def bug(p: Any, c: Any) -> Any:
        raise ValueError("a bug")

    def plain(p: Any, c: Any) -> Any:  # a handler that never waits: called, not awaited
        return {"plain": True}

    def plain_bug(p: Any, c: Any) -> Any:
        raise ValueError("a bug")

    r = Router()
    for name, h in (("ok", ok), ("refused", refused), ("bug", bug), ("plain", plain),
                    ("plain_bug", plain_bug)):
        r.add(name, Empty, h)
    cases: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"jsonrpc": "2.0", "id": 1, "method": "ok"}, {"result": {"a": 1}}),
        ({"jsonrpc": "2.0", "id": "s", "method": "ok", "params": {}}, {"result": {"a": 1}}),
        ({"jsonrpc": "2.0", "id": None, "method": "ok", "params": None},
         {"result": {"a": 1}}),
        ({"jsonrpc": "2.0", "id": 2, "method": "ok", "params": []},
         {"error": -32602}),
        ({"jsonrpc": "2.0", "id": 2, "method": "ok", "params": {"x": 1}},
         {"error": -32602}),
        ({"jsonrpc": "2.0", "id": True, "method": "ok"}, {"error": -32600, "id": None}),
        ({"jsonrpc": "1.0", "id": 3, "method": "ok"}, {"error": -32600}),
        ({"id": 3, "method": "ok"}, {"error": -32600}),
        ({"jsonrpc": "2.0", "method": "ok"}, None),  # a notification: no reply
        ({"jsonrpc": "2.0", "id": 4, "method": "refused"}, {"error": int(RpcCode.NOT_FOUND)}),
        ({"jsonrpc": "2.0", "id": 5, "method": "bug"}, {"error": -32603}),
        ({"jsonrpc": "2.0", "id": 6, "method": "plain"}, {"result": {"plain": True}}),
        ({"jsonrpc": "2.0", "id": 7, "method": "plain", "params": {}},
         {"result": {"plain": True}}),
        ({"jsonrpc": "1.0", "id": 8, "method": "plain"}, {"error": -32600}),
        ({"jsonrpc": "2.0", "id": 9, "method": "plain_bug"}, {"error": -32603}),
        ({"jsonrpc": "2.0", "id": 10, "method": "plain_bug", "params": None},
         {"error": -32603}),
    ]

    async def main() -> list[dict[str, Any]]:
        server = RpcServer(r)
        sock = str(tmp_path / "s.sock")
        srv = await asyncio.start_unix_server(server.handle_connection, path=sock)
        async with srv:
            reader, writer = await asyncio.open_unix_connection(sock)
            for msg, _ in cases:
                writer.write(msgspec.json.encode(msg) + b"\n")
            writer.write(b'{"jsonrpc":"2.0","id":"end","method":"ok"}\n')
            replies = []
            while True:
                reply = msgspec.json.decode(await reader.readline())
                if reply["id"] == "end":
                    break
                replies.append(reply)
            writer.close()
            assert server.inflight == 0
            return replies

    replies = iter(asyncio.run(main()))
    for msg, want in cases:
        if want is None:
            continue
        got = next(replies)
        assert got["id"] == want.get("id", msg.get("id")), msg
        if "result" in want:
            assert got["result"] == want["result"], msg
        else:
            assert got["error"]["code"] == want["error"], (msg, got)
    assert next(replies, None) is None
