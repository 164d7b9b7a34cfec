"""The daemon's systemd watchdog interval and JSON log lines, as pure functions."""

from __future__ import annotations

import json
import logging

from tether.daemon.logfmt import JsonFormatter, ids
from tether.daemon.systemd import watchdog_interval


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, 42) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 42) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 42) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}, 42) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}, 42) is None
    assert watchdog_interval({}, 42) is None


def test_json_line_has_the_ids_as_fields() -> None:
    rec = logging.LogRecord("tether.execs", logging.WARNING, __file__, 1, "exec %s: %s",
                            ("abc", "gone"), None)
    rec.__dict__.update(ids(exec="abc", sandbox="default", lineage=None))
    line = json.loads(JsonFormatter().format(rec))
    assert line == {"time": line["time"], "level": "WARNING", "logger": "tether.execs",
                    "msg": "exec abc: gone", "exec": "abc", "sandbox": "default"}
