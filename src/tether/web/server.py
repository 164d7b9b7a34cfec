"""The HTTP server under the dashboard: uvicorn, with the bounds it lacks.

uvicorn waits for a request's headers as long as the client likes: 1,500 connections
that each sent half a request line were all held open, indefinitely (a slowloris).
:class:`BoundedH11` is uvicorn's h11 protocol plus

* a **header deadline**: a request's line, headers and body must arrive within
  :data:`HEADER_TIMEOUT` seconds of the connection opening or of the previous response
  ending, or the connection is closed (a response being streamed — an event stream, a
  log followed — and a WebSocket are not affected);
* a **connection cap**: at most :data:`MAX_CONNECTIONS` open; past it the oldest
  connection that has not sent a whole request (half-sent, or idle between requests) is
  closed to make room, so the dashboard keeps answering while someone holds sockets.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0
MAX_CONNECTIONS = 512
#: A request's body (the page sends small JSON actions) is bounded too.
MAX_INCOMPLETE_EVENT = 64 * 1024


class BoundedH11(H11Protocol):
    _deadline: asyncio.TimerHandle | None = None
    _armed_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > MAX_CONNECTIONS:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets a deadline of its own

    def _arm(self) -> None:
        self._disarm()
        self._armed_at = self.loop.time()
        self._deadline = self.loop.call_later(HEADER_TIMEOUT, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _waiting_for_request(self) -> bool:
        """Connected, not upgraded, and no whole request received since the deadline
        was armed: the request line, headers or body are still to come (or nothing is)."""
        return (not self.transport.is_closing()
                and self.transport.get_protocol() is self
                and self.conn.their_state in (h11.IDLE, h11.SEND_BODY))

    def _expire(self) -> None:
        self._deadline = None
        if self._waiting_for_request():
            self.transport.close()

    def _make_room(self) -> None:
        waiting = [c for c in self.connections
                   if isinstance(c, BoundedH11) and c is not self and c._waiting_for_request()]
        if not waiting:
            self.transport.close()  # every slot serves a request: refuse the new one
            return
        oldest = min(waiting, key=lambda c: c._armed_at)
        oldest.transport.close()


def config(app: Any) -> uvicorn.Config:
    return uvicorn.Config(app, log_level="warning", lifespan="on", http=BoundedH11,
                          ws="websockets-sansio", proxy_headers=False, access_log=False,
                          h11_max_incomplete_event_size=MAX_INCOMPLETE_EVENT,
                          timeout_keep_alive=5)


def serve(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` (bound and listening) until interrupted."""
    uvicorn.Server(config(app)).run(sockets=[sock])
