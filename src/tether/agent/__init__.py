"""Agent sessions: lifecycle, heartbeats, drain snapshots, providers, worktree state.

The pure parts live here (no daemon state); ``tether.daemon.agents`` owns the
lineages and drives them. :class:`tether.agent.session.Session` is the SDK an
agent process uses to report turns and ask whether a tool call is allowed.
"""
