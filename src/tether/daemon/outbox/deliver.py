"""One try of one delivery: an HTTP POST (``httpx``) or a command with the body on stdin.

Headers of a POST (docs/PROTOCOL.md, "Webhooks"): ``Tether-Delivery`` and
``Idempotency-Key`` (the same key, ``<gseq>-<hook>``, at every try), ``Tether-Event``
(the event's type) and, when the hook has a secret, ``X-Tether-Signature-256:
t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<key>.<body>">`` — as Stripe signs: the
timestamp lets a receiver refuse an old delivery replayed, and the key is signed so a
replay cannot pass as a new delivery under another one. Each try is signed anew.
A 2xx answer delivers; anything else, a timeout or a refused connection is a failed
try. A command delivers by exiting 0 within :data:`EXEC_TIMEOUT`. An error kept from a
try never shows the URL's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import signal
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tether import __version__
from tether.model.hooks import HookRecord
from tether.model.secrets import HIDDEN, redact_url

if TYPE_CHECKING:
    import httpx

#: Seconds for a whole HTTP try (connect: 5 s of it) and for a command hook to exit.
HTTP_TIMEOUT = 10.0
EXEC_TIMEOUT = 30.0
#: The most of a command hook's stderr kept as the try's error.
ERROR_TAIL = 300


class DeliveryFailed(Exception):
    """A try that did not deliver; the message is kept as the delivery's last error."""


def signature(secret: bytes, key: str, body: bytes, at: int) -> str:
    """``t=<at>,v1=<hex HMAC-SHA256 of "<at>.<key>.<body>">``."""
    signed = f"{at}.{key}.".encode() + body
    return f"t={at},v1=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()


def headers(hook: HookRecord, key: str, event_type: str, body: bytes,
            secret: bytes | None, at: int | None = None) -> dict[str, str]:
    h = {"Content-Type": "application/json", "User-Agent": f"tether/{__version__}",
         "Tether-Delivery": key, "Idempotency-Key": key, "Tether-Event": event_type,
         "Tether-Hook": hook.name}
    if secret is not None:  # the real time of this try (not a test clock's): receivers
        h["X-Tether-Signature-256"] = signature(  # compare it with theirs
            secret, key, body, int(time.time()) if at is None else at)
    return h


def scrub(text: str, url: str) -> str:
    """``text`` (an error about ``url``) without the URL's credentials."""
    text = text.replace(url, redact_url(url))
    userinfo = urlsplit(url).netloc.rpartition("@")[0] if "@" in url else ""
    for secret in {userinfo, userinfo.partition(":")[2]} - {""}:
        text = text.replace(secret, HIDDEN)
    return text


class Sender:
    """Makes tries; owns the HTTP client (one connection pool, opened on first use so
    that a daemon without URL hooks never imports ``httpx``)."""

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def send(self, hook: HookRecord, key: str, event_type: str, body: bytes,
                   secret: bytes | None) -> None:
        if hook.url is not None:
            await self._post(hook, key, event_type, body, secret)
        elif hook.exec is not None:
            await self._run(hook, key, event_type, body)
        else:
            raise DeliveryFailed("the hook has neither a url nor a command")

    async def _post(self, hook: HookRecord, key: str, event_type: str, body: bytes,
                    secret: bytes | None) -> None:
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(HTTP_TIMEOUT, connect=5.0), follow_redirects=False,
                trust_env=False)
        assert hook.url is not None
        try:
            r = await self._http.post(hook.url, content=body,
                                      headers=headers(hook, key, event_type, body, secret))
        except httpx.HTTPError as e:
            raise DeliveryFailed(scrub(f"{type(e).__name__}: {e}", hook.url)[:ERROR_TAIL]
                                 or "HTTP error") from None
        if not 200 <= r.status_code < 300:
            raise DeliveryFailed(f"HTTP {r.status_code} from {redact_url(hook.url)}")

    async def _run(self, hook: HookRecord, key: str, event_type: str, body: bytes) -> None:
        assert hook.exec is not None
        env = {**os.environ, "TETHER_HOOK": hook.name, "TETHER_DELIVERY": key,
               "TETHER_EVENT": event_type}
        try:
            proc = await asyncio.create_subprocess_exec(
                *hook.exec, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, cwd=hook.cwd or "/", env=env,
                start_new_session=True)  # its own group: a timeout kills all of it
        except OSError as e:
            raise DeliveryFailed(f"cannot run {hook.exec[0]!r}: {e.strerror or e}") from None
        try:
            err = await asyncio.wait_for(_talk(proc, body), EXEC_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise DeliveryFailed(f"the command did not exit within {EXEC_TIMEOUT:g} s; "
                                 "killed") from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-ERROR_TAIL:]
            raise DeliveryFailed(f"the command exited {proc.returncode}"
                                 + (f": {tail}" if tail else ""))


async def _talk(proc: asyncio.subprocess.Process, body: bytes) -> bytes:
    """Feed ``body`` on stdin, collect stderr, wait for the exit: ``communicate``, except
    that a command may close stdin or exit unread (``false``). Its pipe is then closed (under
    uvloop a write raises RuntimeError, not BrokenPipeError), and the command's exit status,
    not the pipe, is the delivery's answer."""
    assert proc.stdin is not None and proc.stderr is not None
    _, err, _ = await asyncio.gather(_feed(proc.stdin, body), proc.stderr.read(), proc.wait())
    return err


async def _feed(stdin: asyncio.StreamWriter, body: bytes) -> None:
    try:
        if not stdin.is_closing():
            stdin.write(body)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # it stopped reading: its exit status says how it went
    finally:
        stdin.close()
