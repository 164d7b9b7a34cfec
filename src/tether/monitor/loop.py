"""The monitor's loop as its parts see it: the :class:`Poller` protocol (types only).

``main.py`` owns the one ``epoll`` loop and composes the parts (``terminal``,
``clients``, ``userterm``); the parts register their fds through the poller they are
given. They name its type from here, under ``TYPE_CHECKING``, so that no part imports
``main.py`` back. Nothing imports this module at run time (``typing`` is not for the
monitor: see :mod:`tether.monitor.main`); it imports nothing of tether.
"""

from __future__ import annotations

from typing import Any, Protocol


class Poller(Protocol):
    """The loop's one ``epoll`` and what each registered fd is (``main.Poller``)."""

    fds: dict[int, Any]  # fd -> "wake" | "listen" | "master" | "stdin" | a client | a terminal

    def register(self, fd: int, what: Any, mask: int = ...) -> None: ...

    def unregister(self, fd: int) -> None: ...

    def modify(self, fd: int, mask: int) -> None: ...
