"""Error codes shared by the daemon and its clients.

JSON-RPC 2.0 reserves -32768..-32000. Application errors use their own numbers
(1000+), and every error carries a stable string ``code`` in ``data.code`` that
programs should match on; the message is for people and says what to do next.
"""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import Any


class RpcCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    # Application errors.
    NOT_FOUND = 1001
    AMBIGUOUS = 1002
    CONFLICT = 1003
    INVALID_STATE = 1004
    DAEMON_STOPPING = 1005
    START_FAILED = 1006
    SUBSCRIPTION_OVERFLOW = 1007
    UNAVAILABLE = 1008
    DISK_FULL = 1009


class TetherError(Exception):
    """An error with a JSON-RPC code, a stable string code and a helpful message."""

    def __init__(self, rpc_code: int, code: str, message: str,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.rpc_code = int(rpc_code)
        self.code = code
        self.message = message
        self.data = dict(data or {})

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.rpc_code, "message": self.message,
                "data": {"code": self.code, **self.data}}

    @classmethod
    def from_wire(cls, err: dict[str, Any]) -> TetherError:
        data = dict(err.get("data") or {})
        code = str(data.pop("code", "ERROR"))
        return cls(int(err.get("code", RpcCode.INTERNAL_ERROR)), code,
                   str(err.get("message", "")), data)

    def __str__(self) -> str:
        return self.message


def not_found(kind: str, ref: str) -> TetherError:
    listing = "tether ps -a" if kind == "exec" else "tether sandbox ls"
    return TetherError(RpcCode.NOT_FOUND, f"{kind.upper()}_NOT_FOUND",
                       f"no {kind} matches {ref!r}; list them with `{listing}`",
                       {"ref": ref})


def ambiguous(kinds: str, ref: str, ids: list[str]) -> TetherError:
    """``ref`` is a prefix of several ids (``kinds``: "execs", "sandboxes", "jobs")."""
    return TetherError(RpcCode.AMBIGUOUS, "AMBIGUOUS",
                       f"{ref!r} matches {len(ids)} {kinds}; give more of the id",
                       {"ref": ref, "matches": ids})


def events_purged(since: int, oldest: int, epoch: str) -> TetherError:
    """A cursor older than what journal compaction kept: say so, never skip silently."""
    return TetherError(RpcCode.INVALID_STATE, "EVENTS_PURGED",
                       f"events after cursor {since} were compacted away (retention); the "
                       f"oldest cursor still complete is {oldest}: re-read the state you need, "
                       f"then resume with since={oldest}",
                       {"since": since, "oldest": oldest, "epoch": epoch})


def invalid_params(message: str, **data: Any) -> TetherError:
    return TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS", message, data)


def disk_full(path: str, detail: str) -> TetherError:
    return TetherError(RpcCode.DISK_FULL, "DISK_FULL",
                       f"the disk holding {path} is full ({detail}); free space there and "
                       "retry. Running execs keep their exit status and settle once there "
                       "is room", {"path": path})


def as_disk_full(exc: BaseException, db: str) -> TetherError | None:
    """The DISK_FULL error for an exception that means "no space left", else None.

    SQLite says it with SQLITE_FULL (no file name: it is ``db``); the OS with ENOSPC or
    EDQUOT. Checked by name, not type, so that the model need not import sqlite3."""
    if getattr(exc, "sqlite_errorname", None) == "SQLITE_FULL" or (
            type(exc).__name__ == "OperationalError"
            and "database or disk is full" in str(exc)):
        return disk_full(db, "database or disk is full")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(str(exc.filename or db), exc.strerror or "no space left")
    return None


def as_store_corrupt(exc: BaseException, db: str) -> TetherError | None:
    """STORE_CORRUPT for SQLite's SQLITE_CORRUPT or SQLITE_NOTADB (a damaged page met by a
    query while serving; start-up refuses such a store already), else None."""
    if getattr(exc, "sqlite_errorcode", None) not in (11, 26):
        return None
    return TetherError(RpcCode.UNAVAILABLE, "STORE_CORRUPT",
                       f"the store {db} is corrupt ({exc}); stop the daemon (`tether daemon "
                       "stop`) and start it with `tether daemon --recover-store`, which moves "
                       "the file aside and re-adopts the running execs", {"path": db})
