"""A fake Gemini API on 127.0.0.1, for the real Gemini CLI (tests/realcli/test_gemini.py).

The model cannot run here, so its API is the one thing faked. Written from Google's public
documentation of the Gemini API (https://ai.google.dev/api): ``POST
/v1beta/models/{model}:streamGenerateContent?alt=sse`` answers with server-sent events, each
``data: <GenerateContentResponse JSON>``; ``:generateContent`` with one
``GenerateContentResponse``; ``:countTokens`` with ``{"totalTokens": N}``. A
``GenerateContentResponse`` has ``candidates[].content.parts[]`` (``{"text": …}`` or
``{"functionCall": {"name", "args"}}``), ``finishReason`` and ``usageMetadata``
(``promptTokenCount``, ``candidatesTokenCount``, ``cachedContentTokenCount``,
``thoughtsTokenCount``, ``totalTokenCount``).

A test scripts the answers of the conversation's turns (:meth:`FakeGemini.script`: text or
a function call, each with the token counts it reports) and reads back every request with
what was served (:attr:`FakeGemini.served`), so it can assert that tether recorded exactly
those counts. Requests the CLI makes on its own (its utility ``generateContent`` calls, a
JSON answer wanted) get a small valid answer, with their own counts, also recorded.

The CLI is pointed here by :func:`cli_env` — the one place that says how (the CLI's
documented ``GOOGLE_GEMINI_BASE_URL``, an API key, and a ``HOME`` whose ``~/.gemini`` is
seeded so that it asks nothing at start).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.realcli.net import ADDRESS, Api

#: The model the tests run (``gemini -m``): its context window, in Google's model table
#: (https://ai.google.dev/gemini-api/docs/models), is 1,048,576 tokens.
MODEL = "gemini-2.5-flash"
#: The host name the CLI is pointed at (the server listens on 127.0.0.1; the daemon's
#: egress proxy resolves the name there: :mod:`tests.realcli.net`).
HOST = "fake-gemini.test"
API_KEY = "fake-gemini-key"

#: The Gemini API's answer to a request over the free tier's daily quota (HTTP 429), as
#: documented in https://ai.google.dev/gemini-api/docs/rate-limits and troubleshooting:
#: ``RESOURCE_EXHAUSTED`` with a ``QuotaFailure`` naming a per-day quota.
DAILY_QUOTA_EXHAUSTED = {"error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. "
               "For more information on this error, head to: "
               "https://ai.google.dev/gemini-api/docs/rate-limits.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            "quotaDimensions": {"location": "global", "model": MODEL},
            "quotaValue": "250"}]},
        {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"}]}}

_PATH = re.compile(r"^/(v1beta|v1|v1alpha)/models/([^:/]+):([A-Za-z]+)$")


@dataclass
class Answer:
    """One scripted model answer: text, or a function call (``call`` = (name, args))."""

    text: str | None = None
    call: tuple[str, dict[str, Any]] | None = None
    prompt_tokens: int = 1000
    output_tokens: int = 20
    cached_tokens: int = 0
    thoughts_tokens: int = 0
    #: Answer only once this is set (a turn in progress, for kill tests; at most 120 s).
    hold: threading.Event | None = None
    #: An HTTP error to answer with instead (status, JSON error body).
    error: tuple[int, dict[str, Any]] | None = None

    def usage(self) -> dict[str, int]:
        u = {"promptTokenCount": self.prompt_tokens,
             "candidatesTokenCount": self.output_tokens,
             "totalTokenCount": self.prompt_tokens + self.output_tokens + self.thoughts_tokens}
        if self.cached_tokens:
            u["cachedContentTokenCount"] = self.cached_tokens
        if self.thoughts_tokens:
            u["thoughtsTokenCount"] = self.thoughts_tokens
        return u


@dataclass
class Served:
    """One request and what was answered."""

    method: str  # streamGenerateContent, generateContent, countTokens, ...
    model: str
    body: dict[str, Any]
    usage: dict[str, int] = field(default_factory=dict)  # what was served (once answered)
    scripted: bool = False  # a scripted conversation answer (not a utility call)
    status: int = 200
    answered: bool = False
    host: str = ""  # its Host header: the name (and port) the CLI asked for

    def user_texts(self) -> list[str]:
        """The texts of the request's user turns (what the CLI sent as the prompt)."""
        out: list[str] = []
        for content in self.body.get("contents", []):
            if content.get("role") == "user":
                out += [p["text"] for p in content.get("parts", []) if "text" in p]
        return out


class FakeGemini:
    """The fake API server; ``with FakeGemini() as api:`` serves on a free port."""

    def __init__(self, log: Path | None = None) -> None:
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self.served: list[Served] = []
        self.default = Answer(text="Done.", prompt_tokens=900, output_tokens=7)
        self.log = log
        self._server = ThreadingHTTPServer((ADDRESS, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The API's root as the CLI is given it: by :data:`HOST`, its name."""
        return f"http://{HOST}:{self.port}"

    @property
    def api(self) -> Api:
        """Its name and port, as a lineage's policy allows it."""
        return Api(HOST, self.port)

    # ------------------------------------------------------------------ scripting
    def script(self, *answers: Answer) -> None:
        """Answers for the next conversation requests, in order (then ``default``)."""
        with self._lock:
            self._answers.extend(answers)

    def conversation(self, *, answered: bool = True) -> list[Served]:
        """The conversation's requests (streamed), in order, with what they were served
        (``answered=False``: also those still waiting, or never answered)."""
        with self._lock:
            return [s for s in self.served if s.method == "streamGenerateContent"
                    and (s.answered or not answered)]

    def usage_totals(self, requests: list[Served] | None = None) -> dict[str, int]:
        """Sums of the counts served to ``requests`` (default: every request)."""
        with self._lock:
            rs = list(self.served) if requests is None else requests
        keys = ("promptTokenCount", "candidatesTokenCount", "cachedContentTokenCount",
                "thoughtsTokenCount")
        return {k: sum(r.usage.get(k, 0) for r in rs) for k in keys}

    # ------------------------------------------------------------------ serving
    def _next(self) -> tuple[Answer, bool]:
        with self._lock:
            if self._answers:
                return self._answers.popleft(), True
            return self.default, False

    def _record(self, s: Served) -> None:
        with self._lock:
            self.served.append(s)
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps({"method": s.method, "model": s.model, "usage": s.usage,
                                    "scripted": s.scripted, "status": s.status,
                                    "body": s.body}) + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self, s: Served) -> None:
                s.host = self.headers.get("Host", "")
                fake._record(s)

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    data = json.loads(raw or b"{}")
                except ValueError:
                    data = {"_raw": raw.decode(errors="replace")}
                return data if isinstance(data, dict) else {"_raw": data}

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._record(Served(method="GET " + self.path, model="", body={}, status=404))
                self._json(404, {"error": {"code": 404, "message": "not found",
                                           "status": "NOT_FOUND"}})

            def do_POST(self) -> None:
                body = self._body()
                m = _PATH.match(self.path.partition("?")[0])
                if m is None:
                    self._record(Served(method="POST " + self.path, model="", body=body,
                                        status=404))
                    self._json(404, {"error": {"code": 404, "message": "not found",
                                               "status": "NOT_FOUND"}})
                    return
                model, method = m.group(2), m.group(3)
                if method == "countTokens":
                    n = sum(len(json.dumps(c)) // 4 for c in body.get("contents", []))
                    self._record(Served(method=method, model=model, body=body, answered=True))
                    self._json(200, {"totalTokens": n})
                elif method == "streamGenerateContent":
                    self._stream(model, body)
                elif method == "generateContent":
                    self._generate(model, body)
                else:
                    self._record(Served(method=method, model=model, body=body, status=404))
                    self._json(404, {"error": {"code": 404, "message": f"no {method}",
                                               "status": "NOT_FOUND"}})

            def _stream(self, model: str, body: dict[str, Any]) -> None:
                answer, scripted = fake._next()
                served = Served(method="streamGenerateContent", model=model, body=body,
                                scripted=scripted)
                self._record(served)  # seen now; what it was served once answered
                if answer.hold is not None:
                    answer.hold.wait(120)
                if answer.error is not None:
                    status, err = answer.error
                    served.status, served.answered = status, True
                    self._json(status, err)
                    return
                usage = answer.usage()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for chunk in _chunks(answer, model, usage):
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
                        self.wfile.flush()
                except OSError:  # the CLI is gone (killed): it was served nothing
                    return
                finally:
                    self.close_connection = True
                served.usage, served.answered = usage, True

            def _generate(self, model: str, body: dict[str, Any]) -> None:
                # The CLI's own utility calls (JSON wanted) and plain ones.
                config = body.get("generationConfig") or {}
                if config.get("responseMimeType") == "application/json":
                    text = json.dumps(_json_answer(config.get("responseJsonSchema")
                                                   or config.get("responseSchema") or {}))
                else:
                    text = "Summary."
                usage = {"promptTokenCount": 50, "candidatesTokenCount": 5,
                         "totalTokenCount": 55}
                self._record(Served(method="generateContent", model=model, body=body,
                                    usage=usage, answered=True))
                self._json(200, {"candidates": [{
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage, "modelVersion": model})

        return Handler


def _chunks(answer: Answer, model: str, usage: dict[str, int]) -> list[dict[str, Any]]:
    """The stream of one answer: its text in two chunks (or a function call), then the
    last chunk with ``finishReason`` and ``usageMetadata``, as the API streams them."""
    parts: list[dict[str, Any]]
    if answer.call is not None:
        name, args = answer.call
        parts = [{"functionCall": {"name": name, "args": args}}]
        chunks = [parts]
    else:
        text = answer.text or ""
        half = len(text) // 2
        chunks = [[{"text": text[:half]}], [{"text": text[half:]}]] if half else [[{"text": text}]]
    out: list[dict[str, Any]] = []
    for i, ps in enumerate(chunks):
        cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
        last = i == len(chunks) - 1
        if last:
            cand["finishReason"] = "STOP"
        chunk: dict[str, Any] = {"candidates": [cand], "modelVersion": model}
        if last:
            chunk["usageMetadata"] = usage
        out.append(chunk)
    return out


def _json_answer(schema: dict[str, Any]) -> Any:
    """A small value matching a JSON schema (the CLI's utility calls ask for one)."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][-1]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _json_answer(v) for k, v in props.items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return ""


# ---------------------------------------------------------------------- the CLI's side
def cli_env(base_url: str, home: Path) -> dict[str, str]:
    """The environment that points the real Gemini CLI at ``base_url`` — the one place
    that says how: its documented ``GOOGLE_GEMINI_BASE_URL`` (the API's root; the CLI
    appends ``/v1beta/models/…``), an API key, and ``HOME`` (whose ``~/.gemini``
    :func:`seed_home` prepared). ``base_url`` names the fake by :data:`HOST`: the CLI in
    its sandbox reaches it through tether's egress proxy, when its policy allows it."""
    return {"HOME": str(home), "GEMINI_API_KEY": API_KEY, "GOOGLE_GEMINI_BASE_URL": base_url,
            "TERM": "xterm-256color", "NO_COLOR": "1"}


def seed_home(home: Path, *, trusted: tuple[Path, ...] | list[Path] = (),
              settings: dict[str, Any] | None = None,
              ) -> Path:
    """A ``HOME`` whose ``~/.gemini`` makes the CLI ask nothing at start: API-key auth
    chosen (``security.auth.selectedType``; with a base URL and no choice the CLI takes
    the "gateway" auth type and refuses it: "Invalid auth method selected", exit 41), the
    project folders trusted (``trustedFolders.json``), no update check. Returns ~/.gemini."""
    gdir = home / ".gemini"
    gdir.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (gdir / "settings.json").write_text(json.dumps({**base, **(settings or {})}, indent=2))
    (gdir / "trustedFolders.json").write_text(
        json.dumps({str(p): "TRUST_FOLDER" for p in trusted}, indent=2))
    return gdir
