"""The stdio loop of ``tether mcp``: the official MCP SDK's low-level server, serving
``tools.TOOLS`` against one daemon through one ``AsyncClient``.

The low-level server (not the decorator one) because the input schemas come from the
argument Structs (``msgspec``), the same records the SDK and the daemon use.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from tether import __version__
from tether.client.aio import AsyncClient
from tether.mcp.tools import TOOLS, ToolFailed, Tools

INSTRUCTIONS = (
    "tether supervises commands and coding agents durably: start them (exec_start, "
    "agent_start), wait for them (exec_wait), read their output (exec_logs from an "
    "offset), type into their terminal (exec_input), stop them (exec_kill). Execs keep "
    "running when this server or the tether daemon restarts.")


def build(client: AsyncClient) -> Server[Any]:
    tools = Tools(client)
    listing = [types.Tool(name=t.name, description=t.description,
                          input_schema=t.input_schema()) for t in TOOLS.values()]

    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await tools.call(params.name, params.arguments)
        except ToolFailed as e:
            return types.CallToolResult(
                content=[types.TextContent(text=f"{e.code}: {e.message}")],
                structured_content=e.content(), is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(result))],
                                    structured_content=result)

    return Server("tether", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve(home: os.PathLike[str] | str) -> None:
    client = AsyncClient(home)
    try:
        server = build(client)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await client.close()


def serve(home: os.PathLike[str] | str) -> None:
    """Serve MCP on stdin/stdout until the client closes them."""
    anyio.run(_serve, home)
