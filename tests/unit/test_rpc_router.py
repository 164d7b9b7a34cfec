"""The method table decides how a request is scheduled (a long poll runs as a task), from
the decoded method name — never from bytes that merely appear in the params."""

from __future__ import annotations

import asyncio
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
