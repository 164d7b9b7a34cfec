"""JSON for the monitor without importing ``json`` (which imports ``re``: ~1 MB of RSS).

It uses the C accelerator ``_json`` that the standard ``json`` module itself uses,
so the output is ordinary JSON that any reader accepts. Only the types the
monitor's files need are encoded: dict, list, str, int, float, bool, None.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class _Ctx:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"invalid constant {name}")


_scan = _json.make_scanner(_Ctx())  # type: ignore[arg-type]
_WS = " \t\n\r"


def loads(data: bytes | str) -> Any:
    """Decode one JSON document; ValueError if it is not exactly one."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(_WS))
    try:
        obj, end = _scan(text, start)
    except StopIteration as e:
        raise ValueError(f"expecting a JSON value at offset {e.value}") from None
    if text[end:].strip(_WS):
        raise ValueError(f"extra data at offset {end}")
    return obj


def dumps(obj: Any) -> str:
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, str):
        return str(_json.encode_basestring_ascii(obj))
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise ValueError("NaN and infinity are not JSON")
        return float.__repr__(obj)
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{dumps(str(k))}: {dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in obj) + "]"
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")
