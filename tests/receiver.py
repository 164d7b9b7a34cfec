"""A real webhook receiver: ``http.server`` on 127.0.0.1, for tests, the bench and the demo.

It records every POST (headers, body), answers 500 to the first ``fail_first`` ones
(or all while ``failing``), and can hold requests (``hold``) until released, so that a
test can kill the daemon while deliveries are in flight.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def key(self) -> str:
        return self.headers["idempotency-key"]

    def json(self) -> dict[str, Any]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value

    def signed_with(self, secret: bytes, tolerance: float = 300.0) -> bool:
        """``X-Tether-Signature-256: t=…,v1=…`` over ``<t>.<Idempotency-Key>.<body>``,
        with ``t`` within ``tolerance`` seconds of now (docs/PROTOCOL.md, Webhooks)."""
        try:
            fields = dict(p.split("=", 1)
                          for p in self.headers["x-tether-signature-256"].split(","))
            at = int(fields["t"])
        except (KeyError, ValueError):
            return False
        signed = f"{at}.{self.key}.".encode() + self.body
        want = hmac.new(secret, signed, hashlib.sha256).hexdigest()
        return abs(time.time() - at) <= tolerance and hmac.compare_digest(
            fields.get("v1", ""), want)


class Receiver:
    def __init__(self, *, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.failing = False
        self.attempts = 0
        self.received: list[Received] = []  # answered 2xx
        self.held = 0  # requests waiting in hold
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if len(body) < length:  # the sender died mid-body: no request, as for
                    self.close_connection = True  # any server that reads the length
                    return
                with receiver._lock:
                    receiver.held += 1
                receiver._open.wait()
                with receiver._lock:
                    receiver.held -= 1
                    receiver.attempts += 1
                    fail = receiver.failing or receiver.attempts <= receiver.fail_first
                    if not fail:
                        receiver.received.append(Received(
                            {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(500 if fail else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def keys(self) -> list[str]:
        with self._lock:
            return [r.key for r in self.received]
