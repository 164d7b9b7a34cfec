"""Typed records, state machines and error codes shared by every other package.

Nothing here does I/O; every other package may import it.
"""
