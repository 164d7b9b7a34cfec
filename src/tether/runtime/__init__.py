"""Where execs run (category B: never persisted, always re-inspected).

:mod:`.base` is the interface every runtime implements, :mod:`.registry` holds them
by name (``process``, ``bwrap``, ``docker``), and :mod:`.monitors` is the pool of
monitors that runs every exec, whatever its runtime.
"""
