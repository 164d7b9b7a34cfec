"""The blocking client (``tether.Client``): a socket, and the loops that wait on it.

It reconnects (and auto-starts a daemon) when the daemon goes away, and retries the
call. Reads, waits, cancels and ``exec.start`` (which carries a request key) are safe
to retry, so a daemon restart is invisible to them; a ``sandbox.create`` or
``sandbox.delete`` whose reply was lost may report ``NAME_IN_USE`` or
``SANDBOX_NOT_FOUND`` on the retry.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tether.client import core
from tether.client.api import _Api
from tether.client.core import Blocking, Cursor, Request, Resubscribe, Retry
from tether.client.daemonctl import Autostart, resolve_home, trusted, usable
from tether.client.errors import DaemonUnavailable
from tether.model.layout import HomeLayout
from tether.model.records import Event

if TYPE_CHECKING:
    from tether.client.attach import Attachment
    from tether.model.errors import TetherError

T = TypeVar("T")


class _Conn:
    """One connection, read line by line."""

    def __init__(self, path: Path, timeout: float | None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self.buf = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return line
            if len(self.buf) > core.MAX_REPLY:
                raise ConnectionError("response too large")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk

    def last_word(self) -> TetherError | None:
        """After a failed send or read: the refusal the daemon wrote before it closed, if
        any. A full daemon refuses a connection without reading it, so a client slow to
        send (a loaded machine) gets EPIPE with the reason already in its buffer."""
        with contextlib.suppress(OSError):
            self.sock.setblocking(False)
            while len(self.buf) <= core.MAX_REPLY and (chunk := self.sock.recv(1 << 16)):
                self.buf += chunk
        for line in bytes(self.buf).splitlines():
            with contextlib.suppress(msgspec.DecodeError):
                err = core.connection_error(core.decode(line))
                if err is not None:
                    return err
        return None

    def close(self) -> None:
        self.sock.close()


class Client(Blocking, _Api):
    """A blocking tether client; its methods return typed replies (``client.replies``).

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
        if self.socket_path == self.layout.socket:
            trusted(self.home)
            usable(self.home)
        retry = Retry(self.socket_path, self._auto, self.reconnect)
        while True:
            try:
                self._conn = _Conn(self.socket_path, self.timeout)
                return self._conn
            except OSError as e:
                time.sleep(retry.refused(e))

    def _result(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        retry = Retry(self.socket_path, self._auto, self.reconnect)
        while True:
            conn = self._connect()
            rid = next(self._ids)
            try:
                conn.send(core.encode(rid, method, params))
                while ((msg := core.decode(conn.recv())).id != rid
                       and core.connection_error(msg) is None):
                    pass
            except (ConnectionError, OSError, msgspec.DecodeError):
                last = conn.last_word()
                self.close()
                time.sleep(retry.refusal(last) if last is not None else retry.lost(method))
                continue
            err = core.error(msg)
            if err is None:
                return msg.result
            wait = retry.refusal(err)
            self.close()
            time.sleep(wait)

    def _fetch(self, req: Request[T]) -> T:
        return req.decode(self._result(req.method, req.params))

    def _invoke(self, req: Request[T]) -> T:
        return self._fetch(req)

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        """Any method, its result as plain JSON values (for methods the table lacks)."""
        return msgspec.json.decode(self._result(method, params))

    # ------------------------------------------------------------------ conveniences
    def attach(self, exec: str, *, read_only: bool = False, rows: int | None = None,
               cols: int | None = None, replay: int = 64 * 1024,
               terminal: int | None = None, detach_keys: bytes = b"") -> Attachment:
        """Attach to an exec's terminal: ``write``, ``read``, ``resize``, ``detach``.

        Works while no daemon runs: the exec is then found from its files. ``terminal``
        (with ``detach_keys``) offers the monitor a terminal to use directly.
        """
        from tether.client.attach import Attachment, find_socket

        try:
            sock = self._fetch(_Api.exec_get.request(self, exec)).socket
        except DaemonUnavailable:
            sock = None
        path = Path(sock) if sock else find_socket(self.layout, exec)
        return Attachment(path, read_only=read_only, rows=rows, cols=cols, replay=replay,
                          terminal=terminal, detach_keys=detach_keys)

    def read_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                  follow: bool = False) -> Iterator[bytes]:
        """Yield a log's bytes from ``offset``; with ``follow``, until the exec ends."""
        while True:
            chunk = self._fetch(_Api.exec_logs.request(
                self, exec, stream=stream, offset=offset, limit=1024 * 1024,
                wait=5.0 if follow else 0.0))
            if chunk.data:
                offset = chunk.offset
                yield chunk.data
                continue
            if chunk.eof or not follow:
                return

    def read_output(self, exec: str, *, offset: int = 0, follow: bool = False
                    ) -> Iterator[tuple[str, bytes]]:
        """Yield (stream, bytes) of an exec's output, stdout and stderr interleaved in
        the order they were written (a terminal exec's: ``pty``), from byte ``offset``
        of it; with ``follow``, until the exec ends."""
        while True:
            chunk = self._fetch(_Api.exec_logs.request(
                self, exec, stream="all", offset=offset, limit=1024 * 1024,
                wait=5.0 if follow else 0.0))
            if chunk.data:
                offset = chunk.offset
                yield from chunk.parts()
                continue
            if chunk.eof or not follow:
                return

    def subscribe(self, *, since: int = 0, sandbox: str | None = None,
                  epoch: str | None = None) -> Generator[Event, None, None]:
        """Yield events after ``since``, forever; survives daemon restarts and overflow.

        The cursor is the global ``gseq``, or the sandbox's ``seq`` when ``sandbox``
        is given; each event is yielded exactly once. The cursor belongs to the journal
        ``epoch`` (``events_list().epoch``, else the first reply's): if the store was
        rebuilt meanwhile, a ``TetherError`` ``EPOCH_CHANGED`` ends the loop instead.
        """
        cursor = Cursor(since, sandbox, epoch)
        sub = Client(self.home, autostart=self.autostart, reconnect=self.reconnect)
        try:
            while True:
                try:
                    conn = sub._connect()
                    conn.send(cursor.request())
                    while True:
                        ev = cursor.feed(conn.recv())
                        if ev is not None:
                            yield ev
                except Resubscribe:
                    sub.close()
                except (ConnectionError, OSError, msgspec.DecodeError):
                    sub.close()
                    if sub._auto is not None:
                        sub._auto.forget()
                    time.sleep(0.05)
        finally:
            sub.close()
