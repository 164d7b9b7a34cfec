"""Being in the foreground of an exec: this terminal attached to its PTY, or its logs
streamed here while Ctrl-C cancels it (``tether run``, ``tether attach``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from tether.cli import output as out
from tether.client.blocking import Client
from tether.client.errors import TetherError
from tether.client.replies import ExecView
from tether.model.records import KILL_GRACE


def detach_keys(spec: str | None) -> bytes:
    from tether.cli.terminal import DEFAULT_DETACH_KEYS, BadDetachKeys, parse_detach_keys

    try:
        return parse_detach_keys(spec or os.environ.get("TETHER_DETACH_KEYS")
                                 or DEFAULT_DETACH_KEYS)
    except BadDetachKeys as e:
        raise click.BadParameter(str(e), param_hint="--detach-keys") from None


def forward_stdin(home: Path, exec_id: str) -> None:
    """``run -i`` without a terminal: copy our stdin to the command's, then close it."""
    with contextlib.suppress(TetherError, OSError), Client(home) as c:
        att = c.attach(exec_id, replay=0)
        while data := os.read(sys.stdin.fileno(), 65536):
            att.write(data)
        att.close_stdin()


def attach_terminal(c: Client, ref: str, keys: bytes, *, read_only: bool = False,
                    replay: int = 64 * 1024) -> int:
    """Attach this terminal to an exec's PTY; returns the exit code for the CLI."""
    from tether.cli.terminal import attach_session

    code = attach_session(
        lambda size, passed: c.attach(ref, read_only=read_only, rows=size and size[0],
                                      cols=size and size[1], replay=replay,
                                      terminal=passed, detach_keys=keys),
        keys, read_only=read_only)
    return _print_ended(c, ref) if code is None else code  # None: it ended before


class _Interrupted(Exception):
    pass


class Interrupts:
    """Counts Ctrl-C from before the exec starts, so none is lost to a race.

    While ``armed`` (blocked waiting on the daemon) a Ctrl-C also raises, so the
    wait is interrupted at once; otherwise it is only counted and acted on next.
    """

    def __init__(self) -> None:
        self.count = 0
        self.handled = 0
        self.armed = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.armed:
            self.armed = False
            raise _Interrupted


def _pump(home: Path, exec_id: str) -> None:
    """Both logs as they were written, each to its own stream (a `2>&1` sees the order)."""
    with Client(home) as c:
        for stream, data in c.read_output(exec_id, follow=True):
            sink = sys.stderr.buffer if stream == "stderr" else sys.stdout.buffer
            sink.write(data)
            sink.flush()


def _print_ended(c: Client, ref: str) -> int:
    """An exec that ended before the attach: show its terminal output and its status."""
    x = c.exec_wait(ref, timeout=30.0)
    stream = "pty" if x.spec.tty else "stdout"
    for data in c.read_logs(x.id, stream=stream):
        sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    code = exec_exit_code(x)
    what = (f"killed by signal {x.signal}" if x.signal
            else f"exited with code {x.exit_code}")
    sys.stderr.write(f"\r\n[{x.id} {what}]\n")
    return code


def exec_exit_code(x: ExecView) -> int:
    """The CLI's exit code for an ended exec (128+N when killed by signal N)."""
    from tether.cli.terminal import exit_code

    return exit_code(x.state, x.exit_code, x.signal)


def attach_output(c: Client, exec_id: str, interrupts: Interrupts) -> int:
    """Stream both logs until the exec ends; Ctrl-C cancels it (twice: kill)."""
    threads = [threading.Thread(target=_pump, args=(c.home, exec_id), daemon=True)]
    for t in threads:
        t.start()
    while True:
        if interrupts.count > interrupts.handled:
            interrupts.handled = interrupts.count
            sig = "TERM" if interrupts.handled == 1 else "KILL"
            c.close()  # an interrupted call may have left a half-read reply behind
            c.exec_cancel(exec_id, signal=sig, grace=KILL_GRACE, reason="interrupted (Ctrl-C)")
        try:
            interrupts.armed = True
            x = c.exec_wait(exec_id, timeout=5.0)
            interrupts.armed = False
        except _Interrupted:
            continue
        if x.state in ("FINISHED", "FAILED", "CANCELLED"):
            break
    for t in threads:
        t.join(timeout=10)
    if x.state == "FAILED" and x.reason:
        out.fail(f"exec {exec_id} failed: {x.reason}")
    return exec_exit_code(x)

