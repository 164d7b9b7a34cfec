"""One call over the daemon's socket with the standard library's C modules only (or a
few, pipelined on one connection: :class:`Pipeline`).

For a program that lives for a single call and must start fast: the hook program, which
Claude Code runs on every tool call, and the CLI's fast path. Importing msgspec and the
full client costs more than the rest of such a call, and so do ``pathlib``, ``typing``,
``re`` and ``enum`` at this scale: paths are strings here, JSON is ``wirejson`` (``_json``,
not the ``json`` package, which imports ``re``), the socket is ``_socket``'s (``socket``
imports ``enum`` and ``selectors``), and the error types are imported only when a call
fails. There
are no retries and no auto-start here: ``None`` tells the caller to make the call with
:class:`~tether.client.blocking.Client`, which has both.
"""

from __future__ import annotations

import _socket

from tether.client import wirejson
from tether.hostio.trust import UntrustedHome, check_home

TYPE_CHECKING = False  # not ``typing``'s: importing it costs a hook call ~1 ms
if TYPE_CHECKING:
    from typing import Any

MAX_REPLY = 64 * 1024 * 1024  # bytes in one reply line, as the full client


def call_once(sock_path: str, method: str, params: dict[str, Any], *,
              home: str | None = None) -> dict[str, Any] | None:
    """``method``'s result, or ``None`` when the daemon did not answer it (no daemon, a
    lost connection, a stopping or full daemon): the caller then makes the call with the
    full client. An error a retry would not change is raised as ``TetherError``. With
    ``home``, ``sock_path`` is that home's socket and the home must be trusted first
    (``HomeUntrusted``), as the full client checks."""
    if home is not None:
        try:
            check_home(home)
        except UntrustedHome as e:
            from tether.client.errors import HomeUntrusted

            raise HomeUntrusted(str(e), e.path) from None
    line = wirejson.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                           "params": params}).encode() + b"\n"
    try:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.connect(sock_path)
            s.sendall(line)
            msg = _reply(s)
        finally:
            s.close()
    except (OSError, ValueError):
        return None
    if msg is None:
        return None
    err = msg.get("error")
    if err is None:
        result = msg.get("result")
        return result if isinstance(result, dict) else None
    from tether.client.errors import CONNECTION_ERRORS, TetherError
    from tether.model.errors import RpcCode

    error = TetherError.from_wire(err)
    if error.rpc_code == RpcCode.DAEMON_STOPPING or error.code in CONNECTION_ERRORS:
        return None
    raise error


def check(home: str) -> None:
    """``HomeUntrusted`` unless only we can write ``home`` (as the full client checks)."""
    try:
        check_home(home)
    except UntrustedHome as e:
        from tether.client.errors import HomeUntrusted

        raise HomeUntrusted(str(e), e.path) from None


def unanswered(err: dict[str, Any]) -> bool:
    """Whether a wire error is a refusal the full client would retry (a stopping or full
    daemon, an eviction, a timed-out line): the request was not carried out."""
    from tether.client.errors import CONNECTION_ERRORS
    from tether.model.errors import RpcCode

    data = err.get("data")
    code = data.get("code") if isinstance(data, dict) else None
    return err.get("code") == RpcCode.DAEMON_STOPPING or code in CONNECTION_ERRORS


class Pipeline:
    """One connection for a few calls, sent without waiting for each other's replies
    (the lean ``tether run``: a long-polled log beside a long-polled wait). ``OSError``
    or ``ValueError`` (``ConnectionError`` is one of the first) when the connection is
    lost, the daemon closes it with its last word, or a reply is not JSON."""

    def __init__(self, sock_path: str) -> None:
        self._s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._s.connect(sock_path)
        except OSError:
            self._s.close()
            raise
        self._buf = b""
        self._ids = 0

    def fileno(self) -> int:
        return self._s.fileno()

    def send(self, method: str, params: dict[str, Any]) -> int:
        """Send one request; its id."""
        self._ids += 1
        self._s.sendall(wirejson.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method,
                                        "params": params}).encode() + b"\n")
        return self._ids

    def read(self) -> list[dict[str, Any]]:
        """The messages that one read of the socket completes (it blocks for that read)."""
        chunk = self._s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self._buf += chunk
        msgs = []
        while (nl := self._buf.find(b"\n")) >= 0:
            msg = wirejson.loads(self._buf[:nl])
            self._buf = self._buf[nl + 1:]
            if not isinstance(msg, dict):
                raise ValueError("a reply that is not a JSON object")
            if msg.get("id") is None and msg.get("method") is None:
                raise ConnectionError("the daemon's last word on this connection")
            msgs.append(msg)
        if len(self._buf) > MAX_REPLY:
            raise ValueError("reply too large")
        return msgs

    def close(self) -> None:
        self._s.close()


def _reply(s: _socket.socket) -> dict[str, Any] | None:
    """The reply to request 1 (notifications skipped), or ``None`` when the daemon closed
    the connection first or refused it (id null)."""
    buf = b""
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            if len(buf) > MAX_REPLY:
                return None
            chunk = s.recv(1 << 20)
            if not chunk:
                return None
            buf += chunk
            continue
        msg = wirejson.loads(buf[:nl])
        buf = buf[nl + 1:]
        if not isinstance(msg, dict):
            return None
        if msg.get("id") == 1:
            return msg
        if msg.get("id") is None and msg.get("method") is None:
            return None  # the daemon's last word on this connection
