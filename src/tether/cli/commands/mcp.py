"""``tether mcp``: a Model Context Protocol server on stdin/stdout, for agents.

Register it with Claude Code (``claude mcp add tether -- tether mcp``) or Codex
(``[mcp_servers.tether]`` with ``command = "tether"``, ``args = ["mcp"]``).
"""

from __future__ import annotations

import click


@click.command()
@click.pass_context
def mcp(ctx: click.Context) -> None:
    """Serve the Model Context Protocol on stdio (start, wait, logs, input, kill...)."""
    from tether.mcp.server import serve

    serve(ctx.obj.home)
