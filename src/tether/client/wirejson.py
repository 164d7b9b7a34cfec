"""JSON for the one-shot programs, from CPython's C accelerator (``_json``) alone.

The ``json`` package compiles regular expressions when imported, so it imports ``re``
(and ``enum`` with it): together more than the rest of a hook call's imports. ``_json``
holds the encoder and the scanner that ``json`` itself drives; here they are driven
directly, with ``json``'s defaults (compact separators, ASCII output, NaN allowed), for
the same results (``tests/unit/test_wirejson.py``). CPython always builds ``_json``.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False  # not ``typing``'s: this module is on the hook program's path
if TYPE_CHECKING:
    from typing import Any

_WS = " \t\n\r"  # JSON's whitespace


def _unencodable(o: object) -> object:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


class _Context:
    """What ``_json.make_scanner`` reads from ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity: float() reads all three
    memo: dict[str, str] = {}


_encoder = _json.make_encoder(None, _unencodable, _json.encode_basestring_ascii, None,
                              ":", ",", False, False, True)
_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # stub: reads these fields


def dumps(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"))`` (the object may not hold itself)."""
    return "".join(_encoder(obj, 0))


def loads(data: str | bytes) -> Any:
    """``json.loads(data)``; ``ValueError`` (``UnicodeDecodeError`` is one) when it is
    not one JSON value."""
    s = (data.decode() if isinstance(data, bytes) else data).strip(_WS)
    try:
        value, end = _scan(s, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(s):
        raise ValueError("extra data after a JSON value")
    return value
