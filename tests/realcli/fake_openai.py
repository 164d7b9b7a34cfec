"""A fake OpenAI API on 127.0.0.1, for the real Codex CLI and the real Aider (the model cannot
run here; everything else in these tests is real).

Written from OpenAI's public API reference:

* **Responses** (``POST /v1/responses``, what Codex uses): with ``"stream": true`` the answer
  is a stream of server-sent events, each ``event: <type>`` and ``data: <json>`` —
  ``response.created``, ``response.output_item.added`` / ``response.output_item.done`` (an
  output item: a ``message`` with ``output_text`` content, or a ``function_call`` with
  ``call_id``, ``name`` and JSON ``arguments``), ``response.output_text.delta`` and finally
  ``response.completed``, whose ``response.usage`` holds ``input_tokens`` (cached ones
  included), ``input_tokens_details.cached_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens`` and ``total_tokens``.
* **Chat Completions** (``POST /v1/chat/completions``, what Aider uses through litellm):
  without streaming one ``chat.completion`` object with ``choices[0].message`` and
  ``usage`` (``prompt_tokens``, cached ones included, ``prompt_tokens_details.cached_tokens``,
  ``completion_tokens``, ``total_tokens``); with ``"stream": true``, ``chat.completion.chunk``
  events (``choices[0].delta``), the usage in a last chunk with no choices when the request
  asked for it (``stream_options.include_usage``), then ``data: [DONE]``.
* ``GET /v1/models`` lists the models (both CLIs may ask).

A test scripts the answers (:meth:`FakeOpenAI.answer`: text or a function call, with the
token counts it reports) and reads back every request and what it served
(:attr:`FakeOpenAI.requests`), so it can assert that tether's counts EQUAL what was served.
Requests that are not the conversation (Codex's task-title side request, say) are answered
by :attr:`FakeOpenAI.side` and recorded with ``side=True``.

The URL the CLIs are given is made in one place, :func:`base_url`: a name of its own
(:data:`HOST`), which the CLI in its sandbox reaches only through tether's egress proxy
when the lineage's policy allows it (:mod:`tests.realcli.net`; :attr:`FakeOpenAI.api`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realcli.net import ADDRESS, Api

#: The host name the CLIs are pointed at (the server itself listens on 127.0.0.1; the
#: daemon's egress proxy resolves the name there: :mod:`tests.realcli.net`).
HOST = "fake-openai.test"
MODEL = "gpt-fake-1"


def base_url(port: int) -> str:
    """The API base URL the CLIs are given (``…/v1``): the one place it is made."""
    return f"http://{HOST}:{port}/v1"


@dataclass(frozen=True)
class Tokens:
    """Token counts as OpenAI reports them: ``input`` includes ``cached``."""

    input: int
    output: int
    cached: int = 0
    reasoning: int = 0


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text, or a function call (``tool`` name and ``arguments``)."""

    text: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    tokens: Tokens = Tokens(100, 10)
    #: Hold the answer back this long (a turn in progress, for kill tests).
    delay: float = 0.0
    #: Answer with this HTTP status and error body instead (429: rate limit).
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: More ``usage`` fields, as OpenAI-compatible servers add them (DeepSeek's
    #: ``prompt_cache_hit_tokens``, Anthropic's ``cache_creation_input_tokens``).
    usage_extra: dict[str, int] = field(default_factory=dict)


@dataclass
class Request:
    """One request the fake received, and what it served."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    reply: Reply | None = None
    side: bool = False
    at: float = 0.0
    #: The whole answer was written (a client killed while it waited got nothing).
    delivered: bool = False

    @property
    def stream(self) -> bool:
        return bool(self.body and self.body.get("stream"))

    def last_user_text(self) -> str:
        """The text of the last user message of the request (either API)."""
        if not self.body:
            return ""
        items = self.body.get("input") or self.body.get("messages") or []
        if isinstance(items, str):
            return items
        for item in reversed(items):
            if not isinstance(item, dict) or item.get("role") != "user":
                continue
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
        return ""


def codex_metadata(req: Request) -> dict[str, Any]:
    """What Codex says of a request in its ``x-codex-turn-metadata`` header (thread,
    turn, ``thread_source``), or {}."""
    try:
        meta = json.loads(req.headers.get("x-codex-turn-metadata") or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def is_codex_side_request(req: Request) -> bool:
    """Codex's requests that are not the conversation's turns: its task-title thread
    (``thread_source: "thread_title"``, seen with codex-cli 0.171.0)."""
    source = codex_metadata(req).get("thread_source")
    return source is not None and source != "user"


class FakeOpenAI:
    """The fake API server; use as a context manager (serves on a thread)."""

    def __init__(self, *, side: Callable[[Request], Reply | None] | None = None) -> None:
        self._script: list[Reply] = []
        self.default = Reply(text="Done.", tokens=Tokens(100, 10))
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._closing = threading.Event()
        self.side = side or (lambda req: Reply(text="Task title", tokens=Tokens(50, 5))
                             if is_codex_side_request(req) else None)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._record(self, None)
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}],
                        "models": []})
                else:
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                req = fake._record(self, body if isinstance(body, dict) else None)
                path = self.path.split("?")[0].rstrip("/")
                if not path.endswith(("/responses", "/chat/completions")):
                    self._json(404, {"error": {"message": f"no {path}", "type": "not_found"}})
                    return
                reply = fake._choose(req)
                if reply.delay:
                    fake._closing.wait(reply.delay)
                if reply.status != 200:
                    self._json(reply.status, reply.error or {"error": {
                        "message": "error", "type": "error"}}, reply.headers)
                    return
                try:
                    if path.endswith("/responses"):
                        self._responses(req, reply)
                    else:
                        self._chat(req, reply)
                except OSError:
                    return  # the client is gone (killed while it waited)
                with fake.lock:
                    req.delivered = True
                    fake.changed.notify_all()

            # ------------------------------------------------------------ replies
            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None,
                      ) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _sse_start(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def _event(self, kind: str | None, data: Any) -> None:
                head = f"event: {kind}\n" if kind else ""
                text = data if isinstance(data, str) else json.dumps(data)
                self.wfile.write(f"{head}data: {text}\n\n".encode())
                self.wfile.flush()

            def _responses(self, req: Request, reply: Reply) -> None:
                n = len(fake.requests)
                rid = f"resp_{n}"
                t = reply.tokens
                usage = {"input_tokens": t.input,
                         "input_tokens_details": {"cached_tokens": t.cached},
                         "output_tokens": t.output,
                         "output_tokens_details": {"reasoning_tokens": t.reasoning},
                         "total_tokens": t.input + t.output}
                if reply.tool is not None:
                    item: dict[str, Any] = {
                        "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                        "name": reply.tool, "arguments": json.dumps(reply.arguments or {}),
                        "status": "completed"}
                else:
                    item = {"type": "message", "id": f"msg_{n}", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": reply.text or "",
                                         "annotations": []}]}
                response = {"id": rid, "object": "response", "created_at": int(time.time()),
                            "model": (req.body or {}).get("model", MODEL),
                            "status": "in_progress", "output": []}
                if not req.stream:
                    self._json(200, {**response, "status": "completed", "output": [item],
                                     "usage": usage})
                    return
                self._sse_start()
                self._event("response.created", {"type": "response.created",
                                                 "response": response})
                added = {**item, "status": "in_progress"}
                if reply.tool is None:
                    added["content"] = []
                self._event("response.output_item.added", {
                    "type": "response.output_item.added", "output_index": 0, "item": added})
                if reply.tool is None:
                    self._event("response.output_text.delta", {
                        "type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": 0, "content_index": 0, "delta": reply.text or ""})
                self._event("response.output_item.done", {
                    "type": "response.output_item.done", "output_index": 0, "item": item})
                self._event("response.completed", {
                    "type": "response.completed",
                    "response": {**response, "status": "completed", "output": [item],
                                 "usage": usage}})

            def _chat(self, req: Request, reply: Reply) -> None:
                n = len(fake.requests)
                cid = f"chatcmpl-{n}"
                t = reply.tokens
                usage = {"prompt_tokens": t.input, "completion_tokens": t.output,
                         "total_tokens": t.input + t.output,
                         "prompt_tokens_details": {"cached_tokens": t.cached},
                         "completion_tokens_details": {"reasoning_tokens": t.reasoning},
                         **reply.usage_extra}
                model = (req.body or {}).get("model", MODEL)
                message: dict[str, Any] = {"role": "assistant", "content": reply.text}
                finish = "stop"
                if reply.tool is not None:
                    message = {"role": "assistant", "content": None, "tool_calls": [{
                        "id": f"call_{n}", "type": "function", "function": {
                            "name": reply.tool, "arguments": json.dumps(reply.arguments or {})}}]}
                    finish = "tool_calls"
                base = {"id": cid, "created": int(time.time()), "model": model}
                if not req.stream:
                    self._json(200, {**base, "object": "chat.completion", "choices": [
                        {"index": 0, "message": message, "finish_reason": finish}],
                        "usage": usage})
                    return
                self._sse_start()
                chunk = {**base, "object": "chat.completion.chunk"}
                delta: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
                if reply.tool is not None:
                    delta = {"role": "assistant", "tool_calls": [
                        {"index": 0, **message["tool_calls"][0]}]}
                self._event(None, {**chunk, "choices": [
                    {"index": 0, "delta": delta, "finish_reason": None}]})
                self._event(None, {**chunk, "choices": [
                    {"index": 0, "delta": {}, "finish_reason": finish}]})
                options = (req.body or {}).get("stream_options") or {}
                if options.get("include_usage"):
                    self._event(None, {**chunk, "choices": [], "usage": usage})
                self._event(None, "[DONE]")

        self._server = ThreadingHTTPServer((ADDRESS, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ---------------------------------------------------------------- the test's side
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return base_url(self.port)

    @property
    def api(self) -> Api:
        """Its name and port, as a lineage's policy allows it."""
        return Api(HOST, self.port)

    def answer(self, *replies: Reply) -> None:
        """Queue the conversation's next answers, in order (then :attr:`default`)."""
        with self.lock:
            self._script.extend(replies)

    def forget_script(self) -> None:
        """Drop the answers queued and not asked for yet."""
        with self.lock:
            self._script.clear()

    def turns(self) -> list[Request]:
        """The conversation's requests (not the side ones, not ``GET``s), in order."""
        with self.lock:
            return [r for r in self.requests if r.reply is not None and not r.side]

    def served(self) -> Tokens:
        """The sum of the token counts the conversation was served (answers delivered
        whole: not one its client was killed waiting for)."""
        rs = [r.reply for r in self.turns() if r.reply is not None and r.delivered]
        return Tokens(sum(r.tokens.input for r in rs), sum(r.tokens.output for r in rs),
                      sum(r.tokens.cached for r in rs), sum(r.tokens.reasoning for r in rs))

    def wait_turns(self, n: int, timeout: float = 60.0) -> list[Request]:
        """Wait until the conversation has made ``n`` requests."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                got = [r for r in self.requests if r.reply is not None and not r.side]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"the fake API got {len(got)} conversation requests, not {n}: "
                        f"{[(r.method, r.path, r.last_user_text()[:60]) for r in self.requests]}")
                self.changed.wait(left)

    # ---------------------------------------------------------------- the server's side
    def _record(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> Request:
        req = Request(method=handler.command, path=handler.path,
                      headers={k.lower(): v for k, v in handler.headers.items()}, body=body,
                      at=time.time())
        with self.lock:
            self.requests.append(req)
            self.changed.notify_all()
        return req

    def _choose(self, req: Request) -> Reply:
        side = self.side(req)
        with self.lock:
            if side is not None:
                req.reply, req.side = side, True
            else:
                req.reply = self._script.pop(0) if self._script else self.default
            self.changed.notify_all()
            return req.reply

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def log(self) -> str:
        """Every request, one line each (for a failing test's message)."""
        with self.lock:
            return "\n".join(
                f"{r.method} {r.path} side={r.side} stream={r.stream} delivered={r.delivered} "
                f"user={r.last_user_text()[-80:]!r} tokens={r.reply.tokens if r.reply else None}"
                for r in self.requests)
