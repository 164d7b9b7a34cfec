"""Attaching to an exec's terminal. The connection goes straight to the exec's monitor,
so it neither needs nor notices the daemon: a daemon crash does not disturb it."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from pathlib import Path
from typing import Any

from tether.client.errors import TetherError
from tether.model.errors import RpcCode, not_found
from tether.model.layout import HomeLayout
from tether.monitor import attachproto as proto


class Attachment:
    """A live connection to one exec's terminal (or, without a terminal, its stdin).

    ``read`` returns output as it arrives; after the program ends it returns ``b""``
    and :attr:`exit` holds the exit record. ``write`` types into the program,
    ``resize`` sets the window size, ``detach`` leaves without disturbing it.

    With ``terminal`` (an fd of a terminal in raw mode) the monitor is offered that
    terminal: if it takes it (:attr:`direct`), it writes the output there and reads the
    keys itself, detaching on ``detach_keys``; ``read`` then only waits for the end
    (:attr:`exit`, or :attr:`detached`). The caller owns the terminal's modes.
    """

    def __init__(self, socket_path: str | Path, *, read_only: bool = False,
                 rows: int | None = None, cols: int | None = None,
                 replay: int = proto.DEFAULT_REPLAY, timeout: float = 5.0,
                 terminal: int | None = None, detach_keys: bytes = b"") -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(socket_path))
        except (FileNotFoundError, ConnectionRefusedError):
            self.sock.close()
            raise TetherError(RpcCode.INVALID_STATE, "NOT_RUNNING",
                              "the exec is not running (its monitor socket is gone)") from None
        hello: dict[str, Any] = {"op": "attach", "read_only": read_only, "rows": rows or 0,
                                 "cols": cols or 0, "replay": replay}
        if terminal is not None:
            hello.update(terminal=True, detach_keys=list(detach_keys))
        self._buf = bytearray()
        try:
            line = json.dumps(hello).encode() + b"\n"
            if terminal is None:
                self.sock.sendall(line)
            else:  # the line is short: one sendmsg carries it whole, with the fd
                socket.send_fds(self.sock, [line], [terminal])
            line = self._read_line()
        except OSError as e:  # includes a timeout
            self.sock.close()
            raise TetherError(RpcCode.INVALID_STATE, "NOT_RUNNING",
                              f"the exec's monitor did not answer the attach: {e}") from None
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            self.sock.close()
            raise TetherError(RpcCode.INVALID_STATE, "NO_TERMINAL",
                              str(reply.get("error", "attach refused")))
        self.info = reply
        self.direct = bool(reply.get("terminal"))  # the monitor took the terminal
        self.exit: dict[str, Any] | None = None
        self.detached = False  # the monitor saw the detach keys
        self.closed = False
        self.sock.settimeout(None)

    @classmethod
    def adopt(cls, sock: socket.socket, reply: dict[str, Any], buffered: bytes = b""
              ) -> Attachment:
        """An attachment whose hello was exchanged elsewhere (the lean ``tether
        attach``): its connected ``sock``, the monitor's ``reply``, and what was read
        past it."""
        self = cls.__new__(cls)
        self.sock = sock
        self._buf = bytearray(buffered)
        self.info = reply
        self.direct = bool(reply.get("terminal"))
        self.exit = None
        self.detached = False
        self.closed = False
        sock.settimeout(None)
        return self

    def _read_line(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise TetherError(RpcCode.INVALID_STATE, "NOT_RUNNING",
                                  "the exec's monitor closed the connection")
            self._buf += chunk
        nl = self._buf.index(b"\n")
        line = bytes(self._buf[:nl])
        del self._buf[:nl + 1]
        return line

    def fileno(self) -> int:
        return self.sock.fileno()

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ------------------------------------------------------------------ output
    def _take(self) -> bytes | None:
        """Output from complete frames already buffered; None if there are none."""
        out = bytearray()
        while True:
            got = proto.split(self._buf)
            if got is None:
                break
            kind, payload = got
            if kind == proto.DATA:
                out += payload
            elif kind == proto.EXIT:
                self.exit = json.loads(payload)
                self.closed = True
                break
            elif kind == proto.DETACH:
                self.detached = self.closed = True
                break
        return bytes(out) if out or self.closed else None

    def _receive(self) -> bool:
        """One non-blocking recv into the buffer; False when nothing was there."""
        try:
            chunk = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self._buf += chunk
        return True

    def read(self, timeout: float | None = None) -> bytes:
        """Output bytes; ``b""`` after a timeout with nothing new or once it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            got = self._take()
            if got is not None:
                return got
            if self.closed:
                return b""
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.sock], [], [], wait)[0]:
                return b""
            self._receive()

    def read_ready(self) -> bytes:
        """Output after ``select``/``poll`` said the socket is readable: no waiting."""
        got = self._take()
        if got is not None:
            return got
        self._receive()
        return self._take() or b""

    def read_until(self, marker: bytes, timeout: float = 10.0) -> bytes:
        """Read until ``marker`` appears (e.g. a prompt); raise TimeoutError if it does not."""
        deadline = time.monotonic() + timeout
        seen = bytearray()
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise TimeoutError(f"{marker!r} not seen; got {bytes(seen[-200:])!r}")
            seen += self.read(left)
        return bytes(seen)

    # ------------------------------------------------------------------ input
    def _send(self, kind: bytes, payload: bytes = b"") -> None:
        if self.closed:
            raise TetherError(RpcCode.INVALID_STATE, "NOT_RUNNING", "the exec has ended")
        self.sock.sendall(proto.frame(kind, payload))

    def write(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        for i in range(0, len(raw), proto.MAX_FRAME):
            self._send(proto.DATA, raw[i:i + proto.MAX_FRAME])

    def resize(self, rows: int, cols: int) -> None:
        self._send(proto.RESIZE, proto.SIZE.pack(rows, cols))

    def close_stdin(self) -> None:
        """End the program's input (for execs without a terminal)."""
        self._send(proto.EOF)

    def detach(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                self.sock.sendall(proto.frame(proto.DETACH))
            self.closed = True
        self.sock.close()


def find_socket(layout: HomeLayout, ref: str) -> Path:
    """Find a running exec's monitor socket from the files alone (no daemon needed): by
    exec id, name or id prefix, or by the id of the agent lineage it is an attempt of."""
    exact: list[Path] = []
    prefix: list[Path] = []
    for h in layout.run.glob("*.handles.json"):
        exec_id = h.name.split(".", 1)[0]
        try:
            data = json.loads(h.read_text())
        except (OSError, ValueError):
            continue
        sock = Path(data.get("socket", layout.run / f"{exec_id}.sock"))
        if exec_id == ref or data.get("name") == ref or data.get("lineage") == ref:
            exact.append(sock)
        elif exec_id.startswith(ref):
            prefix.append(sock)
    # A name may belong to ended execs too: only a live socket counts.
    live = [m for m in exact if m.exists()] or [m for m in prefix if m.exists()]
    if len(live) == 1:
        return live[0]
    if len(live) > 1:
        raise TetherError(RpcCode.AMBIGUOUS, "AMBIGUOUS",
                          f"{ref!r} matches {len(live)} running execs; give more of the id")
    raise not_found("exec", ref)
