"""The ``hook.*`` JSON-RPC methods (the daemon's method table includes these)."""

from __future__ import annotations

import os
import time
from typing import Any

from tether.daemon.root import Daemon
from tether.model.errors import RpcCode, TetherError
from tether.model.hooks import HookRecord
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

#: The most bytes of a secret file (an HMAC key longer than a block is hashed anyway).
MAX_SECRET = 4096

METHODS: dict[str, type[Any]] = {
    "hook.add": m.HookAdd,
    "hook.list": m.Empty,
    "hook.show": m.HookShow,
    "hook.retry": m.HookRetry,
    "hook.remove": m.HookRef,
}
LONG: frozenset[str] = frozenset()


def _invalid(message: str) -> TetherError:
    return TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS", message)


def read_secret(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            secret = f.read(MAX_SECRET + 1)
    except OSError as e:
        raise _invalid(f"cannot read the secret file {path!r}: {e.strerror or e}") from None
    secret = secret.strip()
    if not secret or len(secret) > MAX_SECRET:
        raise _invalid(f"the secret file {path!r} must hold 1 to {MAX_SECRET} bytes "
                       "(not counting surrounding whitespace)")
    return secret


def handlers(d: Daemon) -> dict[str, Handler]:
    svc = d.hooks

    async def add(p: m.HookAdd, c: Connection) -> Any:
        if (p.url is None) == (p.exec is None):
            raise _invalid("a hook needs exactly one of url (an http:// or https:// URL) "
                           "and exec (a command)")
        if p.cwd is not None and not os.path.isabs(p.cwd):
            raise _invalid(f"cwd must be an absolute path, not {p.cwd!r}")
        secret = read_secret(p.secret_file) if p.secret_file is not None else None
        if secret is not None and p.url is None:
            raise _invalid("a secret signs HTTP bodies; an exec hook takes none")
        rec = HookRecord(name=p.name, on=list(p.on), url=p.url, exec=p.exec, cwd=p.cwd,
                         sandbox=p.sandbox, match_name=p.match_name, nonzero=p.nonzero,
                         max_tries=p.max_tries, has_secret=secret is not None,
                         created_at=time.time())
        return svc.add(rec, secret)

    async def list_(p: m.Empty, c: Connection) -> Any:
        return {"hooks": [svc.view(h) for h in svc.outbox.hooks()]}

    async def show(p: m.HookShow, c: Connection) -> Any:
        return svc.show(p.name, p.limit)

    async def retry(p: m.HookRetry, c: Connection) -> Any:
        return svc.retry(p.name, p.delivery)

    async def remove(p: m.HookRef, c: Connection) -> Any:
        return svc.remove(p.name)

    return {"hook.add": add, "hook.list": list_, "hook.show": show, "hook.retry": retry,
            "hook.remove": remove}
