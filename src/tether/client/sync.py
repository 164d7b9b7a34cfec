"""The blocking client. Reconnects (and auto-starts a daemon) when the daemon goes away,
and retries the call. Reads, waits, cancels and ``exec.start`` (which carries a
request key) are safe to retry, so a daemon restart is invisible to them; a
``sandbox.create`` or ``sandbox.delete`` whose reply was lost may report
``NAME_IN_USE`` or ``SANDBOX_NOT_FOUND`` on the retry."""

from __future__ import annotations

import base64
import itertools
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from tether.client.api import _Api
from tether.client.attach import Attachment, find_socket
from tether.client.daemonctl import Autostart, resolve_home
from tether.client.errors import DaemonUnavailable, TetherError
from tether.model.errors import RpcCode
from tether.model.layout import HomeLayout

_enc = msgspec.json.Encoder()
MAX_RESPONSE = 64 * 1024 * 1024


class _Conn:
    def __init__(self, path: Path, timeout: float | None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self.buf = bytearray()

    def send(self, msg: dict[str, Any]) -> None:
        self.sock.sendall(_enc.encode(msg) + b"\n")

    def recv(self) -> Any:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return msgspec.json.decode(line)
            if len(self.buf) > MAX_RESPONSE:
                raise ConnectionError("response too large")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


class Client(_Api[Any]):
    """A blocking tether client.

    ``home`` selects the daemon (default ``$TETHER_HOME`` or the XDG state dir).
    ``autostart`` starts a daemon in the background when none answers.
    ``reconnect`` is how long (seconds) to keep trying after the daemon went away.
    ``socket`` connects elsewhere than the home's socket (a sandboxed agent's
    restricted ``agent.sock``); it never autostarts a daemon.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None, *, autostart: bool = True,
                 reconnect: float = 30.0, timeout: float | None = None,
                 socket: str | os.PathLike[str] | None = None) -> None:
        self.home = resolve_home(home)
        self.layout = HomeLayout(self.home)
        self.socket_path = Path(socket) if socket else self.layout.socket
        self.autostart = autostart and socket is None
        self.reconnect = reconnect
        self.timeout = timeout
        self._conn: _Conn | None = None
        self._ids = itertools.count(1)
        self._auto = Autostart(self.home) if self.autostart else None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ transport
    def _connect(self) -> _Conn:
        if self._conn is not None:
            return self._conn
        deadline = time.monotonic() + self.reconnect
        delay = 0.02
        while True:
            try:
                self._conn = _Conn(self.socket_path, self.timeout)
                return self._conn
            except (FileNotFoundError, ConnectionRefusedError):
                if self._auto is not None:
                    self._auto.refused()
            except OSError:
                pass
            if self._auto is not None:
                self._auto.check()
            if time.monotonic() >= deadline:
                hint = ("start one with `tether daemon`" if self._auto is None else
                        self._auto.why())
                raise DaemonUnavailable(f"no tether daemon answers on {self.socket_path}; "
                                        f"{hint}")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.reconnect
        while True:
            conn = self._connect()
            rid = next(self._ids)
            try:
                conn.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
                while True:
                    msg = conn.recv()
                    if isinstance(msg, dict) and msg.get("id") == rid:
                        break
            except (ConnectionError, OSError, msgspec.DecodeError):
                self.close()
                if self._auto is not None:
                    self._auto.forget()
                if time.monotonic() >= deadline:
                    raise DaemonUnavailable(f"lost the daemon at {self.layout.socket} "
                                            f"while calling {method}") from None
                time.sleep(0.05)
                continue
            if "error" in msg:
                err = TetherError.from_wire(msg["error"])
                if err.rpc_code == RpcCode.DAEMON_STOPPING and time.monotonic() < deadline:
                    self.close()
                    time.sleep(0.1)
                    continue
                raise err
            return msg.get("result")

    # ------------------------------------------------------------------ conveniences
    def attach(self, exec: str, *, read_only: bool = False, rows: int | None = None,
               cols: int | None = None, replay: int = 64 * 1024) -> Attachment:
        """Attach to an exec's terminal: ``write``, ``read``, ``resize``, ``detach``.

        Works while no daemon runs: the exec is then found from its files.
        """
        try:
            x = self.exec_get(exec)
            path = Path(x["socket"])
        except DaemonUnavailable:
            path = find_socket(self.layout, exec)
        return Attachment(path, read_only=read_only, rows=rows, cols=cols, replay=replay)

    def read_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                  follow: bool = False) -> Iterator[bytes]:
        """Yield a log's bytes from ``offset``; with ``follow``, until the exec ends."""
        while True:
            chunk = self.exec_logs(exec, stream=stream, offset=offset,
                                   limit=1024 * 1024, wait=5.0 if follow else 0.0)
            data = base64.b64decode(chunk["data"])
            if data:
                offset = chunk["offset"]
                yield data
                continue
            if chunk["eof"] or not follow:
                return

    def subscribe(self, *, since: int = 0, sandbox: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield events after ``since``, forever; survives daemon restarts and overflow.

        The cursor is the global ``gseq``, or the sandbox's ``seq`` when ``sandbox``
        is given; each event is yielded exactly once.
        """
        cursor = since
        key = "seq" if sandbox else "gseq"
        sub_client = Client(self.home, autostart=self.autostart, reconnect=self.reconnect)
        try:
            while True:
                try:
                    conn = sub_client._connect()
                    params: dict[str, Any] = {"since": cursor}
                    if sandbox:
                        params["sandbox"] = sandbox
                    conn.send({"jsonrpc": "2.0", "id": 0, "method": "events.subscribe",
                               "params": params})
                    while True:
                        msg = conn.recv()
                        if msg.get("id") == 0 and "error" in msg:
                            raise TetherError.from_wire(msg["error"])
                        if msg.get("method") == "events.event":
                            ev = msg["params"]["event"]
                            if ev[key] <= cursor:
                                continue
                            cursor = ev[key]
                            yield ev
                        elif msg.get("method") == "events.overflow":
                            sub_client.close()
                            break
                except (ConnectionError, OSError, msgspec.DecodeError):
                    sub_client.close()
                    if sub_client._auto is not None:
                        sub_client._auto.forget()
                    time.sleep(0.05)
        finally:
            sub_client.close()
