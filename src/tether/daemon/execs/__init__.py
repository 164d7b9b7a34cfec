"""Execs: one command run under a monitor, from intent to settlement.

``service`` owns the exec lifecycle (start, watch, cancel, wait, logs, re-adoption after a
crash); ``terminal_events`` journals what a monitor reports of a terminal; ``latency`` is the
start latency histogram; ``api`` holds the ``exec.*`` methods."""
