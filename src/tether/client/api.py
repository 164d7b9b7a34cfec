"""The SDK's method table, written once for both clients.

``_Api[R]`` turns keyword arguments into JSON-RPC params and hands them to
``_call``; the blocking client's ``_call`` returns the result, the asyncio
client's returns an awaitable of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

R = TypeVar("R")


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


class _Api(Generic[R]):
    def _call(self, method: str, params: dict[str, Any]) -> R:
        raise NotImplementedError

    # daemon
    def health(self) -> R:
        return self._call("daemon.health", {})

    def status(self) -> R:
        return self._call("daemon.status", {})

    # sandboxes
    def sandbox_create(self, name: str, *, runtime: str = "process", workspace: str | None = None,
                       env: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                       network: str | None = None, idle_timeout: float | None = None,
                       ttl: float | None = None) -> R:
        return self._call("sandbox.create", _clean({
            "name": name, "runtime": runtime, "workspace": workspace, "env": env,
            "labels": labels, "network": network, "idle_timeout": idle_timeout, "ttl": ttl}))

    def sandbox_get(self, sandbox: str) -> R:
        return self._call("sandbox.get", {"sandbox": sandbox})

    def sandbox_list(self, *, all: bool = False) -> R:
        return self._call("sandbox.list", {"all": all})

    def sandbox_stop(self, sandbox: str, *, grace: float = 5.0) -> R:
        return self._call("sandbox.stop", {"sandbox": sandbox, "grace": grace})

    def sandbox_start(self, sandbox: str) -> R:
        return self._call("sandbox.start", {"sandbox": sandbox})

    def sandbox_delete(self, sandbox: str, *, grace: float = 5.0) -> R:
        return self._call("sandbox.delete", {"sandbox": sandbox, "grace": grace})

    # execs
    def exec_start(self, argv: Sequence[str], *, sandbox: str = "default",
                   env: dict[str, str] | None = None, cwd: str | None = None,
                   timeout: float | None = None, name: str | None = None,
                   kill_grace: float | None = None, request_key: str | None = None,
                   tty: bool = False, stdin: bool = False, rows: int | None = None,
                   cols: int | None = None) -> R:
        """Start ``argv``. A request key makes retries (after a reconnect) start it once.

        ``tty`` gives it a terminal (attach with ``Client.attach``); ``stdin`` keeps
        its input open for attached clients.
        """
        return self._call("exec.start", _clean({
            "argv": list(argv), "sandbox": sandbox, "env": env, "cwd": cwd,
            "timeout": timeout, "name": name, "kill_grace": kill_grace,
            "request_key": request_key or uuid.uuid4().hex,
            "tty": tty or None, "stdin": stdin or None, "rows": rows, "cols": cols}))

    def exec_get(self, exec: str) -> R:
        return self._call("exec.get", {"exec": exec})

    def exec_list(self, *, sandbox: str | None = None, all: bool = False) -> R:
        return self._call("exec.list", _clean({"sandbox": sandbox, "all": all}))

    def exec_wait(self, exec: str, *, timeout: float | None = None) -> R:
        return self._call("exec.wait", _clean({"exec": exec, "timeout": timeout}))

    def exec_cancel(self, exec: str, *, signal: int | str = "TERM", grace: float = 5.0,
                    reason: str | None = None) -> R:
        return self._call("exec.cancel", _clean({"exec": exec, "signal": signal,
                                                 "grace": grace, "reason": reason}))

    def exec_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                  limit: int | None = None, wait: float | None = None) -> R:
        """One chunk of a log from ``offset``; ``data`` is base64 on the wire."""
        return self._call("exec.logs", _clean({"exec": exec, "stream": stream,
                                               "offset": offset, "limit": limit,
                                               "wait": wait}))

    # events
    def events_list(self, *, since: int = 0, sandbox: str | None = None,
                    limit: int | None = None) -> R:
        return self._call("events.list", _clean({"since": since, "sandbox": sandbox,
                                                  "limit": limit}))
