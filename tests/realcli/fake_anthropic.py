"""A fake Anthropic Messages API for the real Claude Code (the model cannot run here).

Written from Anthropic's public API documentation, not from Claude Code:

* "Messages" (https://docs.anthropic.com/en/api/messages): ``POST /v1/messages`` with
  ``model``, ``messages``, ``tools``, ``stream``; the response ``message`` object (``id``,
  ``type: "message"``, ``role``, ``model``, ``content`` blocks ``text`` and ``tool_use``
  with ``id``/``name``/``input``, ``stop_reason`` ``end_turn``/``tool_use``, ``usage``).
* "Streaming messages" (https://docs.anthropic.com/en/api/messages-streaming): the SSE
  events ``message_start`` (the message with empty content and its ``usage``),
  ``content_block_start``/``content_block_delta`` (``text_delta``, ``input_json_delta``
  with ``partial_json``)/``content_block_stop``, ``message_delta`` (``stop_reason`` and the
  cumulative ``usage.output_tokens``), ``message_stop``, and ``ping``.
* "Prompt caching": ``usage.cache_creation_input_tokens`` and
  ``usage.cache_read_input_tokens`` beside ``input_tokens``.
* "Errors" and "Rate limits" (https://docs.anthropic.com/en/api/errors,
  https://docs.anthropic.com/en/api/rate-limits): ``429`` with the body
  ``{"type": "error", "error": {"type": "rate_limit_error", "message": …}}``, the
  ``retry-after`` header (seconds) and the ``anthropic-ratelimit-*`` headers
  (``…-requests-limit``/``-remaining``/``-reset`` as RFC 3339 times); subscription plans
  answer with the ``anthropic-ratelimit-unified-*`` headers (``-status: rejected``,
  ``-reset`` in epoch seconds, ``-representative-claim`` naming the window, e.g.
  ``five_hour``), which Claude Code turns into "You've hit your session limit · resets …".
* "Count tokens" (``POST /v1/messages/count_tokens`` → ``{"input_tokens": N}``) and
  "Models" (``GET /v1/models``), which a client may call besides.

A test scripts the answers per prompt (:meth:`FakeAnthropic.answer`): the n-th request of a
turn (n = the assistant messages already after that turn's prompt in the request) gets the
n-th :class:`Reply`, so a retried or resumed request gets the same answer. Every answered
request is recorded (:attr:`FakeAnthropic.served`) with the token counts it reported, so a
test can compare what tether counted with what the server served, exactly.

The CLI reaches the server by a name of its own (:data:`HOST`), which the CLI in its
sandbox reaches only through tether's egress proxy when the lineage's policy allows it
(:mod:`tests.realcli.net`; :attr:`FakeAnthropic.api`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realcli.net import ADDRESS, Api

#: The host name the CLI is given in its base URL (the server itself listens on
#: 127.0.0.1; the daemon's egress proxy resolves the name there: :mod:`tests.realcli.net`).
HOST = "fake-anthropic.test"
#: How long a held request waits for :meth:`FakeAnthropic.release` at most.
HOLD_LIMIT = 120.0


@dataclass(frozen=True)
class Usage:
    """Token counts one response reports (the Messages API ``usage`` object)."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output,
                     self.cache_creation + other.cache_creation,
                     self.cache_read + other.cache_read)

    def as_tether(self) -> dict[str, int]:
        """The same counts under tether's names (``lineage.usage``)."""
        return {"input_tokens": self.input, "output_tokens": self.output,
                "cache_creation_tokens": self.cache_creation,
                "cache_read_tokens": self.cache_read}


@dataclass
class Reply:
    """One scripted answer: text, or a tool call (``tool`` name and ``tool_input``), with
    the usage it reports; or an error (``status`` 429 …) with its headers."""

    text: str = "Done."
    tool: str | None = None
    tool_input: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=lambda: Usage(input=100, output=10))
    status: int = 200
    error_type: str = "rate_limit_error"
    error_message: str = "Number of request tokens has exceeded your rate limit."
    headers: dict[str, str] = field(default_factory=dict)
    #: Wait (at most :data:`HOLD_LIMIT` s) for :meth:`FakeAnthropic.release` before
    #: answering: a request in flight, for a test that kills something mid-turn.
    hold: bool = False


@dataclass
class Served:
    """One request the server answered."""

    path: str
    prompt: str | None  # the turn's prompt (the last user text before the answer)
    position: int  # assistant messages after that prompt in the request
    stream: bool
    model: str | None
    status: int
    usage: Usage | None  # what the answer reported (None for an error)
    main: bool  # a conversation request (it offers tools), not a side request
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    time: float = 0.0
    session: str | None = None  # the client's session header (X-Claude-Code-Session-Id)


def rate_limited(*, reset_in: float = 3600.0, retry_after: float | None = None,
                 subscriber: bool = False) -> Reply:
    """A 429 as the API sends it: to an API key with the ``anthropic-ratelimit-*`` and
    ``retry-after`` headers; to a subscription (``subscriber``) with the unified headers
    whose window (``five_hour``) Claude Code calls a "session limit"."""
    reset = time.time() + reset_in
    stamp = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {"retry-after": str(int(retry_after if retry_after is not None else reset_in)),
               "anthropic-ratelimit-requests-limit": "50",
               "anthropic-ratelimit-requests-remaining": "0",
               "anthropic-ratelimit-requests-reset": stamp,
               "anthropic-ratelimit-tokens-limit": "40000",
               "anthropic-ratelimit-tokens-remaining": "0",
               "anthropic-ratelimit-tokens-reset": stamp}
    if subscriber:
        headers.update({"anthropic-ratelimit-unified-status": "rejected",
                        "anthropic-ratelimit-unified-reset": str(int(reset)),
                        "anthropic-ratelimit-unified-representative-claim": "five_hour",
                        "anthropic-ratelimit-unified-5h-status": "rejected",
                        "anthropic-ratelimit-unified-5h-reset": str(int(reset)),
                        "anthropic-ratelimit-unified-5h-utilization": "1.0"})
    return Reply(status=429, headers=headers,
                 error_message="This request would exceed your rate limit.")


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    texts = [b.get("text", "") for b in content if isinstance(b, dict)
             and b.get("type") == "text" and not str(b.get("text", "")).startswith(
                 "<system-reminder>")]
    return "\n".join(texts) if texts else None


def _turn(messages: list[Any]) -> tuple[str | None, int, list[dict[str, Any]]]:
    """The turn's prompt (the last user message with text that is not only a reminder),
    how many assistant messages follow it, and the tool results after the last one."""
    prompt, position, results = None, 0, []
    for m in messages:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "user":
            text = _text(m.get("content"))
            if text is not None:
                prompt, position, results = text, 0, []
            elif isinstance(m.get("content"), list):
                results = [b for b in m["content"] if isinstance(b, dict)
                           and b.get("type") == "tool_result"]
        elif m.get("role") == "assistant":
            position += 1
    return prompt, position, results


class FakeAnthropic:
    """The server, on 127.0.0.1 and a free port, named :data:`HOST`, in a thread of its
    own."""

    def __init__(self) -> None:
        self.served: list[Served] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.received = 0  # conversation requests received (answered, held or failed)
        self._scripts: list[tuple[str, list[Reply]]] = []
        #: While set, every conversation request is answered with it (a usage limit).
        self.failing: Reply | None = None
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._ids = iter(range(1, 1 << 30))
        self._server = ThreadingHTTPServer((ADDRESS, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ the test's side
    @property
    def base_url(self) -> str:
        """``ANTHROPIC_BASE_URL`` for the CLI."""
        return f"http://{HOST}:{self._server.server_address[1]}"

    @property
    def api(self) -> Api:
        """Its name and port, as a lineage's policy allows it."""
        return Api(HOST, self._server.server_address[1])

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def answer(self, prompt: str, *replies: Reply) -> None:
        """Requests of a turn whose prompt contains ``prompt`` get ``replies`` in order (a
        later call for the same text is tried first); past the last one, ``Done.``."""
        with self._lock:
            self._scripts.insert(0, (prompt, list(replies)))

    def release(self) -> None:
        """Let held requests (``Reply(hold=True)``) answer."""
        self._released.set()

    def main_calls(self, prompt: str | None = None) -> list[Served]:
        """The conversation requests answered with a message (not errors), optionally
        of the turns whose prompt contains ``prompt``."""
        with self._lock:
            return [s for s in self.served if s.main and s.status == 200 and s.usage
                    and (prompt is None or (s.prompt is not None and prompt in s.prompt))]

    def total(self, prompt: str | None = None) -> Usage:
        """The usage of every conversation request answered so far."""
        total = Usage()
        for s in self.main_calls(prompt):
            assert s.usage is not None
            total = total + s.usage
        return total

    def wait_calls(self, n: int, timeout: float = 60.0, *, status: int | None = None,
                   ) -> list[Served]:
        """Wait until ``n`` conversation requests were answered (with ``status``)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                got = [s for s in self.served if s.main
                       and (status is None or s.status == status)]
            if len(got) >= n:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake API answered {len(got)} of {n} requests: "
                                     f"{self.requests[-10:]}")
            time.sleep(0.05)

    def wait_received(self, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` conversation requests arrived (a held one included)."""
        deadline = time.monotonic() + timeout
        while self.received < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake API received {self.received} of {n} "
                                     f"requests: {self.requests[-10:]}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ answering
    def _pick(self, prompt: str | None, position: int) -> Reply:
        with self._lock:
            if self.failing is not None:
                return self.failing
            for key, replies in self._scripts:
                if prompt is not None and key in prompt:
                    return replies[position] if position < len(replies) else Reply()
        return Reply()

    def _record(self, s: Served) -> None:
        with self._lock:
            self.served.append(s)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, code: int, body: Any, headers: dict[str, str] | None = None,
                      ) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_HEAD(self) -> None:
                fake.requests.append(("HEAD", self.path))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path))
                if self.path.split("?")[0] == "/v1/models":
                    self._json(200, {"data": [], "has_more": False, "first_id": None,
                                     "last_id": None})
                else:
                    self._json(404, {"type": "error", "error": {
                        "type": "not_found_error", "message": "Not found"}})

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path))
                n = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 1000})
                    return
                if path != "/v1/messages":
                    self._json(404, {"type": "error", "error": {
                        "type": "not_found_error", "message": f"no {path}"}})
                    return
                self._messages(body)

            def _messages(self, body: dict[str, Any]) -> None:
                messages = body.get("messages") if isinstance(body.get("messages"), list) \
                    else []
                prompt, position, results = _turn(messages)
                main = bool(body.get("tools"))
                if main:
                    with fake._lock:
                        fake.received += 1
                reply = fake._pick(prompt, position) if main else Reply(
                    text="Side answer.", usage=Usage(input=7, output=3))
                stream = bool(body.get("stream"))
                model = body.get("model") if isinstance(body.get("model"), str) else None
                if reply.hold:
                    fake._released.wait(HOLD_LIMIT)
                    if self._client_gone():
                        return  # killed while it waited: nothing was served
                served = Served(path="/v1/messages", prompt=prompt, position=position,
                                stream=stream, model=model, status=reply.status,
                                usage=None, main=main, tool_results=results, time=time.time(),
                                session=self.headers.get("x-claude-code-session-id"))
                if reply.status != 200:
                    fake._record(served)
                    self._json(reply.status, {"type": "error", "error": {
                        "type": reply.error_type, "message": reply.error_message}},
                        reply.headers)
                    return
                served.usage = reply.usage
                message = self._message(reply, model)
                try:
                    if stream:
                        self._stream(message, reply)
                    else:
                        self._json(200, message, reply.headers)
                except OSError:
                    return  # the client went away (killed): not served
                fake._record(served)

            def _client_gone(self) -> bool:
                try:
                    return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                except BlockingIOError:
                    return False
                except OSError:
                    return True

            def _message(self, reply: Reply, model: str | None) -> dict[str, Any]:
                u = reply.usage
                content: list[dict[str, Any]] = []
                if reply.text:
                    content.append({"type": "text", "text": reply.text})
                if reply.tool:
                    content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}",
                                    "name": reply.tool, "input": reply.tool_input})
                return {"id": f"msg_fake{next(fake._ids):06d}", "type": "message",
                        "role": "assistant", "model": model or "claude-fake",
                        "content": content,
                        "stop_reason": "tool_use" if reply.tool else "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": u.input, "output_tokens": u.output,
                                  "cache_creation_input_tokens": u.cache_creation,
                                  "cache_read_input_tokens": u.cache_read}}

            def _stream(self, message: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for event, data in _events(message):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        return Handler


def _events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A message as the streaming API sends it: ``message_start`` carries the input-side
    usage (and one output token), ``message_delta`` the final cumulative output."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": min(1, usage["output_tokens"])}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            text = block["text"]
            for j in range(0, len(text), 16):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta",
                                                        "text": text[j:j + 16]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {**block, "input": {}}}
            raw = json.dumps(block["input"])
            for j in range(0, len(raw), 24):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": raw[j:j + 24]}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"],
                                      "stop_sequence": None},
                            "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}
