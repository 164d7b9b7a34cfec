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

    async def owned(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a state change in a task of the group and await its outcome: a client
        that goes away must not leave it half done (a hand-off between its push and its
        command, say). An error reaches this caller, never the group."""
        if self._group is None:
            return await coro
        outcome: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                outcome.set_result(await coro)
            except asyncio.CancelledError:
                outcome.cancel()
                raise
            except Exception as e:
                outcome.set_exception(e)

        self.spawn(run(), name="owned")
        return await asyncio.shield(outcome)
