"""Signals as users name them, and how an exec's end is described in words."""

from __future__ import annotations

import signal
from typing import Any

from tether.model.errors import invalid_params


def parse_signal(value: int | str) -> int:
    if isinstance(value, int):
        try:
            return int(signal.Signals(value))
        except ValueError:
            raise invalid_params(f"unknown signal number {value}") from None
    name = value.upper()
    if name.isascii() and name.isdigit():  # not "²" or "\u0661", which int() refuses or reads
        if len(name) > 3:  # no signal has more digits; int() of 5,000 of them raises
            raise invalid_params(f"unknown signal number {value[:16]}"
                                 f"{'...' if len(value) > 16 else ''}")
        return parse_signal(int(name))
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise invalid_params(f"unknown signal {value!r} (try TERM, INT, KILL or a number)",
                             ) from None



def describe_exit(outcome: str, st: dict[str, Any]) -> str:
    if outcome == "cancelled":
        return "cancelled"
    if st.get("signal"):
        try:
            name = signal.Signals(st["signal"]).name
        except ValueError:
            name = f"signal {st['signal']}"
        return f"killed by {name}"
    return f"exited with code {st.get('exit_code')}"
