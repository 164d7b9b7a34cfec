"""``tether mcp``: a Model Context Protocol server over stdio, so that agents (Claude Code,
Codex, any MCP client) can drive tether. It reaches the daemon only through the SDK
(``tether.client``); ``tools.py`` is its tool table, ``server.py`` the stdio loop."""
