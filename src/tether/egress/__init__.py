"""Agents' egress: the allow-list policy, the per-home filtering proxy, and the bridge that
carries a sandbox's connections to it.

A bwrap agent runs in a network namespace of its own whose only way out is tether's
proxy (:mod:`.proxy`, one process per home, in its own session like a monitor); the
sandbox reaches it through a Unix socket bound into it, which :mod:`.bridge` (run inside
the namespace before the agent's command) serves as ``127.0.0.1:3128``. The proxy lets
through only the hosts of the agent's policy (:mod:`.policy`).

Standard library only (the proxy and the bridge run with ``python -I -S``); nothing here
imports the daemon.
"""
