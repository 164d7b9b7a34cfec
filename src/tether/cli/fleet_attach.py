"""``tether --fleet URL attach WORK``: this terminal attached to a session on another
host, through that host's API (a WebSocket its daemon bridges to the exec's monitor,
the messages of ``tether web``'s terminal). Raw mode, the detach keys and window sizes
as a local attach; the bytes cross the network, so it is slower than a local attach,
which hands the terminal to the monitor itself."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlencode

from tether.cli.terminal import DetachMatcher, exit_code, raw_terminal, terminal_size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def attach(api: str, token: str, query: dict[str, str], *, what: str, again: str,
           keys: bytes, read_only: bool, gone: str | None = None,
           grant: str | None = None) -> int:
    """Attach until detached, ended or disconnected; the CLI's exit code. ``what``
    names the session in messages, ``again`` is the command that re-attaches. ``gone``:
    the host has no live lease (it may still answer, partitioned from PostgreSQL):
    connect with a short timeout, and say this line (exit 1) when nothing answers.
    ``grant``: to type, the nonce of the ``attach.grant`` the caller journaled."""
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
    from websockets.sync.client import connect

    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    rows, cols = terminal_size(in_fd) or (24, 80)
    url = ("ws" + api.removeprefix("http") + "/v1/attach?" +
           urlencode({**query, "rows": rows, "cols": cols, "ro": int(read_only)}))
    headers = {"Authorization": f"Bearer {token}"}
    if grant is not None:  # the nonce of the attach.grant we journaled (to type)
        headers["X-Tether-Attach-Grant"] = grant
    try:
        ws = connect(url, additional_headers=headers,
                     open_timeout=10 if gone is None else 2, max_size=None)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as e:
        if gone is not None and isinstance(e, ConnectionError | TimeoutError):
            sys.stderr.write(f"tether: {gone}\n")
            return 1
        sys.stderr.write(f"tether: cannot reach {what}'s host API at {api}: {e}\n")
        return 125
    ended: dict[str, Any] = {}
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def pump() -> None:
        """The host's side: terminal bytes to stdout, until exit, error or close."""
        try:
            for msg in ws:
                if isinstance(msg, bytes):
                    _write_all(out_fd, msg)
                    continue
                ctl = json.loads(msg)
                if "error" in ctl or "exit" in ctl:
                    ended.update(ctl)
                    return
        except (ConnectionClosed, OSError):
            pass
        finally:
            ended.setdefault("closed", True)
            with contextlib.suppress(OSError):
                os.write(wake_w, b"x")

    winch = threading.Event()

    def on_winch(signum: int, frame: Any) -> None:
        winch.set()
        with contextlib.suppress(OSError):
            os.write(wake_w, b"w")

    old_winch = signal.signal(signal.SIGWINCH, on_winch)
    reader = threading.Thread(target=pump, name="fleet-attach", daemon=True)
    matcher = DetachMatcher(keys)
    poller = select.poll()
    for fd in (in_fd, wake_r):
        poller.register(fd, select.POLLIN)
    try:
        with raw_terminal(in_fd):
            reader.start()
            while "closed" not in ended and "detached" not in ended:
                ready = {fd for fd, _ in poller.poll()}
                if wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
                    if winch.is_set() and (size := terminal_size(in_fd)):
                        winch.clear()
                        ws.send(json.dumps({"resize": list(size)}))
                if in_fd in ready:
                    data = os.read(in_fd, 65536)
                    if not data:
                        poller.unregister(in_fd)
                        continue
                    send, detached = matcher.feed(data)
                    if send and not read_only:
                        ws.send(send)
                    if detached:
                        ws.send(json.dumps({"detach": True}))
                        ended["detached"] = True
    except (ConnectionClosed, OSError):
        ended.setdefault("closed", True)
    finally:
        signal.signal(signal.SIGWINCH, old_winch)
        with contextlib.suppress(Exception):
            ws.close()
        reader.join(2.0)
        os.close(wake_r)
        os.close(wake_w)
    return _report(ended, what, again)


def _report(ended: dict[str, Any], what: str, again: str) -> int:
    if ended.get("detached"):
        sys.stderr.write(f"\r\ndetached from {what}; re-attach with `{again}`\n")
        return 0
    if "error" in ended:
        sys.stderr.write(f"\r\ntether: {what}: {ended['error']}\n")
        return 1
    if "exit" in ended:
        x = ended["exit"]
        code = exit_code(x.get("state", "FINISHED"), x.get("exit_code"), x.get("signal"))
        how = (f"killed by signal {x['signal']}" if x.get("signal")
               else f"exited with code {x.get('exit_code')}")
        sys.stderr.write(f"\r\n[{what} {how}]\n")
        return code
    sys.stderr.write(f"\r\ntether: lost the connection to {what}'s host; see "
                     "`tether --fleet URL ps -a` for what happened\n")
    return 1
