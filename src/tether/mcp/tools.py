"""The MCP tools: one argument Struct each (its JSON schema is the tool's input schema),
and a call that maps the arguments onto the SDK.

A tool's result is the SDK's typed reply as plain JSON, under one key, so that every
result is an object (what structured content must be). A ``TetherError`` from the daemon
becomes a tool error carrying its ``data.code`` (``ToolFailed``), never an exception
out of the server.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from tether.client.aio import AsyncClient
from tether.client.blocking import Client
from tether.model.errors import RpcCode, TetherError

Level = Literal["hour", "day", "week", "month"]
#: The most of one log an ``exec_logs`` call returns (a model's context is the limit).
MAX_LOG_CHUNK = 256 * 1024


class ListArgs(msgspec.Struct, forbid_unknown_fields=True):
    all: bool = False  # include ended ones (deleted sandboxes, finished lineages)


class ExecListArgs(msgspec.Struct, forbid_unknown_fields=True):
    sandbox: str | None = None
    all: bool = False  # include ended execs


class ExecRef(msgspec.Struct, forbid_unknown_fields=True):
    exec: str  # an exec id, unique id prefix or name


class LineageRef(msgspec.Struct, forbid_unknown_fields=True):
    lineage: str  # a lineage id, unique prefix or name


class ExecStartArgs(msgspec.Struct, forbid_unknown_fields=True):
    argv: list[str]
    sandbox: str = "default"
    env: dict[str, str] | None = None
    # A project directory: the default sandbox's writable place (default: this server's
    # working directory). A system or home directory is refused, never run unsandboxed.
    cwd: str | None = None
    timeout: float | None = None  # seconds before it is cancelled
    name: str | None = None
    tty: bool = False  # a terminal: send it input with exec_input
    stdin: bool = False  # keep stdin open for exec_input (without a terminal)


class AgentStartArgs(msgspec.Struct, forbid_unknown_fields=True):
    argv: list[str]
    provider: str | None = None  # claude, codex, generic (default: from argv[0])
    name: str | None = None
    sandbox: str = "default"
    env: dict[str, str] | None = None
    cwd: str | None = None
    tty: bool = True
    worktree: str | None = None  # a git repository: the agent gets a worktree of it
    issue: str | None = None  # the issue's title or text, for the worktree's state
    issue_id: str | None = None
    force: bool = False  # claim a worktree another live lineage holds


class WaitArgs(msgspec.Struct, forbid_unknown_fields=True):
    exec: str
    timeout: float = 30.0  # seconds; the exec as it is then if it has not ended


class LogsArgs(msgspec.Struct, forbid_unknown_fields=True):
    exec: str
    stream: Literal["stdout", "stderr", "pty"] = "stdout"
    offset: int = 0  # byte offset; pass the previous result's next_offset to go on
    limit: int = 64 * 1024
    wait: float = 0.0  # seconds to wait for new output at the end of the log


class InputArgs(msgspec.Struct, forbid_unknown_fields=True):
    exec: str
    text: str  # typed as is: end a line with "\n" (a terminal's Enter is "\r")
    close_stdin: bool = False  # then end its input (execs without a terminal)
    read_seconds: float = 0.5  # how long to collect the output that follows


class KillArgs(msgspec.Struct, forbid_unknown_fields=True):
    exec: str
    signal: str = "TERM"
    grace: float = 5.0  # seconds before KILL
    reason: str | None = None


class NoArgs(msgspec.Struct, forbid_unknown_fields=True):
    pass


class DigestShowArgs(msgspec.Struct, forbid_unknown_fields=True):
    level: Level = "day"
    label: str | None = None  # e.g. 2026-11-25, 2026-W48; default: the current period


class DigestRecentArgs(msgspec.Struct, forbid_unknown_fields=True):
    level: Level = "day"
    count: int = 7


class JobRef(msgspec.Struct, forbid_unknown_fields=True):
    job: str  # a job id, unique prefix or name


class ScheduleAddArgs(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    argv: list[str]
    cron: str | None = None  # five fields, in tz (one of cron and every)
    every: float | None = None  # seconds
    tz: str | None = None  # default UTC
    sandbox: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None  # as exec_start's (default: this server's working directory)
    timeout: float | None = None  # seconds per run
    overlap: Literal["skip", "concurrent", "queue"] | None = None


class CostArgs(msgspec.Struct, forbid_unknown_fields=True):
    by: Literal["attempt", "lineage", "sandbox", "day", "model"] = "lineage"
    since: float | None = None  # epoch seconds; default: every turn


class FinishArgs(msgspec.Struct, forbid_unknown_fields=True):
    lineage: str  # a lineage id, unique prefix or name
    commit: bool = False  # commit the worktree's changes before the hand-off


class ToolFailed(Exception):
    """A tool's failure as the MCP client sees it: tether's code, message and data."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None,
                 rpc_code: int = RpcCode.INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code, self.message, self.data, self.rpc_code = code, message, data or {}, rpc_code

    @classmethod
    def of(cls, e: TetherError) -> ToolFailed:
        return cls(e.code, e.message, e.data, e.rpc_code)

    def content(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message,
                          "rpc_code": self.rpc_code, "data": self.data}}


Call = Callable[["Tools", Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[msgspec.Struct]
    call: Call

    def input_schema(self) -> dict[str, Any]:
        """The argument Struct's JSON schema, inlined (MCP wants an object at the root)."""
        (ref,), defs = msgspec.json.schema_components(
            [self.args], ref_template="#/$defs/{name}")
        schema: dict[str, Any] = dict(defs.pop(ref["$ref"].rsplit("/", 1)[1]))
        schema.pop("title", None)
        if defs:
            schema["$defs"] = defs
        return schema


def _json(value: Any) -> Any:
    return msgspec.to_builtins(value)


def _here() -> str:
    """The server's working directory: the project its MCP client (Claude Code, Codex)
    started it in. Commands started through a tool run in the default sandbox with it
    as their workspace; where it cannot be one the daemon refuses, and nothing here
    ever asks for an unsandboxed run (``unconfined_ok``)."""
    return os.getcwd()


class Tools:
    """The tool table bound to one daemon (``home``): what ``server.py`` serves."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        tool = TOOLS.get(name)
        if tool is None:
            raise ToolFailed("UNKNOWN_TOOL", f"no tool {name!r}; list the tools to see "
                             f"them ({', '.join(TOOLS)})", {"tool": name},
                             RpcCode.METHOD_NOT_FOUND)
        try:
            args = msgspec.convert(arguments or {}, tool.args, strict=True)
        except msgspec.ValidationError as e:
            raise ToolFailed("INVALID_PARAMS", f"invalid arguments for {name}: {e}",
                             {"tool": name}) from None
        try:
            return await tool.call(self, args)
        except TetherError as e:
            raise ToolFailed.of(e) from None

    # ------------------------------------------------------------------ the calls
    async def sandbox_list(self, a: ListArgs) -> dict[str, Any]:
        return {"sandboxes": _json(await self.client.sandbox_list(all=a.all))}

    async def exec_list(self, a: ExecListArgs) -> dict[str, Any]:
        return {"execs": _json(await self.client.exec_list(sandbox=a.sandbox, all=a.all))}

    async def lineage_list(self, a: ListArgs) -> dict[str, Any]:
        return {"lineages": _json(await self.client.lineage_list(all=a.all))}

    async def exec_get(self, a: ExecRef) -> dict[str, Any]:
        return {"exec": _json(await self.client.exec_get(a.exec))}

    async def lineage_get(self, a: LineageRef) -> dict[str, Any]:
        return {"lineage": _json(await self.client.lineage_get(a.lineage))}

    async def exec_start(self, a: ExecStartArgs) -> dict[str, Any]:
        view = await self.client.exec_start(a.argv, sandbox=a.sandbox, env=a.env,
                                            cwd=a.cwd or _here(), timeout=a.timeout,
                                            name=a.name, tty=a.tty, stdin=a.stdin)
        return {"exec": _json(view)}

    async def agent_start(self, a: AgentStartArgs) -> dict[str, Any]:
        started = await self.client.agent_start(
            a.argv, provider=a.provider, name=a.name, sandbox=a.sandbox, env=a.env,
            cwd=a.cwd, tty=a.tty, worktree=a.worktree, issue=a.issue, issue_id=a.issue_id,
            force=a.force)
        return {"lineage": _json(started)}

    async def exec_wait(self, a: WaitArgs) -> dict[str, Any]:
        if a.timeout < 0:
            raise ToolFailed("INVALID_PARAMS", "timeout must be at least 0 seconds")
        view = await self.client.exec_wait(a.exec, timeout=a.timeout)
        return {"exec": _json(view), "ended": view.state not in ("PENDING", "RUNNING")}

    async def exec_logs(self, a: LogsArgs) -> dict[str, Any]:
        if not 0 < a.limit <= MAX_LOG_CHUNK:
            raise ToolFailed("INVALID_PARAMS", f"limit must be 1..{MAX_LOG_CHUNK} bytes; "
                             "read more with further calls from next_offset")
        chunk = await self.client.exec_logs(a.exec, stream=a.stream, offset=a.offset,
                                            limit=a.limit, wait=a.wait)
        return {"text": chunk.data.decode("utf-8", "replace"), "next_offset": chunk.offset,
                "size": chunk.size, "eof": chunk.eof, "state": chunk.state}

    async def exec_input(self, a: InputArgs) -> dict[str, Any]:
        if not 0 <= a.read_seconds <= 30:
            raise ToolFailed("INVALID_PARAMS", "read_seconds must be 0..30")
        # The attach socket is the blocking SDK's: one short attachment in a thread.
        return await asyncio.to_thread(_type_into, self.client.home, a)

    async def exec_kill(self, a: KillArgs) -> dict[str, Any]:
        view = await self.client.exec_cancel(a.exec, signal=a.signal, grace=a.grace,
                                              reason=a.reason or "killed through tether mcp")
        return {"exec": _json(view)}

    async def agent_reap(self, a: NoArgs) -> dict[str, Any]:
        return _json(await self.client.agent_reap())  # type: ignore[no-any-return]

    async def lineage_reap(self, a: LineageRef) -> dict[str, Any]:
        return {"lineage": _json(await self.client.lineage_resolve(a.lineage, "reap"))}

    async def digest_show(self, a: DigestShowArgs) -> dict[str, Any]:
        return _json(await self.client.digest_show(a.level, a.label))  # type: ignore[no-any-return]

    async def digest_recent(self, a: DigestRecentArgs) -> dict[str, Any]:
        return {"nodes": _json(await self.client.digest_recent(a.level, a.count))}

    async def schedule_list(self, a: ListArgs) -> dict[str, Any]:
        return {"jobs": _json(await self.client.schedule_list(all=a.all))}

    async def schedule_add(self, a: ScheduleAddArgs) -> dict[str, Any]:
        job = await self.client.schedule_add(
            a.name, a.argv, cron=a.cron, every=a.every, tz=a.tz, sandbox=a.sandbox,
            env=a.env, cwd=a.cwd or _here(), timeout=a.timeout, overlap=a.overlap)
        return {"job": _json(job)}

    async def schedule_run_now(self, a: JobRef) -> dict[str, Any]:
        return {"run": _json(await self.client.schedule_run_now(a.job))}

    async def cost_report(self, a: CostArgs) -> dict[str, Any]:
        report = await self.client.cost_report(a.by, since=a.since)
        return {**_json(report), "budgets": _json(await self.client.budget_show())}

    async def lineage_finish(self, a: FinishArgs) -> dict[str, Any]:
        return {"lineage": _json(await self.client.lineage_finish(a.lineage,
                                                                  commit=a.commit))}

    async def digest_lineage(self, a: LineageRef) -> dict[str, Any]:
        return _json(await self.client.digest_lineage(a.lineage))  # type: ignore[no-any-return]


def _type_into(home: Any, a: InputArgs) -> dict[str, Any]:
    with Client(home, autostart=False) as client:
        att = client.attach(a.exec, replay=0)
        try:
            att.write(a.text)
            if a.close_stdin:
                att.close_stdin()
            out = bytearray()
            if a.read_seconds:
                import time

                deadline = time.monotonic() + a.read_seconds
                while (left := deadline - time.monotonic()) > 0 and not att.closed:
                    out += att.read(left)
            return {"written": len(a.text.encode()),
                    "output": out.decode("utf-8", "replace"), "exit": att.exit}
        finally:
            att.detach()


def _tool(name: str, args: type[msgspec.Struct], description: str) -> Tool:
    method = getattr(Tools, name)
    return Tool(name, description, args, method)


TOOLS: dict[str, Tool] = {t.name: t for t in (
    _tool("sandbox_list", ListArgs, "List sandboxes (all: include deleted ones)."),
    _tool("exec_list", ExecListArgs, "List execs, running ones unless all; by sandbox."),
    _tool("lineage_list", ListArgs, "List agent lineages: lifecycle, context used, "
          "heartbeat, current exec."),
    _tool("exec_get", ExecRef, "One exec: state, exit code, pid, agent."),
    _tool("lineage_get", LineageRef, "One agent lineage."),
    _tool("exec_start", ExecStartArgs, "Start a command under tether, sandboxed, with cwd "
          "(a project directory; default: this server's) as its writable place; returns "
          "the exec (its id for exec_wait, exec_logs, exec_input, exec_kill)."),
    _tool("agent_start", AgentStartArgs, "Start a supervised sub-agent (a lineage that "
          "tether revives when its context fills or it dies), optionally in its own git "
          "worktree for an issue."),
    _tool("exec_wait", WaitArgs, "Wait until an exec ends, at most timeout seconds; "
          "ended says whether it did."),
    _tool("exec_logs", LogsArgs, "Read an exec's output from a byte offset; continue "
          "from next_offset until eof."),
    _tool("exec_input", InputArgs, "Type text into an exec's terminal (or its stdin) and "
          "return the output that follows within read_seconds."),
    _tool("exec_kill", KillArgs, "Signal an exec (TERM, then KILL after grace seconds)."),
    _tool("agent_reap", NoArgs, "Settle dead agent sessions and drop stale heartbeat "
          "files."),
    _tool("lineage_reap", LineageRef, "Reap a lineage waiting for a decision (the ask "
          "revival policy): it ends instead of being revived."),
    _tool("digest_show", DigestShowArgs, "The activity digest of one period (hour, day, "
          "week, month) and its children."),
    _tool("digest_recent", DigestRecentArgs, "The latest digest nodes of one level."),
    _tool("digest_lineage", LineageRef, "One lineage's story: its attempts and its "
          "journal events, oldest first."),
    _tool("schedule_list", ListArgs, "List scheduled jobs: next fire time, runs, last "
          "result (all: include removed ones)."),
    _tool("schedule_add", ScheduleAddArgs, "Schedule a command: at each cron time (in tz) "
          "or every N seconds; each fire time runs once, across daemon crashes."),
    _tool("schedule_run_now", JobRef, "Run a scheduled job once now, under its overlap "
          "policy (a SKIPPED run says why)."),
    _tool("cost_report", CostArgs, "What agents' turns cost, grouped by attempt, lineage, "
          "sandbox, day or model, with the budgets and today's spend."),
    _tool("lineage_finish", FinishArgs, "Finish a lineage and hand its branch off (commit "
          "if asked, push to the repository's handoff remote, run its hand-off command)."),
)}
