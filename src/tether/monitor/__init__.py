"""The per-exec monitor: a small process that owns one child and outlives the daemon.

Everything in this package imports only the standard library: the monitor runs
as ``python -I -S monitor/main.py`` so that it starts fast and stays small, and
the daemon imports :mod:`tether.monitor.files` to read what the monitor wrote.
"""
