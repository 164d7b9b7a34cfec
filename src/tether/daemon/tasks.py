"""The daemon's task group, lent to the services that start work of their own.

The daemon opens one ``asyncio.TaskGroup`` for its whole run and owns every
long-lived task in it (trio's rule: no task without an owner that awaits or
cancels it). Services are built before the group opens, so they hold this handle
and spawn through it once the daemon has bound the group; when the daemon stops,
the group cancels whatever is still running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Tasks:
    def __init__(self) -> None:
        self._group: asyncio.TaskGroup | None = None

    def bind(self, group: asyncio.TaskGroup) -> None:
        self._group = group

    @property
    def open(self) -> bool:
        """False before the daemon's group is open (start-up): do the work inline."""
        return self._group is not None

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None,
              ) -> asyncio.Task[T]:
        """Run ``coro`` in the daemon's group. It must handle its own errors: one that
        escapes would cancel the whole group (and stop the daemon)."""
        if self._group is None:
            coro.close()
            raise RuntimeError("the daemon's task group is not open yet")
        return self._group.create_task(coro, name=name)
