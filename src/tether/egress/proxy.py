"""tether's egress proxy: one process per home, the only way out of its agents' sandboxes.

The daemon starts it (``python -I -S .../tether/egress/run.py <home>/egress``, a session
of its own, ``cwd /``) when the first agent needs it, and adopts it after a restart: a
daemon SIGKILL cuts no connection and no agent's way out. It holds ``proxy.lock``
(``flock``) for life, so there is never a second one, and names itself in ``proxy.json``
(pid, kernel start time, boot id). Its files, under ``<home>/egress/``:

* ``keys/<key>.json`` — a key's policy (``{"allow": [...]}``), written by the daemon; a key
  is an agent lineage's id;
* ``socks/<key>/proxy.sock`` — the socket it serves for that key; the daemon binds the
  directory (read-only) into the sandbox, where the bridge (:mod:`.bridge`) carries the
  sandbox's ``127.0.0.1:3128`` to it. A connection's key is the socket it arrived on, so
  its policy is the one of the sandbox that could reach that socket;
* ``proxy.sock`` — control, one JSON object per line each way: ``serve`` (load
  ``keys/<key>.json`` again, and listen if not yet), ``drop`` (stop listening, end the key's
  connections), ``sync`` (exactly these keys, and the test name map), ``ping``;
* ``denied.log`` — one JSON line per denial, rate-limited (:class:`Denials`), which the
  daemon journals as ``agent.egress_denied`` (each line once, by its number ``n``);
* ``proxy.log`` — its stderr (unexpected errors only: never a line per request).

A request is HTTP ``CONNECT host:port`` (a tunnel: TLS, or anything else) or a plain-HTTP
request in absolute form (``GET http://host[:port]/path``: forwarded with ``Connection:
close`` and the ``Host`` the URL names). The host is judged by the key's
:class:`~tether.egress.policy.Policy`, resolved here (or by the test name map: never by
the sandbox), and the connection is made to an address checked (no second lookup for
DNS to answer differently). Denied: ``403`` with ``X-Proxy-Error: blocked-by-allowlist``
and a line saying how to allow it.

It exits when it has served no key for :data:`IDLE_EXIT` seconds, or when its directory
is gone (the home removed). Standard library only, besides tether's own pure modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable

from tether.egress.policy import (
    SOCKET_NAME,
    BadEntry,
    Policy,
    is_address,
    is_public,
    normalise_host,
)
from tether.hostio.atomic import atomic_write
from tether.hostio.proc import boot_id, proc_start_time

HEAD_LIMIT = 64 * 1024  # a request's head, bytes
HEAD_TIMEOUT = 30.0  # seconds for a request's head to arrive
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
MAX_PER_KEY = 256  # connections of one sandbox at once
MAX_CONNECTIONS = 4096  # of all sandboxes
IDLE_EXIT = 60.0  # seconds without a key before the proxy exits
LOCK_WAIT = 2.0  # for the lock of a proxy that is exiting
CHECK_EVERY = 2.0
DENIAL_WINDOW = 60.0  # a (key, host, port) is written at most once per window ...
DENIAL_LINES = 20  # ... and a key at most this many lines per window (then one summary)
BUF = 65536
KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Denials:
    """The denial log: each (key, host, port) at once, then its repeats summed once per
    :data:`DENIAL_WINDOW`; at most :data:`DENIAL_LINES` lines per key and window, the rest
    summed in one line without a host. So a sandbox that floods denied requests writes a
    few lines a minute. Each line has a number ``n``, increasing (nanoseconds of the wall
    clock, or the last one plus one) across restarts of the proxy, by which the daemon
    journals each line once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.n = _last_n(path)
        # (key, host, port) -> [time it was last written, repeats since, why]
        self.recent: dict[tuple[str, str, int], list[object]] = {}
        self.budget: dict[str, list[float]] = {}  # key -> [window start, lines written]
        self.overflow: dict[str, int] = {}  # key -> denials not written this window

    def deny(self, key: str, host: str, port: int, why: str) -> None:
        now = time.monotonic()
        entry = self.recent.get((key, host, port))
        if entry is not None and now - float(entry[0]) < DENIAL_WINDOW:  # type: ignore[arg-type]
            entry[1] = int(entry[1]) + 1  # type: ignore[call-overload]
            return
        if not self._may_write(key, now):
            self.overflow[key] = self.overflow.get(key, 0) + 1
            return
        self.recent[(key, host, port)] = [now, 0, why]
        self._write(key, host, port, 1, why)

    def _may_write(self, key: str, now: float) -> bool:
        b = self.budget.setdefault(key, [now, 0])
        if now - b[0] >= DENIAL_WINDOW:
            b[0], b[1] = now, 0
        if b[1] >= DENIAL_LINES:
            return False
        b[1] += 1
        return True

    def flush(self) -> None:
        """Write the repeats of windows that have passed; forget quiet entries."""
        now = time.monotonic()
        for (key, host, port), entry in list(self.recent.items()):
            if now - float(entry[0]) < DENIAL_WINDOW:  # type: ignore[arg-type]
                continue
            if int(entry[1]):  # type: ignore[call-overload]
                self._write(key, host, port, int(entry[1]), str(entry[2]))  # type: ignore[call-overload]
                entry[0], entry[1] = now, 0
            else:
                del self.recent[(key, host, port)]
        for key, count in list(self.overflow.items()):
            b = self.budget.get(key)
            if b is None or now - b[0] >= DENIAL_WINDOW:
                self._write(key, None, None, count, "more denied requests than are "
                            f"written one by one ({DENIAL_LINES} a minute)")
                del self.overflow[key]

    def forget(self, key: str) -> None:
        for k in [k for k in self.recent if k[0] == key]:
            entry = self.recent.pop(k)
            if int(entry[1]):  # type: ignore[call-overload]
                self._write(k[0], k[1], k[2], int(entry[1]), str(entry[2]))  # type: ignore[call-overload]
        self.budget.pop(key, None)
        count = self.overflow.pop(key, 0)
        if count:
            self._write(key, None, None, count, "more denied requests than are written "
                        "one by one")

    def _write(self, key: str, host: str | None, port: int | None, count: int,
               why: str) -> None:
        self.n = max(self.n + 1, time.time_ns())
        line = json.dumps({"n": self.n, "key": key, "time": time.time(), "host": host,
                           "port": port, "count": count, "why": why}) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
            try:
                os.write(fd, line.encode())  # one write: never interleaved with another
            finally:
                os.close(fd)
        except OSError as e:
            print(f"egress proxy: cannot write {self.path}: {e}", file=sys.stderr)


def _last_n(path: str) -> int:
    """The number of the log's last line (0 if none): numbers keep increasing across a
    restart even if the clock went back meanwhile."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().splitlines()
    except OSError:
        return 0
    for raw in reversed(tail):
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            return int(json.loads(raw)["n"])
    return 0


class Key:
    """A served key: its policy, its listening server and its open connections."""

    def __init__(self, name: str, policy: Policy) -> None:
        self.name = name
        self.policy = policy
        self.server: asyncio.AbstractServer | None = None
        self.conns: set[asyncio.StreamWriter] = set()


class Request:
    """A parsed request head: where to, and (plain HTTP) the head to send there."""

    def __init__(self, host: str, port: int, head: bytes | None) -> None:
        self.host = host
        self.port = port
        self.head = head  # None: CONNECT


class BadRequest(Exception):
    pass


HOP_BY_HOP = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization",
                        "proxy-authenticate", "host"})


def _split_authority(authority: str, default: int | None) -> tuple[str, int]:
    """``host[:port]`` or ``[v6][:port]`` (``user:pass@`` dropped) -> (host, port)."""
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise BadRequest("an unclosed [ in the address")
        host, rest = authority[1:close], authority[close + 1:]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, port_text = authority, ""
    if port_text is None or (port_text and not port_text.isdigit()):
        raise BadRequest(f"a bad port in {authority[:100]!r}")
    if not port_text:
        if default is None:
            raise BadRequest("CONNECT needs host:port")
        return host, default
    port = int(port_text)
    if not 0 < port < 65536:
        raise BadRequest(f"port {port} is out of range")
    return host, port


def parse_head(head: bytes) -> Request:
    """A request head (up to and with the blank line) -> :class:`Request`."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("not an HTTP/1.x request line")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _split_authority(target, None)
        return Request(host, port, None)
    if not target.lower().startswith("http://"):
        raise BadRequest("send an absolute http:// URL, or CONNECT for anything else "
                         "(https:// included)")
    rest = target[len("http://"):]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    if path.startswith("?"):
        path = "/" + path
    host, port = _split_authority(authority, 80)
    out = [f"{method} {path} {version}", f"Host: {authority.rpartition('@')[2]}"]
    for line in lines[1:]:
        if not line:
            continue
        name, sep, _ = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise BadRequest("a malformed header line")
        if name.lower() not in HOP_BY_HOP:
            out.append(line)
    out.append("Connection: close")
    return Request(host, port, ("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))


def reply(writer: asyncio.StreamWriter, status: int, reason: str, text: str,
          extra: str = "") -> None:
    body = (text + "\n").encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
                 .encode() + body)


async def relay(cr: asyncio.StreamReader, cw: asyncio.StreamWriter,
                ur: asyncio.StreamReader, uw: asyncio.StreamWriter) -> None:
    """Copy both ways until both ends have ended; an error on either kills both."""

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(BUF):
                w.write(data)
                await w.drain()
            if w.can_write_eof() and not w.is_closing():
                w.write_eof()
        except (OSError, RuntimeError):
            cw.transport.abort()
            uw.transport.abort()

    await asyncio.gather(pipe(cr, uw), pipe(ur, cw))


class Proxy:
    def __init__(self, root: str, resolve: dict[str, list[str]]) -> None:
        self.root = root
        self.resolve = resolve
        self.keys: dict[str, Key] = {}
        self.denials = Denials(os.path.join(root, "denied.log"))
        self.open = 0
        self._complaints = [0.0, 0]  # [window start, lines written in it]
        self.idle_since: float | None = time.monotonic()
        self.stop = asyncio.Event()
        st = os.stat(root)
        self.identity = (st.st_dev, st.st_ino)

    # ------------------------------------------------------------------ keys
    def _policy(self, key: str) -> Policy:
        with open(os.path.join(self.root, "keys", f"{key}.json"), "rb") as f:
            allow = json.loads(f.read(1 << 20))["allow"]
        return Policy.parse([str(a) for a in allow])

    async def serve(self, key: str) -> None:
        """Load the key's policy (again) and listen on its socket if not yet."""
        if not KEY.fullmatch(key):
            raise ValueError(f"bad key {key!r}")
        policy = self._policy(key)
        k = self.keys.get(key)
        if k is not None:
            k.policy = policy
            return
        k = Key(key, policy)
        d = os.path.join(self.root, "socks", key)
        os.makedirs(d, mode=0o700, exist_ok=True)
        dfd = os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SOCKET_NAME, dir_fd=dfd)
            # Through the directory's fd: a long home's path would not fit in sun_path.
            sock.bind(f"/proc/self/fd/{dfd}/{SOCKET_NAME}")
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        finally:
            os.close(dfd)
        k.server = await asyncio.start_unix_server(self._handler(k), sock=sock,
                                                   limit=HEAD_LIMIT)
        self.keys[key] = k
        self.idle_since = None

    def drop(self, key: str) -> None:
        k = self.keys.pop(key, None)
        if k is None:
            return
        if k.server is not None:
            k.server.close()
        for w in list(k.conns):
            w.transport.abort()
        d = os.path.join(self.root, "socks", key)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(d, SOCKET_NAME))
        with contextlib.suppress(OSError):
            os.rmdir(d)
        self.denials.forget(key)
        if not self.keys:
            self.idle_since = time.monotonic()

    # ------------------------------------------------------------------ control
    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    out = await self.op(json.loads(line))
                except (ValueError, KeyError, TypeError, OSError, BadEntry) as e:
                    out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                writer.write(json.dumps(out).encode() + b"\n")
                await writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            writer.close()

    async def op(self, req: dict[str, object]) -> dict[str, object]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "keys": sorted(self.keys)}
        if op == "serve":
            await self.serve(str(req["key"]))
            return {"ok": True}
        if op == "drop":
            self.drop(str(req["key"]))
            return {"ok": True}
        if op == "sync":
            self.resolve = _resolve_map(req.get("resolve"))
            keys = [str(k) for k in req.get("keys") or []]  # type: ignore[attr-defined]
            for k in set(self.keys) - set(keys):
                self.drop(k)
            failed = {}
            for k in keys:
                try:
                    await self.serve(k)
                except (OSError, ValueError, KeyError, BadEntry) as e:
                    failed[k] = f"{type(e).__name__}: {e}"
            return {"ok": True, "failed": failed}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # ------------------------------------------------------------------ requests
    def _complain(self, what: str) -> None:
        """An unexpected error, on stderr (``proxy.log``): at most 10 lines a minute, so
        that no request can make the log grow without bound."""
        now = time.monotonic()
        if now - self._complaints[0] >= 60:
            self._complaints = [now, 0]
        self._complaints[1] += 1
        if self._complaints[1] <= 10:
            print(f"egress proxy: {what[:500]}", file=sys.stderr, flush=True)

    def _handler(self, k: Key) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self.keys.get(k.name) is not k or len(k.conns) >= MAX_PER_KEY \
                    or self.open >= MAX_CONNECTIONS:
                reply(writer, 503, "Service Unavailable",
                      "tether: too many connections through the egress proxy")
                writer.close()
                return
            k.conns.add(writer)
            self.open += 1
            try:
                await self._request(k, reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError):
                pass
            except Exception as e:  # a bug: say so (a few lines a minute), keep serving
                self._complain(f"{type(e).__name__}: {e}")
            finally:
                k.conns.discard(writer)
                self.open -= 1
                writer.close()
        return handle

    async def _request(self, k: Key, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            reply(writer, 431, "Request Header Fields Too Large", "tether: head too large")
            return
        try:
            req = parse_head(head)
            host = normalise_host(req.host)
        except (BadRequest, BadEntry) as e:
            reply(writer, 400, "Bad Request", f"tether egress proxy: {e}")
            return
        entry = k.policy.match(host, req.port)
        if entry is None:
            self._deny(k, writer, host, req.port, "not in the allow-list")
            return
        addrs = await self._addresses(host, req.port)
        if not addrs:
            reply(writer, 502, "Bad Gateway", f"tether egress proxy: cannot resolve {host}")
            return
        if entry.wildcard:
            public = [a for a in addrs if is_public(a)]
            if not public:
                self._deny(k, writer, host, req.port,
                           f"resolves to {addrs[0]}, not a public address (a wildcard "
                           "allows public addresses only: name the host exactly)")
                return
            addrs = public
        up = await self._connect(addrs, req.port)
        if up is None:
            reply(writer, 502, "Bad Gateway",
                  f"tether egress proxy: cannot connect to {host}:{req.port}")
            return
        ur, uw = up
        try:
            if req.head is None:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                uw.write(req.head)
            await relay(reader, writer, ur, uw)
        finally:
            uw.close()

    def _deny(self, k: Key, writer: asyncio.StreamWriter, host: str, port: int,
              why: str) -> None:
        self.denials.deny(k.name, host, port, why)
        shown = f"[{host}]" if ":" in host else host
        reply(writer, 403, "Forbidden",
              f"tether: this sandbox may not reach {shown}:{port} ({why}); allow it with "
              f"`tether run --allow-domain {shown} ...` or the sandbox spec's network.allow",
              "X-Proxy-Error: blocked-by-allowlist\r\n")

    async def _addresses(self, host: str, port: int) -> list[str]:
        if is_address(host):
            return [host]
        if host in self.resolve:
            return list(self.resolve[host])
        try:
            infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
        except (OSError, TimeoutError):
            return []
        out: list[str] = []
        for info in infos:
            addr = str(info[4][0])
            if addr not in out:
                out.append(addr)
        return out

    @staticmethod
    async def _connect(addrs: list[str], port: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for addr in addrs:
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(
                    asyncio.open_connection(addr, port, limit=BUF), CONNECT_TIMEOUT)
        return None

    # ------------------------------------------------------------------ life
    async def watch(self) -> None:
        """Flush the denial log's sums; exit when idle too long or the home is gone."""
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), CHECK_EVERY)
            self.denials.flush()
            try:
                st = os.stat(self.root)
                gone = (st.st_dev, st.st_ino) != self.identity
            except OSError:
                gone = True
            idle = self.idle_since is not None and \
                time.monotonic() - self.idle_since >= IDLE_EXIT
            if gone or idle:
                self.stop.set()


def _resolve_map(value: object) -> dict[str, list[str]]:
    """The test name map (``TETHER_TEST_RESOLVE`` of the daemon): name -> addresses."""
    out: dict[str, list[str]] = {}
    if isinstance(value, dict):
        for name, addrs in value.items():
            with contextlib.suppress(BadEntry):
                out[normalise_host(str(name))] = [str(a) for a in addrs]
    return out


async def amain(root: str, config: dict[str, object]) -> int:
    proxy = Proxy(root, _resolve_map(config.get("resolve")))
    control_path = os.path.join(root, "proxy.sock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(control_path)
    server = await asyncio.start_unix_server(proxy.control, path=control_path, limit=1 << 20)
    keys_dir = os.path.join(root, "keys")
    for name in sorted(os.listdir(keys_dir)) if os.path.isdir(keys_dir) else []:
        if name.endswith(".json") and KEY.fullmatch(name[:-5]):
            try:
                await proxy.serve(name[:-5])
            except (OSError, ValueError, KeyError, BadEntry) as e:
                print(f"egress proxy: key {name[:-5]}: {e}", file=sys.stderr)
    pid = os.getpid()
    atomic_write(os.path.join(root, "proxy.json"), json.dumps(
        {"pid": pid, "start_time": proc_start_time(pid), "boot_id": boot_id()}).encode(),
        durable=False)
    _say({"ready": True, "pid": pid, "start_time": proc_start_time(pid)})
    try:
        await proxy.watch()
    finally:
        server.close()
        for key in list(proxy.keys):
            proxy.drop(key)
        proxy.denials.flush()
        with contextlib.suppress(OSError), open(os.path.join(root, "proxy.json"), "rb") as f:
            if json.loads(f.read()).get("pid") == pid:
                os.unlink(os.path.join(root, "proxy.json"))
                os.unlink(control_path)
    return 0


def _say(obj: dict[str, object]) -> None:
    """The one line the daemon waits for, then stdout is /dev/null."""
    with contextlib.suppress(OSError):
        os.write(1, json.dumps(obj).encode() + b"\n")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: run.py HOME/egress (the daemon starts it)", file=sys.stderr)
        return 2
    root = argv[1]
    os.umask(0o077)
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # the daemon died before it said anything
    config = json.loads(line)
    lock = os.open(os.path.join(root, "proxy.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                   0o600)
    # One that is exiting (idle) holds the lock a moment longer: wait it out.
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                _say({"running": True})  # another one serves this home: the daemon uses it
                return 0
            time.sleep(0.05)
    return asyncio.run(amain(root, config))
