"""The transport-independent half of both clients: JSON-RPC framing, reply and error
decoding, the subscription cursor, and when to retry.

``Client`` (blocking) and ``AsyncClient`` only move bytes and sleep; every decision
about what a line means, or whether to try again, is made here once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from tether.client.daemonctl import Autostart
from tether.client.errors import CONNECTION_ERRORS, DaemonUnavailable, TetherError
from tether.model.errors import RpcCode
from tether.model.records import Event

T = TypeVar("T")

MAX_REPLY = 64 * 1024 * 1024  # bytes in one reply line
SUBSCRIBE_ID = 0  # the request id of a connection's events.subscribe


class Request(Generic[T]):
    """One method call: its params, and how to decode its result.

    The result is decoded into ``reply``; ``pick`` then unwraps it (``exec.list``'s
    ``{"execs": [...]}`` becomes the list).
    """

    __slots__ = ("method", "params", "pick", "reply")

    def __init__(self, method: str, params: dict[str, Any], reply: Any,
                 pick: Callable[[Any], T] | None = None) -> None:
        self.method = method
        self.params = {k: v for k, v in params.items() if v is not None}
        self.reply = reply
        self.pick = pick

    def decode(self, result: msgspec.Raw) -> T:
        value = msgspec.json.decode(result, type=self.reply)
        return self.pick(value) if self.pick is not None else value


class Blocking:
    """A client whose methods return their result."""

    def _invoke(self, req: Request[T]) -> T:
        raise NotImplementedError


class Awaiting:
    """A client whose methods return an awaitable of their result."""

    def _invoke(self, req: Request[T]) -> Awaitable[T]:
        raise NotImplementedError


class Message(msgspec.Struct):
    """Any line from the daemon: a reply (``id``) or a notification (``method``)."""

    id: int | str | None = None
    result: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    error: dict[str, Any] | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Message)


def encode(rid: int, method: str, params: dict[str, Any]) -> bytes:
    return _enc.encode({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + b"\n"


def decode(line: bytes) -> Message:
    """Raises ``msgspec.DecodeError`` (a ``ValueError``) on a line that is no message."""
    return _dec.decode(line)


def error(msg: Message) -> TetherError | None:
    """A reply's error, if it is one."""
    return TetherError.from_wire(msg.error) if msg.error is not None else None


def connection_error(msg: Message) -> TetherError | None:
    """The daemon's last word on this connection (refused, evicted), if ``msg`` is one."""
    if msg.id is not None or msg.method is not None or msg.error is None:
        return None
    err = TetherError.from_wire(msg.error)
    return err if err.code in CONNECTION_ERRORS else None


class Retry:
    """How long one connect or one call keeps trying, and how long it waits between.

    A connect refused starts a daemon (with ``auto``) and backs off 20 ms doubling to
    0.5 s; a call whose connection was lost, or that a stopping daemon refused, is
    sent again; past ``budget`` seconds the client gives up with ``DaemonUnavailable``.
    """

    def __init__(self, socket: Path, auto: Autostart | None, budget: float) -> None:
        self.socket = socket
        self.auto = auto
        self.deadline = time.monotonic() + budget
        self.delay = 0.02
        # A full daemon's refusal, if one came: what to report when the budget runs out
        # on a connection that then broke before its answer could be read.
        self.full: TetherError | None = None

    def refused(self, err: OSError) -> float:
        """A connect failed: the seconds to wait before the next, or raise."""
        if self.auto is not None:
            if isinstance(err, (FileNotFoundError, ConnectionRefusedError)):
                self.auto.refused()
            self.auto.check()
        if time.monotonic() >= self.deadline:
            if self.full is not None:
                raise self.full
            hint = "start one with `tether daemon`" if self.auto is None else self.auto.why()
            raise DaemonUnavailable(f"no tether daemon answers on {self.socket}; {hint}")
        delay, self.delay = self.delay, min(self.delay * 2, 0.5)
        return delay

    def lost(self, method: str) -> float:
        """The connection broke during ``method``: the seconds to wait, or raise."""
        if self.auto is not None:
            self.auto.forget()
        if time.monotonic() >= self.deadline:
            if self.full is not None:
                raise self.full from None
            raise DaemonUnavailable(f"lost the daemon at {self.socket} while calling "
                                    f"{method}") from None
        return 0.05

    def refusal(self, err: TetherError) -> float:
        """The daemon answered ``err``: retry a stopping daemon's refusal, a full
        daemon's (backing off) and an eviction; raise the rest."""
        if time.monotonic() < self.deadline:
            if err.rpc_code == RpcCode.DAEMON_STOPPING or err.code == "CONNECTION_EVICTED":
                return 0.1
            if err.code == "TOO_MANY_CONNECTIONS":
                self.full = err
                delay, self.delay = self.delay, min(self.delay * 2, 0.5)
                return delay
            if err.code == "RATE_LIMITED":  # an agent's burst: wait as told, then resend
                wait = err.data.get("retry_after")
                return min(1.0, max(0.01, wait if isinstance(wait, (int, float)) else 0.1))
        raise err


class Resubscribe(Exception):
    """The daemon dropped the subscription (its queue overflowed): subscribe again."""


class _EventParams(msgspec.Struct):
    event: Event


_event_params = msgspec.json.Decoder(_EventParams)


class _Subscribed(msgspec.Struct):
    epoch: str | None = None


_subscribed = msgspec.json.Decoder(_Subscribed)


class Cursor:
    """One ``subscribe()``: where it is, and which notifications move it.

    The cursor is the global ``gseq``, or the sandbox's ``seq`` with ``sandbox``; an
    event at or before it was yielded already (a resubscription replays from it). It
    holds within one journal ``epoch`` (learnt from the first reply if not given): a
    resubscription to a reset journal fails with ``EPOCH_CHANGED`` rather than skip.
    """

    def __init__(self, since: int, sandbox: str | None, epoch: str | None = None) -> None:
        self.at = since
        self.sandbox = sandbox
        self.epoch = epoch

    def request(self) -> bytes:
        params: dict[str, Any] = {"since": self.at}
        if self.sandbox:
            params["sandbox"] = self.sandbox
        if self.epoch:
            params["epoch"] = self.epoch
        return encode(SUBSCRIBE_ID, "events.subscribe", params)

    def feed(self, line: bytes) -> Event | None:
        """The event to yield for ``line``, if any; raises ``Resubscribe`` on overflow."""
        msg = decode(line)
        if msg.id == SUBSCRIBE_ID and msg.error is not None:
            raise TetherError.from_wire(msg.error)
        if msg.id == SUBSCRIBE_ID and self.epoch is None:
            self.epoch = _subscribed.decode(msg.result).epoch
        if msg.method == "events.overflow":
            raise Resubscribe
        if msg.method != "events.event":
            return None
        ev = _event_params.decode(msg.params).event
        pos = ev.seq if self.sandbox else ev.gseq
        if pos <= self.at:
            return None
        self.at = pos
        return ev
