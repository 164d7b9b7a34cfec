"""``tether mcp`` as an MCP client meets it: the MCP SDK's own stdio client and session
against ``tether mcp`` run as a subprocess, against a real daemon."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.harness import DaemonProc

pytestmark = pytest.mark.timeout(90)


def _session(daemon: DaemonProc, body: Callable[[ClientSession], Awaitable[None]]) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tether.cli.main", "--home", str(daemon.home),
                                      "mcp"], env=dict(daemon.env))

    async def run() -> None:
        with open(daemon.home / "mcp-stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    asyncio.run(run())


async def _call(session: ClientSession, name: str, **args: Any) -> dict[str, Any]:
    result = await session.call_tool(name, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    # The text content says the same, for clients that show only text.
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def test_tools_start_wait_logs(daemon: DaemonProc) -> None:
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"sandbox_list", "exec_list", "lineage_list", "exec_start", "agent_start",
                "exec_wait", "exec_logs", "exec_input", "exec_kill", "agent_reap",
                "digest_show"} <= set(tools)
        schema = tools["exec_start"].input_schema
        assert schema["type"] == "object" and schema["required"] == ["argv"]
        assert schema["properties"]["argv"] == {"type": "array", "items": {"type": "string"}}
        assert "worktree" in tools["agent_start"].input_schema["properties"]

        started = await _call(session, "exec_start",
                              argv=["sh", "-c", "echo hello from mcp; echo second line"])
        ref = started["exec"]["id"]
        done = await _call(session, "exec_wait", exec=ref, timeout=20)
        assert done["ended"] and done["exec"]["state"] == "FINISHED"
        assert done["exec"]["exit_code"] == 0
        logs = await _call(session, "exec_logs", exec=ref)
        assert logs["text"] == "hello from mcp\nsecond line\n"
        end = await _call(session, "exec_logs", exec=ref, offset=logs["next_offset"])
        assert end["text"] == "" and end["eof"]
        rest = await _call(session, "exec_logs", exec=ref, offset=len("hello from mcp\n"))
        assert rest["text"] == "second line\n"
        assert rest["next_offset"] == logs["next_offset"]
        listed = await _call(session, "exec_list", all=True)
        assert [e["id"] for e in listed["execs"]] == [ref]
        sandboxes = await _call(session, "sandbox_list")
        assert "default" in [s["name"] for s in sandboxes["sandboxes"]]

    _session(daemon, body)


def test_input_and_kill(daemon: DaemonProc) -> None:
    async def body(session: ClientSession) -> None:
        started = await _call(session, "exec_start", argv=["cat"], tty=True)
        ref = started["exec"]["id"]
        typed = await _call(session, "exec_input", exec=ref, text="ping-pong\r",
                            read_seconds=1.0)
        assert "ping-pong" in typed["output"]
        waited = await _call(session, "exec_wait", exec=ref, timeout=0.2)
        assert not waited["ended"]
        await _call(session, "exec_kill", exec=ref, signal="KILL")
        done = await _call(session, "exec_wait", exec=ref, timeout=20)
        assert done["ended"] and done["exec"]["state"] in ("CANCELLED", "FAILED")

    _session(daemon, body)


def test_errors_are_tool_errors_with_tethers_code(daemon: DaemonProc) -> None:
    async def body(session: ClientSession) -> None:
        missing = await session.call_tool("exec_wait", {"exec": "nosuchexec", "timeout": 1})
        assert missing.is_error
        assert isinstance(missing.structured_content, dict)
        assert missing.structured_content["error"]["code"] == "EXEC_NOT_FOUND"
        assert "EXEC_NOT_FOUND" in missing.content[0].text  # type: ignore[union-attr]
        bad = await session.call_tool("exec_start", {"argv": "not a list"})
        assert bad.is_error
        assert bad.structured_content["error"]["code"] == "INVALID_PARAMS"  # type: ignore[index]
        unknown = await session.call_tool("no_such_tool", {})
        assert unknown.is_error
        # The server keeps serving after errors.
        assert "sandboxes" in await _call(session, "sandbox_list")

    _session(daemon, body)
