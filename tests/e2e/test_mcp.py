"""``tether mcp`` as an MCP client meets it: the MCP SDK's own stdio client and session
against ``tether mcp`` run as a subprocess, against a real daemon."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.harness import DaemonProc, wait_for

pytestmark = pytest.mark.timeout(90)


def _session(daemon: DaemonProc, body: Callable[[ClientSession], Awaitable[None]],
             cwd: Path | None = None) -> None:
    """``cwd``: where the MCP client starts ``tether mcp`` (its project, for Claude Code)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tether.cli.main", "--home", str(daemon.home),
                                      "mcp"], env=dict(daemon.env), cwd=cwd)

    async def run() -> None:
        with open(daemon.home / "mcp-stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    asyncio.run(run())


async def _call(session: ClientSession, name: str, /, **args: Any) -> dict[str, Any]:
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


def test_schedule_cost_digest_and_finish_tools(daemon: DaemonProc, tmp_path: Path) -> None:
    """An agent drives the newer features: schedules a job and runs it now, reads what
    an agent's turns cost (with the budgets), its story, and finishes it."""
    c = daemon.client()
    creds = tmp_path / "creds"
    lin = c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                         f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                        provider="generic", name="spender", budget_usd=2.0)
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    c.agent_turn(session, token, model="claude-sonnet-4-5-20250929",
                 usage={"output_tokens": 40_000})  # $0.60

    async def body(session: ClientSession) -> None:
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"schedule_list", "schedule_add", "schedule_run_now", "cost_report",
                "lineage_finish", "digest_lineage"} <= names
        job = await _call(session, "schedule_add", name="tick", argv=["true"], every=3600,
                          cwd=str(tmp_path))
        assert job["job"]["name"] == "tick" and job["job"]["state"] == "ACTIVE"
        run = await _call(session, "schedule_run_now", job="tick")
        assert run["run"]["manual"] and run["run"]["state"] in ("PENDING", "RUNNING")
        wait_for(lambda: c.schedule_list()[0].last_state == "SUCCESS", 20, what="the run")
        jobs = await _call(session, "schedule_list")
        assert [(j["name"], j["runs"]) for j in jobs["jobs"]] == [("tick", 1)]
        bad = await session.call_tool("schedule_add", {"name": "x", "argv": ["true"],
                                                       "every": "often"})
        assert bad.is_error and bad.structured_content["error"]["code"] == "INVALID_PARAMS"  # type: ignore[index]

        cost = await _call(session, "cost_report", by="lineage")
        (row,) = cost["rows"]
        assert row["key"] == lin.id and row["cost_usd"] == pytest.approx(0.60)
        (budget,) = cost["budgets"]["lineages"]
        assert budget["lineage"] == lin.id and budget["budget_usd"] == 2.0

        story = await _call(session, "digest_lineage", lineage="spender")
        assert story["lineage"]["id"] == lin.id
        assert "agent.turn" in [e["type"] for e in story["events"]]

        finished = await _call(session, "lineage_finish", lineage="spender")
        assert finished["lineage"]["status"] == "FINISHED"
        again = await session.call_tool("lineage_finish", {"lineage": "nosuch"})
        assert again.is_error and again.structured_content["error"]["code"] == "LINEAGE_NOT_FOUND"  # type: ignore[index]

    _session(daemon, body)


def test_commands_run_sandboxed_in_the_project_or_are_refused_never_unsandboxed(
        tmp_path: Path) -> None:
    """Under the product's default sandbox (``auto``: bwrap), with the official client:
    started from its client's project directory, ``exec_start`` (no cwd) runs sandboxed
    there; from a home directory, or with ``cwd`` ``/``, it is refused with a tool error,
    and a scheduled job there fails its runs: nothing runs unsandboxed."""
    import shutil
    import uuid

    from tests.harness import new_home, remove_home
    from tether.runtime import bwrap

    probe = bwrap.probe()
    if not probe.available:
        pytest.skip(f"bwrap: {probe.reason}")
    user_home = Path(f"/home/tethermcp-{uuid.uuid4().hex[:8]}")
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_text("key")
    project = user_home / "src" / "app"
    project.mkdir(parents=True)
    d = DaemonProc(new_home(), env={"TETHER_DEFAULT_RUNTIME": "auto", "HOME": str(user_home)})
    d.start()
    probe_cmd = (f"pwd; test -e {user_home}/.ssh/id_ed25519 && echo sees-ssh; "
                 f"test -S {d.home}/tether.sock && echo sees-tether; echo done")

    async def in_project(session: ClientSession) -> None:
        started = await _call(session, "exec_start", argv=["sh", "-c", probe_cmd])
        assert started["exec"]["notice"] is None
        done = await _call(session, "exec_wait", exec=started["exec"]["id"], timeout=30)
        assert done["exec"]["exit_code"] == 0
        logs = await _call(session, "exec_logs", exec=started["exec"]["id"])
        assert logs["text"] == f"{project}\ndone\n"  # sandboxed: no ssh key, no tether home

    async def in_home(session: ClientSession) -> None:
        for args in ({"argv": ["sh", "-c", "id"]}, {"argv": ["id"], "cwd": "/"}):
            refused = await session.call_tool("exec_start", args)
            assert refused.is_error, refused
            err = refused.structured_content["error"]  # type: ignore[index]
            assert err["code"] == "CANNOT_SANDBOX_HERE", err
            assert "not run unsandboxed" in err["message"]
        await _call(session, "schedule_add", name="rooted", argv=["id"], every=3600, cwd="/")
        await _call(session, "schedule_run_now", job="rooted")
        c = d.client()
        wait_for(lambda: c.schedule_list()[0].last_state == "FAILED", 20, what="the run")
        assert [x for x in c.exec_list(all=True) if x.notice] == []

    try:
        _session(d, in_project, cwd=project)
        _session(d, in_home, cwd=user_home)
    finally:
        d.cleanup()
        remove_home(d.home)
        shutil.rmtree(user_home, ignore_errors=True)
