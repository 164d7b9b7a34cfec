"""The daemon's socket spoken by hand: newline-delimited JSON-RPC on a plain blocking
socket, for protocol tests, benchmarks and the demo (shared by ``tests``, ``bench`` and
``demo``, so the three never drift)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


class RpcFailed(Exception):
    def __init__(self, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"{method}: {error.get('message')} ({error.get('code')})")
        self.error = error


class RawConn:
    """One connection. ``send_raw`` writes bytes as they are (malformed ones too);
    ``call`` sends one request and returns its whole response."""

    def __init__(self, path: Path, timeout: float | None = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self.buf = b""
        self.ids = 0

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_obj(self, obj: Any) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv_line(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def recv_obj(self) -> Any:
        return json.loads(self.recv_line())

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request, one reply (notifications in between are skipped)."""
        self.ids += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_obj(msg)
        while True:
            reply = self.recv_obj()
            if isinstance(reply, dict) and reply.get("id") == self.ids:
                return reply

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = self.call(method, params)
        if "error" in reply:
            raise RpcFailed(method, reply["error"])
        return reply["result"]


def raw_call(sock_path: Path, method: str, params: Any = None, rid: Any = 1,
             timeout: float = 5.0) -> dict[str, Any]:
    """One request with the given id on a fresh connection; the first reply."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    with RawConn(sock_path, timeout) as c:
        c.send_obj(msg)
        reply: dict[str, Any] = c.recv_obj()
        return reply


def health(sock: Path, timeout: float = 2.0) -> str | None:
    """daemon.health's status on a fresh connection, or None if nobody answers."""
    try:
        with RawConn(sock, timeout) as c:
            status: str = c.result("daemon.health")["status"]
            return status
    except (OSError, ValueError, KeyError, RpcFailed):
        return None
