"""Error codes shared by the daemon and its clients.

JSON-RPC 2.0 reserves -32768..-32000. Application errors use their own numbers
(1000+), and every error carries a stable string ``code`` in ``data.code`` that
programs should match on; the message is for people and says what to do next.
"""

from __future__ import annotations

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


def invalid_params(message: str, **data: Any) -> TetherError:
    return TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS", message, data)
