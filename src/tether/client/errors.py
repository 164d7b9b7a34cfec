"""Errors raised by the SDK."""

from __future__ import annotations

from tether.model.errors import RpcCode, TetherError

__all__ = ["DaemonUnavailable", "HomeUntrusted", "TetherError"]


class DaemonUnavailable(TetherError):
    """No daemon answered on the socket within the reconnect budget."""

    def __init__(self, message: str) -> None:
        super().__init__(RpcCode.UNAVAILABLE, "DAEMON_UNAVAILABLE", message)


class HomeUntrusted(TetherError):
    """The home, or a directory above it, could be written by another user: the SDK
    neither starts a daemon there nor connects to its socket (``hostio/trust.py``)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(RpcCode.UNAVAILABLE, "HOME_UNTRUSTED", message, {"path": path})
