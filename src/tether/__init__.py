"""tether — a durable supervisor for AI coding agents.

The public SDK is :class:`tether.Client` (blocking) and :class:`tether.AsyncClient`
(asyncio). They are imported lazily so that the monitor process, which imports
``tether.monitor`` with nothing but the standard library, stays small.
"""

from __future__ import annotations

# Not ``from typing import TYPE_CHECKING``: the monitor imports this package and
# ``typing`` alone costs it ~2 MB of RSS. mypy treats this constant the same way.
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:
    from typing import Any

    from tether.client.aio import AsyncClient
    from tether.client.blocking import Client
    from tether.client.errors import TetherError

__all__ = ["AsyncClient", "Client", "TetherError", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from tether.client.blocking import Client

        return Client
    if name == "AsyncClient":
        from tether.client.aio import AsyncClient

        return AsyncClient
    if name == "TetherError":
        from tether.client.errors import TetherError

        return TetherError
    raise AttributeError(name)
