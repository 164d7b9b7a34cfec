"""The JSON-RPC 2.0 server: framing, validation, dispatch, errors, batches.

Memory per connection is bounded. Short requests are answered inline, one at a
time, and the next line is read only after the reply has drained into the
socket: a client that never reads stops being read (backpressure) instead of
piling up replies. Long polls (methods that wait for an outside event) run as
tasks, at most ``MAX_LONG_POLLS_PER_CONNECTION`` at once, owned by the
connection's TaskGroup and cancelled with it. A batch reply is capped at
``MAX_BATCH_REPLY`` bytes. A failure inside one handler becomes that request's
error response and never reaches another client. Exceptions that mean an
outside condition rather than a bug (a full disk) are turned into their error
code here, by the daemon's ``translate``, once for every handler.

Floods are bounded too: at most ``max_connections`` per server (at the limit a new
client evicts the longest-idle connection, or is refused with one error line when
none is idle), a half-written line is dropped with its connection after
``half_line_timeout`` seconds, the unfinished lines of all connections together hold
at most ``max_buffered`` bytes (past it the oldest are dropped with their connections),
and notifications wait while more than ``NOTIFY_BUFFER`` bytes are queued for the
client (``Connection.writable``). What such buffers held is handed back to the system
once enough of it was freed (``hostio.memory``): glibc keeps freed memory otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tether.hostio.memory import release_free_memory
from tether.model.errors import RpcCode, TetherError
from tether.model.states import IllegalTransition
from tether.rpc.framing import CHUNK, MAX_LINE, Budget, LineReader, LineTooLong

log = logging.getLogger("tether.rpc")

_enc = msgspec.json.Encoder()
json_decode = msgspec.json.decode
MAX_LONG_POLLS_PER_CONNECTION = 16
MAX_BATCH = 1000
MAX_BATCH_REPLY = 8 * 1024 * 1024
#: Levels of arrays and objects a message may nest (a batch counts as one). Deeper
#: ones are refused whole: the decoder, the params' conversion and the store's encoder
#: all recurse, and a recursion limit hit in any of them must not be a crash.
MAX_DEPTH = 128
_ID_TYPES = frozenset({type(None), str, int, float})
#: params that are no params (``[]`` is not: it is refused)
_NONE: tuple[None, dict[str, Any]] = (None, {})
MAX_CONNECTIONS = 1024  # per server (tether.sock and agent.sock each)
HALF_LINE_TIMEOUT = 10.0  # seconds a line may take from its first byte to its newline
NOTIFY_BUFFER = 64 * 1024  # bytes queued for a client above which notifications wait
#: Bytes of unfinished lines all connections of a server may hold together.
MAX_BUFFERED = 32 * 1024 * 1024
#: Freed line buffers past which the server hands the C allocator's free memory back.
TRIM_AFTER = 8 * 1024 * 1024

#: A method's handler: a coroutine function, or a plain function for one that never waits
#: (``daemon.health``): called without making a coroutine, which costs more than it does.
Handler = Callable[[Any, "Connection"], Awaitable[Any]] | Callable[[Any, "Connection"], Any]


@dataclass
class Method:
    name: str
    params: type[Any]
    handler: Handler
    long: bool = False  # waits for an outside event: runs as a task, cancelled on drain
    #: the params are a Struct that ``{}`` converts to: its bare constructor then builds
    #: them (the same value), at a fraction of msgspec.convert's cost per call
    bare: bool = False
    ok: int = 0  # requests its handler answered without error (for ``daemon.metrics``)
    #: the handler is a plain function: its return value is the result
    sync: bool = False

    def __post_init__(self) -> None:
        self.sync = not inspect.iscoroutinefunction(self.handler)
        if isinstance(self.params, type) and issubclass(self.params, msgspec.Struct):
            try:
                msgspec.convert({}, self.params, strict=True)
            except msgspec.ValidationError:
                return
            self.bare = True


class Router:
    def __init__(self) -> None:
        self.methods: dict[str, Method] = {}

    def add(self, name: str, params: type[Any], handler: Handler, *,
            long: bool = False) -> None:
        self.methods[name] = Method(name, params, handler, long)

    def is_long(self, msg: Any) -> bool:
        """Is this decoded request (or batch) a long poll? Only decides scheduling;
        dispatch validates."""
        if isinstance(msg, list):
            return any(self.is_long(m) for m in msg)
        if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
            return False
        method = self.methods.get(msg["method"])
        return method is not None and method.long


@dataclass(frozen=True)
class _Unparsable:
    """A line that is not JSON: answered with a parse error."""

    reply: dict[str, Any]


def _too_deep(raw: bytes, msg: Any) -> bool:
    """Does ``msg`` nest more than MAX_DEPTH levels? Walked only when the line has
    enough brackets to possibly do so (most lines have a handful; a line of at most
    MAX_DEPTH bytes cannot, and is not even counted)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    stack: list[tuple[Any, int]] = [(msg, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        if level >= MAX_DEPTH:
            return True
        stack.extend((v, level + 1) for v in value if isinstance(v, (dict, list)))
    return False


def _decode(raw: bytes) -> Any:
    try:
        msg = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        return _Unparsable(_error(None, RpcCode.PARSE_ERROR, f"parse error: {e}",
                                  {"code": "PARSE_ERROR"}))
    except RecursionError:
        too_deep = True
    else:
        too_deep = len(raw) > MAX_DEPTH and _too_deep(raw, msg)
    if too_deep:
        return _Unparsable(_error(None, RpcCode.PARSE_ERROR,
                                  f"parse error: nested deeper than {MAX_DEPTH} levels of "
                                  "arrays and objects; flatten the message",
                                  {"code": "PARSE_ERROR", "limit": MAX_DEPTH}))
    return msg


@dataclass(eq=False)
class Connection:
    """One client connection. Subsystems may attach per-connection state in ``extra``."""

    writer: asyncio.StreamWriter
    tasks: asyncio.TaskGroup
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    extra: dict[str, Any] = field(default_factory=dict)
    # Tasks that wait on outside events (long polls, subscription pumps): they
    # are cancelled when the client goes away or the daemon drains.
    long_tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    lines: LineReader | None = None
    busy: bool = False  # handling a line (so not idle, whatever its long tasks)
    #: the server's activity tick when its last line arrived (or it connected): the
    #: eviction order, as a clock would give it, for less than a clock read per line
    last_active: int = 0

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing owed to it: safe to evict at the limit."""
        return not self.busy and not self.long_tasks

    def spawn_long(self, coro: Any) -> asyncio.Task[Any]:
        task = self.tasks.create_task(coro)
        self.long_tasks.add(task)
        task.add_done_callback(self.long_tasks.discard)
        return task

    def send(self, message: dict[str, Any]) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(_enc.encode(message) + b"\n")

    async def drain(self) -> None:
        await self.writer.drain()

    def backlogged(self) -> bool:
        return self.writer.transport.get_write_buffer_size() > NOTIFY_BUFFER

    async def writable(self) -> None:
        """Wait until at most ``NOTIFY_BUFFER`` bytes are queued for the client.

        Notifications (event pumps) call this before each write, so a client that
        does not read holds at most that much (plus one message) of daemon memory."""
        while self.backlogged():
            if self.writer.is_closing():
                raise ConnectionResetError("the client went away")
            await self.writer.drain()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})


def _error(rid: Any, code: int, message: str, data: dict[str, Any] | None = None,
           ) -> dict[str, Any]:
    err: dict[str, Any] = {"code": int(code), "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": err}


def _std(code: RpcCode, message: str, **data: Any) -> TetherError:
    return TetherError(code, code.name, message, data)


class RpcServer:
    def __init__(self, router: Router, *, max_line: int = MAX_LINE,
                 translate: Callable[[Exception], TetherError | None] | None = None,
                 max_connections: int = MAX_CONNECTIONS,
                 half_line_timeout: float = HALF_LINE_TIMEOUT,
                 max_buffered: int = MAX_BUFFERED) -> None:
        self.router = router
        # Maps an unexpected exception to a proper error (e.g. DISK_FULL), else None.
        self.translate = translate or (lambda e: None)
        self.max_line = max_line
        self.max_connections = max_connections
        self.half_line_timeout = half_line_timeout
        self.evicted = 0
        self.refused = 0
        self.shed = 0  # connections closed because unfinished lines filled the budget
        self.budget = Budget(max_buffered, self._shed)
        self.trims = 0  # times freed memory was handed back
        self.accepting = True
        self.inflight = 0
        #: created by drain() while requests are in flight; resolved by the last to finish
        self._idle: asyncio.Future[None] | None = None
        self.connections: set[Connection] = set()
        self._ticks = itertools.count()  # orders connections by their last activity
        #: requests answered with an error, by (method, ``data.code``), for
        #: ``daemon.metrics`` (successes: ``Method.ok``); a name the router lacks counts
        #: as "unknown" (clients choose names: no unbounded label set)
        self.errors: Counter[tuple[str, str]] = Counter()

    async def handle_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        if not self._admit():
            self.refused += 1
            with contextlib.suppress(Exception):
                writer.write(_enc.encode(_error(
                    None, RpcCode.CONFLICT,
                    f"the daemon already serves {self.max_connections} connections, all "
                    "busy (its limit); close some clients (subscribers, long polls) and retry",
                    {"code": "TOO_MANY_CONNECTIONS", "limit": self.max_connections})) + b"\n")
                writer.close()
            return
        lines = LineReader(reader, self.max_line, self.budget)
        methods, ticks = self.router.methods, self._ticks
        slots = asyncio.Semaphore(MAX_LONG_POLLS_PER_CONNECTION)
        with contextlib.suppress(Exception):
            writer.transport.set_write_buffer_limits(high=NOTIFY_BUFFER)
        try:
            async with asyncio.TaskGroup() as tasks:
                conn = Connection(writer=writer, tasks=tasks, lines=lines,
                                  last_active=next(ticks))
                self.connections.add(conn)
                read, transport = reader.read, writer.transport
                try:
                    while True:
                        conn.busy = False
                        # lines.next(), inlined for its common case: one frame less
                        item: bytes | LineTooLong | None = (
                            lines.whole(await read(CHUNK)) if lines.fresh else None)
                        if item is None:
                            item = await lines.rest()
                        conn.busy = True
                        conn.last_active = next(ticks)
                        if type(item) is not bytes:
                            if item is None:
                                break
                            conn.send(_error(None, RpcCode.INVALID_REQUEST,
                                             f"message larger than the {self.max_line}-byte "
                                             "limit; it was discarded",
                                             {"code": "REQUEST_TOO_LARGE",
                                              "limit": self.max_line}))
                            continue
                        if not item or item.isspace():  # what strip() removes
                            continue
                        try:  # _decode, inlined for a line that decodes
                            msg = json_decode(item)
                        except Exception:  # the parse error replies, by _decode
                            msg = _decode(item)
                        else:
                            if len(item) > MAX_DEPTH and _too_deep(item, msg):
                                msg = _decode(item)  # its reply for a line nested too deep
                        if type(msg) is dict:  # not a batch: the is_long test, inline
                            name = msg.get("method")
                            method = methods.get(name) if type(name) is str else None
                            long = method is not None and method.long
                        else:
                            method, long = None, self.router.is_long(msg)
                        if long:
                            await slots.acquire()
                            conn.spawn_long(self._handle_line(conn, msg, slots))
                            await conn.drain()
                        elif method is not None:  # _handle_line, inlined: one frame less
                            self.inflight += 1
                            try:
                                # The common case — a "2.0" request with a valid id and
                                # no params for a method whose params are all optional
                                # (daemon.health, listings), while the daemon accepts
                                # work — passes _handle_one's checks: its handler is
                                # awaited here, one frame less.
                                if (msg.get("jsonrpc") == "2.0" and self.accepting
                                        and method.bare and msg.get("params") in _NONE
                                        and type(msg.get("id", conn)) in _ID_TYPES):
                                    reply: dict[str, Any] | None
                                    try:
                                        result = method.handler(method.params(), conn)
                                        if not method.sync:
                                            result = await result
                                        method.ok += 1
                                        reply = {"jsonrpc": "2.0", "id": msg["id"],
                                                 "result": result}
                                    except BaseException as e:
                                        reply = self._failed(e, conn, msg, False)
                                        if reply is not None:
                                            self._count_error(msg, reply)
                                else:
                                    reply = await self._handle_one(conn, msg, method)
                                    if reply is not None and "error" in reply:
                                        self._count_error(msg, reply)
                                if reply is not None and not transport.is_closing():
                                    transport.write(_enc.encode(reply) + b"\n")
                                    if transport.get_write_buffer_size():
                                        await self._drain(conn)
                            finally:
                                self.inflight -= 1
                                if self._idle is not None:
                                    self._done(None, counted=True)
                        else:
                            await self._handle_line(conn, msg, None)  # drains its reply
                finally:
                    conn.closed.set()
                    self.connections.discard(conn)
                    lines.release()
                    for t in list(conn.long_tasks):
                        t.cancel()
        except* (ConnectionError, asyncio.IncompleteReadError):
            pass
        except* Exception:
            log.exception("connection handler failed")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _admit(self) -> bool:
        """Room for one more connection? At the limit, evict the longest-idle one."""
        if len(self.connections) < self.max_connections:
            return True
        idle = [c for c in self.connections if c.idle]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_active)
        self._close(victim, "CONNECTION_EVICTED",
                    f"closed: the daemon reached its limit of {self.max_connections} "
                    "connections and this one was the longest idle; reconnect")
        self.evicted += 1
        return True

    def _close(self, conn: Connection, code: str, message: str) -> None:
        """Tell the client why with one error line, then close its connection."""
        self.connections.discard(conn)
        conn.send(_error(None, RpcCode.CONFLICT if code == "CONNECTION_EVICTED"
                         else RpcCode.INVALID_REQUEST, message, {"code": code}))
        with contextlib.suppress(Exception):
            conn.writer.close()

    def _shed(self) -> None:
        """Unfinished lines passed the budget: close the connections whose lines began
        the longest ago until the rest fit (a client sends a line whole; many that do
        not are a flood)."""
        held = sorted((c for c in self.connections
                       if c.lines is not None and c.lines.partial_since is not None),
                      key=lambda c: c.lines.partial_since or 0.0)  # type: ignore[union-attr]
        for conn in held:
            if self.budget.used <= self.budget.limit:
                break
            assert conn.lines is not None
            conn.lines.release()
            self.shed += 1
            self._close(conn, "TOO_MANY_UNFINISHED_LINES",
                        f"closed: the daemon's clients together sent more than "
                        f"{self.budget.limit} bytes of lines not yet ended (its limit) and "
                        "this line began the longest ago; send each request with its "
                        "newline at once")

    def trim(self) -> bool:
        """Hand freed memory back once enough line buffers were freed since last time."""
        if self.budget.released < TRIM_AFTER:
            return False
        self.budget.released = 0
        self.trims += 1
        return release_free_memory()

    async def sweep_half_lines(self) -> None:
        """Forever: close connections whose current line is unfinished for too long;
        hand back the memory freed line buffers held."""
        every = max(0.05, min(1.0, self.half_line_timeout / 4))
        while True:
            await asyncio.sleep(every)
            self.trim()
            now = time.monotonic()
            for conn in list(self.connections):
                since = conn.lines.partial_since if conn.lines is not None else None
                if (not conn.busy and since is not None
                        and now - since > self.half_line_timeout):
                    self._close(conn, "REQUEST_TIMEOUT",
                                f"a line took more than {self.half_line_timeout:g} s to "
                                "arrive whole; send each request with its newline at once")

    async def _handle_line(self, conn: Connection, msg: Any,
                           slots: asyncio.Semaphore | None) -> None:
        self.inflight += 1
        try:
            reply = await (self._handle_one(conn, msg) if type(msg) is dict
                           else self._handle_message(conn, msg))
            if reply is not None and type(msg) is dict and "error" in reply:
                self._count_error(msg, reply)
            if reply is not None and self._write(conn, reply):
                await self._drain(conn)
        finally:
            self._done(slots)

    @staticmethod
    def _write(conn: Connection, reply: Any) -> bool:
        """Send ``reply``; whether any of it is still queued (then drain)."""
        transport = conn.writer.transport  # what StreamWriter.write calls anyway
        if transport.is_closing():
            return False
        transport.write(_enc.encode(reply) + b"\n")
        return bool(transport.get_write_buffer_size())

    @staticmethod
    async def _drain(conn: Connection) -> None:
        with contextlib.suppress(ConnectionError):
            await conn.writer.drain()

    def _done(self, slots: asyncio.Semaphore | None, counted: bool = False) -> None:
        """A request is answered (and ``counted`` out of ``inflight`` already): its
        long-poll slot back, and drain() told when the last one in flight is."""
        if slots is not None:
            slots.release()
        if not counted:
            self.inflight -= 1
        if self.inflight == 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def _handle_message(self, conn: Connection, msg: Any) -> Any:
        if isinstance(msg, _Unparsable):
            return msg.reply
        if isinstance(msg, list):
            if not msg:
                return _error(None, RpcCode.INVALID_REQUEST, "empty batch",
                              {"code": "INVALID_REQUEST"})
            if len(msg) > MAX_BATCH:
                return _error(None, RpcCode.INVALID_REQUEST,
                              f"batch of {len(msg)} requests exceeds the limit of {MAX_BATCH}",
                              {"code": "INVALID_REQUEST", "limit": MAX_BATCH})
            out: list[dict[str, Any]] = []
            size = 0
            for member in msg:
                reply: dict[str, Any] | None
                if size > MAX_BATCH_REPLY and not (isinstance(member, dict)
                                                   and "id" not in member):
                    reply = _error(member.get("id") if isinstance(member, dict) else None,
                                   RpcCode.INVALID_REQUEST,
                                   f"batch reply exceeded {MAX_BATCH_REPLY} bytes; this member "
                                   "was not run; send fewer requests per batch",
                                   {"code": "BATCH_REPLY_TOO_LARGE"})
                else:
                    reply = await self._handle_one(conn, member)
                    if reply is not None and "error" in reply:
                        self._count_error(member, reply)
                if reply is not None:
                    out.append(reply)
                    size += len(_enc.encode(reply))
            return out or None
        return await self._handle_one(conn, msg)

    def requests(self) -> Counter[tuple[str, str]]:
        """Requests answered, by (method, ``data.code``, "OK" for no error)."""
        out = Counter({(m.name, "OK"): m.ok for m in self.router.methods.values() if m.ok})
        out.update(self.errors)
        return out

    def _count_error(self, msg: Any, reply: dict[str, Any]) -> None:
        name = msg.get("method") if type(msg) is dict else None
        data = reply["error"].get("data")
        code = data.get("code", "ERROR") if type(data) is dict else "ERROR"
        label = name if isinstance(name, str) and name in self.router.methods else "unknown"
        self.errors[(label, str(code))] += 1

    async def _handle_one(self, conn: Connection, msg: Any, found: Method | None = None
                          ) -> dict[str, Any] | None:
        """One request's reply (``None`` for a notification); ``found`` is its method
        when the caller looked it up already."""
        if not isinstance(msg, dict):
            return _error(None, RpcCode.INVALID_REQUEST, "a request must be a JSON object",
                          {"code": "INVALID_REQUEST"})
        rid = msg.get("id")
        version = msg.get("jsonrpc")
        name = msg.get("method")
        # Only a well-formed request without an id is a notification (JSON-RPC 2.0 §4.1);
        # an invalid one is still answered, with id null.
        is_notification = "id" not in msg and version == "2.0" and isinstance(name, str)
        if type(rid) not in _ID_TYPES:  # decoded JSON: exact types (a bool is no number)
            return _error(None, RpcCode.INVALID_REQUEST, "id must be a string, number or null",
                          {"code": "INVALID_REQUEST"})
        try:
            if version != "2.0":
                raise _std(RpcCode.INVALID_REQUEST, 'missing or wrong "jsonrpc": "2.0"')
            if not isinstance(name, str):
                raise _std(RpcCode.INVALID_REQUEST, '"method" must be a string')
            method = found or self.router.methods.get(name)
            if method is None:
                raise TetherError(RpcCode.METHOD_NOT_FOUND, "METHOD_NOT_FOUND",
                                  f"unknown method {name!r}; see docs/PROTOCOL.md for the list",
                                  {"method": name})
            raw_params = msg.get("params")
            if raw_params is None:
                raw_params = {}
            if not isinstance(raw_params, dict):
                raise _std(RpcCode.INVALID_PARAMS, "params must be a JSON object (named params)")
            try:
                params = (method.params() if method.bare and not raw_params
                          else msgspec.convert(raw_params, method.params, strict=True))
            except msgspec.ValidationError as e:
                raise _std(RpcCode.INVALID_PARAMS, f"invalid params for {name}: {e}") from None
            if not self.accepting and name not in ("daemon.health", "daemon.status"):
                raise TetherError(RpcCode.DAEMON_STOPPING, "DAEMON_STOPPING",
                                  "the daemon is stopping; retry in a moment (a new daemon "
                                  "starts on the next command)")
            result = method.handler(params, conn)
            if not method.sync:
                result = await result
            method.ok += 1
        except BaseException as e:
            return self._failed(e, conn, msg, is_notification)
        if is_notification:
            return None
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def _failed(self, e: BaseException, conn: Connection, msg: dict[str, Any],
                is_notification: bool) -> dict[str, Any] | None:
        """The error reply for a request whose handling raised ``e`` (``None`` for a
        notification); re-raises what must end the connection (a cancellation while
        the daemon accepts work or after the client left, an interrupt)."""
        rid = msg.get("id")
        if isinstance(e, asyncio.CancelledError):
            if conn.closed.is_set() or self.accepting:
                raise e
            if is_notification:
                return None
            return _error(rid, RpcCode.DAEMON_STOPPING, "the daemon is stopping; retry",
                          {"code": "DAEMON_STOPPING"})
        if not isinstance(e, Exception):
            raise e
        reply: dict[str, Any]
        if isinstance(e, IllegalTransition):  # lost a race with another state change
            reply = _error(rid, RpcCode.INVALID_STATE,
                           f"{e.kind} {e.ident} is now {e.current} and cannot become "
                           f"{e.wanted}; look at it again and retry",
                           {"code": "INVALID_STATE", "state": e.current})
        elif isinstance(e, TetherError):
            reply = {"jsonrpc": "2.0", "id": rid, "error": e.to_wire()}
        elif (known := self.translate(e)) is not None:  # an outside condition (a full disk)
            log.warning("%s failed: %s", msg.get("method"), known.message)
            reply = {"jsonrpc": "2.0", "id": rid, "error": known.to_wire()}
        else:  # a bug in one handler must not take the daemon down
            log.exception("internal error in %r", msg.get("method"), exc_info=e)
            reply = _error(rid, RpcCode.INTERNAL_ERROR, f"internal error: {e!r}",
                           {"code": "INTERNAL_ERROR"})
        return None if is_notification else reply

    async def drain(self, timeout: float) -> None:
        """Stop accepting work, cancel long polls, wait for the rest to finish."""
        self.accepting = False
        for conn in list(self.connections):
            for t in list(conn.long_tasks):
                t.cancel()
        if self.inflight == 0:
            return
        if self._idle is None or self._idle.done():
            self._idle = asyncio.get_running_loop().create_future()
        await asyncio.wait({self._idle}, timeout=timeout)  # never cancels it: others may wait
