"""The monitor's control channel: one JSON line in, one JSON line out.

Ops (docs/PROTOCOL.md, "The monitor socket"): ``ping``, ``cancel`` (signal, then SIGKILL
after the grace), ``signal``, and the two that change what the connection is:
``watch`` and ``attach`` (:mod:`tether.monitor.clients`). Standard library only.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]

from tether.monitor import tinyjson as json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from tether.monitor.child import Child
    from tether.monitor.clients import Client, Clients


class Control:
    def __init__(self, child: Child, clients: Clients) -> None:
        self.child = child
        self.clients = clients

    def command(self, c: Client, line: bytes) -> None:
        reply = self.clients.send_line
        try:
            cmd = json.loads(line)
            op = cmd["op"]
        except (ValueError, KeyError, TypeError):
            reply(c, {"ok": False, "error": "bad command"})
            return
        if op == "ping":
            reply(c, {"ok": True, "pid": self.child.pid, "exec": self.clients.exec_id,
                      "tty": self.clients.tty, "clients": self.clients.attached()})
        elif op == "cancel":
            try:
                sig = int(cmd.get("signal", signal.SIGTERM))
                grace = float(cmd.get("grace", 5.0))
            except (ValueError, TypeError, OverflowError):
                reply(c, {"ok": False, "error": "bad signal or grace"})
                return
            if grace != grace:  # NaN
                grace = 5.0
            if not 0 < sig < signal.NSIG:  # a valid signal number
                reply(c, {"ok": False, "error": f"bad signal {sig}"})
                return
            self.child.begin_cancel("cancelled", sig, grace, str(cmd.get("reason", "")))
            reply(c, {"ok": True})
        elif op == "signal":
            try:
                sig = int(cmd["signal"])
            except (ValueError, TypeError, KeyError, OverflowError):
                sig = 0
            if not 0 < sig < signal.NSIG:  # a valid signal number
                reply(c, {"ok": False, "error": "bad signal"})
                return
            self.child.signal(sig)
            reply(c, {"ok": True})
        elif op == "watch":
            try:
                since = max(0, int(cmd.get("since", 0)))
            except (ValueError, TypeError, OverflowError):
                since = 0
            self.clients.watch_events(c, since)
        elif op == "attach":
            self.clients.attach(c, cmd)
        else:
            reply(c, {"ok": False, "error": f"unknown op {op!r}"})
