"""dockerd's Engine API, the few calls a docker exec needs, over a plain socket.

The monitor creates a docker exec itself, and its child (:mod:`tether.monitor.dockerexec`)
starts it and carries its streams, instead of running the ``docker`` CLI: a Go binary
whose start-up (~25 ms of CPU) was most of what tether added to a docker exec. So this is
HTTP/1.1 by hand: one request per connection, a JSON body, a reply read by its
``Content-Length`` (or chunks, or to the end), and the exec start's hijacked connection,
which after the reply's head carries the exec's streams both ways.

Only plain sockets: ``unix://PATH`` and ``tcp://HOST:PORT``. An engine reached through TLS
or ssh keeps the ``docker`` CLI (its certificates, config and ssh transport): the daemon
decides (``tether.runtime.docker.names.engine_address``).

What dockerd sends is bounded (a reply's head and body) though dockerd is trusted: it is
the machine's root. Standard library only, and low-level modules (see
:mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _socket as socket

from tether.monitor import tinyjson as json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

MAX_HEAD = 64 * 1024  # a reply's status line and headers
MAX_BODY = 4 * 1024 * 1024  # a reply's body (an exec's inspect is a few hundred bytes)
#: How long one call may take. dockerd answers these in milliseconds; a hung one must
#: not hang the monitor (the daemon gives up on a start report after 10 s).
TIMEOUT = 8.0


class EngineError(OSError):
    """dockerd could not be reached, or refused (``status``: its HTTP status, 0 when it
    never answered). The message says which and why, in dockerd's words."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


def connect(host: str, timeout: float | None = TIMEOUT) -> socket.socket:
    """A connection to the engine at ``host`` (``unix://PATH`` or ``tcp://HOST:PORT``)."""
    try:
        if host.startswith("unix://"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(timeout)
                s.connect(host[len("unix://"):])
            except BaseException:
                s.close()
                raise
            return s
        if host.startswith("tcp://"):
            name, _, port = host[len("tcp://"):].rstrip("/").rpartition(":")
            last: OSError = EngineError(f"{host} has no address")
            for family, kind, proto, _, addr in socket.getaddrinfo(
                    name.strip("[]"), int(port), 0, socket.SOCK_STREAM):
                s = socket.socket(family, kind, proto)
                try:
                    s.settimeout(timeout)
                    s.connect(addr)
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    return s
                except OSError as e:
                    s.close()
                    last = e
            raise last
    except (OSError, ValueError) as e:
        raise EngineError(f"cannot reach dockerd at {host}: {e}") from None
    raise EngineError(f"cannot reach dockerd at {host}: only unix:// and tcp:// here")


def _request(sock: socket.socket, method: str, path: str, body: Any = None,
             upgrade: bool = False) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: tether\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n")
    if upgrade:
        head += "Connection: Upgrade\r\nUpgrade: tcp\r\n"
    sock.sendall(head.encode() + b"\r\n" + data)


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The reply's status and headers (names in lower case), and what came after them."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:
            raise EngineError("dockerd sent a reply head larger than 64 KiB")
        chunk = sock.recv(65536)
        if not chunk:
            raise EngineError("dockerd closed the connection before it answered")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise EngineError(f"dockerd sent no HTTP reply: {lines[0][:100]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, rest


def _read_body(sock: socket.socket, headers: dict[str, str], rest: bytes) -> bytes:
    buf = bytearray(rest)

    def fill(n: int) -> None:
        while len(buf) < n:
            if len(buf) > MAX_BODY + 64:
                raise EngineError("dockerd sent a reply larger than 4 MiB")
            chunk = sock.recv(65536)
            if not chunk:
                raise EngineError("dockerd closed the connection mid-reply")
            buf.extend(chunk)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            while b"\r\n" not in buf:
                fill(len(buf) + 1)
            line, _, _ = bytes(buf).partition(b"\r\n")
            del buf[:len(line) + 2]
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return bytes(out)
            if len(out) + size > MAX_BODY:
                raise EngineError("dockerd sent a reply larger than 4 MiB")
            fill(size + 2)
            out += buf[:size]
            del buf[:size + 2]
    if "content-length" in headers:
        n = int(headers["content-length"])
        if n > MAX_BODY:
            raise EngineError("dockerd sent a reply larger than 4 MiB")
        fill(n)
        return bytes(buf[:n])
    while chunk := sock.recv(65536):  # to the end of the connection
        buf.extend(chunk)
        if len(buf) > MAX_BODY:
            raise EngineError("dockerd sent a reply larger than 4 MiB")
    return bytes(buf)


def _message(status: int, body: bytes) -> str:
    try:
        msg = json.loads(body).get("message")
    except (ValueError, AttributeError):
        msg = None
    return str(msg) if msg else f"HTTP {status}: {body[:200]!r}"


def call(host: str, method: str, path: str, body: Any = None,
         timeout: float | None = TIMEOUT) -> Any:
    """One request on its own connection; the reply's JSON (None when it has no body).
    Raises :class:`EngineError` for anything but a 2xx reply."""
    sock = connect(host, timeout)
    try:
        _request(sock, method, path, body)
        status, headers, rest = _read_head(sock)
        data = _read_body(sock, headers, rest)
    except EngineError:
        raise
    except (OSError, ValueError) as e:
        raise EngineError(f"dockerd at {host} did not answer {method} {path}: {e}") from None
    finally:
        sock.close()
    if not 200 <= status < 300:
        raise EngineError(_message(status, data), status)
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except ValueError as e:
        raise EngineError(f"dockerd sent a malformed reply to {method} {path}: {e}") from None


def exec_create(host: str, container: str, config: dict[str, Any]) -> str:
    """``POST /containers/{container}/exec``: the new exec's id (nothing runs yet)."""
    reply = call(host, "POST", f"/containers/{container}/exec", config)
    exec_id = reply.get("Id") if isinstance(reply, dict) else None
    if not isinstance(exec_id, str) or not exec_id.isalnum():
        raise EngineError(f"dockerd created no exec: {reply!r}"[:300])
    return exec_id


def exec_start(host: str, exec_id: str, tty: bool,
               sock: socket.socket | None = None) -> tuple[socket.socket, bytes]:
    """``POST /exec/{id}/start``, attached: the hijacked connection, which from now on
    carries the exec's streams (multiplexed without ``tty``, raw with it), and what of
    them came with the reply's head. ``sock``: a connection made ahead."""
    if sock is None:
        sock = connect(host)
    try:
        _request(sock, "POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": tty},
                 upgrade=True)
        status, headers, rest = _read_head(sock)
        if status not in (101, 200):
            raise EngineError(_message(status, _read_body(sock, headers, rest)), status)
    except BaseException as e:
        sock.close()
        if isinstance(e, EngineError) or not isinstance(e, (OSError, ValueError)):
            raise
        raise EngineError(f"dockerd at {host} did not start exec {exec_id[:12]}: {e}"
                          ) from None
    return sock, rest


def exec_inspect(host: str, exec_id: str) -> dict[str, Any]:
    reply = call(host, "GET", f"/exec/{exec_id}/json")
    if not isinstance(reply, dict):
        raise EngineError(f"dockerd sent no exec for {exec_id[:12]}: {reply!r}"[:300])
    return reply


def exec_resize(host: str, exec_id: str, rows: int, cols: int) -> None:
    call(host, "POST", f"/exec/{exec_id}/resize?h={int(rows)}&w={int(cols)}", timeout=2.0)
