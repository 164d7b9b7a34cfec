"""``client.wirejson`` (``_json`` driven directly, for the one-shot programs) gives what
the ``json`` package gives, and refuses what it refuses."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tether.client import wirejson

VALUES: list[Any] = [
    {}, [], "", "plain", "é\u2028\n\"\\\x00", 0, -1, 12345678901234567890, 1.5, -0.0, 1e300,
    True, False, None, {"a": [1, {"b": None}], "ü": "x"}, [[[[]]]],
    {"jsonrpc": "2.0", "id": 1, "method": "agent.hook", "params": {"payload": {"k": [1.25]}}},
]


@pytest.mark.parametrize("value", VALUES)
def test_same_as_json(value: Any) -> None:
    assert wirejson.dumps(value) == json.dumps(value, separators=(",", ":"))
    for text in (json.dumps(value), json.dumps(value, indent=2), f" \n{json.dumps(value)}\t"):
        assert wirejson.loads(text) == json.loads(text)
        assert wirejson.loads(text.encode()) == json.loads(text.encode())


def test_constants_and_errors() -> None:
    assert math.isnan(wirejson.loads("NaN")) and wirejson.loads("-Infinity") == -math.inf
    assert wirejson.dumps(math.inf) == "Infinity"
    for bad in ["", " ", "{", "{} x", "[1,]", "nul", "{'a': 1}", b"\xff"]:
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            wirejson.loads(bad)
    with pytest.raises(TypeError, match="not JSON serializable"):
        wirejson.dumps({"a": object()})
