"""Errors raised by the SDK."""

from __future__ import annotations

from tether.model.errors import RpcCode, TetherError

__all__ = ["DaemonUnavailable", "TetherError"]


class DaemonUnavailable(TetherError):
    """No daemon answered on the socket within the reconnect budget."""

    def __init__(self, message: str) -> None:
        super().__init__(RpcCode.UNAVAILABLE, "DAEMON_UNAVAILABLE", message)
