"""Errors raised by the SDK."""

from __future__ import annotations

from tether.model.errors import RpcCode, TetherError

__all__ = ["CONNECTION_ERRORS", "DaemonUnavailable", "HomeUntrusted", "TetherError"]

#: Errors the daemon writes with id null, then closes the connection: they answer
#: whatever request the client had sent.
CONNECTION_ERRORS = frozenset({"TOO_MANY_CONNECTIONS", "CONNECTION_EVICTED",
                               "REQUEST_TIMEOUT"})


class DaemonUnavailable(TetherError):
    """No daemon answered on the socket within the reconnect budget."""

    def __init__(self, message: str) -> None:
        super().__init__(RpcCode.UNAVAILABLE, "DAEMON_UNAVAILABLE", message)


class HomeUntrusted(TetherError):
    """The home, or a directory above it, could be written by another user: the SDK
    neither starts a daemon there nor connects to its socket (``hostio/trust.py``)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(RpcCode.UNAVAILABLE, "HOME_UNTRUSTED", message, {"path": path})
