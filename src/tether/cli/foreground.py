"""Being in the foreground of an exec: this terminal attached to its PTY, or its logs
streamed here while Ctrl-C cancels it (``tether run``, ``tether attach``)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from tether.cli import output as out
from tether.client.attach import Attachment
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


#: How long an attached client waits for a dead agent's revival before it says how to
#: attach later (a revival is due within the backoff, at most 30 s).
FOLLOW_WAIT = 60.0


def attach_terminal(c: Client, ref: str, keys: bytes, *, read_only: bool = False,
                    replay: int = 64 * 1024) -> int:
    """Attach this terminal to an exec's PTY; returns the exit code for the CLI. When the
    exec is an agent's attempt that ends and its lineage is revived, the terminal follows
    the lineage to its new attempt (as `tether attach LINEAGE` would), saying so in one
    line; a lineage that waits (a usage limit, a question) is named with how to attach."""
    from tether.cli.terminal import attach_session

    # The attempt it names now (a lineage's name names the next one once it is revived);
    # with no daemon, or none, the attach itself says so.
    with contextlib.suppress(TetherError):
        ref = c.exec_get(ref).id
    while True:
        how: list[str] = []
        code = attach_session(functools.partial(_connect, c, ref, read_only, replay, keys),
                              keys, read_only=read_only, ended=how.append)
        if code is None:  # it ended before the attach
            code = _print_ended(c, ref)
        elif how != ["exited"]:
            return code  # detached (it runs on), or the monitor lost
        try:
            following = _revived(c, ref)
        except KeyboardInterrupt:
            following = None
        if following is None:
            return code
        ref, replay = following, 16 * 1024 * 1024  # the new attempt from its start


def _connect(c: Client, ref: str, read_only: bool, replay: int, keys: bytes,
             size: tuple[int, int] | None, passed: int | None) -> Attachment:
    return c.attach(ref, read_only=read_only, rows=size and size[0], cols=size and size[1],
                    replay=replay, terminal=passed, detach_keys=keys)


def _revived(c: Client, ref: str) -> str | None:
    """The exec of the next attempt of the lineage whose attempt ``ref`` was, once it
    runs; None when ``ref`` is no agent's attempt, still runs (a detach), or its lineage
    ended or waits (then said in one line)."""
    ended = ("FINISHED", "FAILED", "CANCELLED")
    try:
        x = c.exec_get(ref)
        for _ in range(100):  # its monitor told us first; the daemon hears it next
            if x.lineage is None or x.state in ended:
                break
            time.sleep(0.1)
            x = c.exec_get(ref)
    except TetherError:
        return None  # no daemon to ask: the attachment's own report stands
    if x.lineage is None or x.state not in ended:
        return None
    deadline = time.monotonic() + FOLLOW_WAIT
    said = False
    while True:
        try:
            lin = c.lineage_get(x.lineage)
        except TetherError:
            return None
        who = f"agent {lin.name or lin.id}"
        again = f"`tether attach {lin.name or lin.id}`"
        if lin.status == "ACTIVE" and lin.exec and lin.exec != x.id:
            sys.stderr.write(f"tether: {who} was revived (attempt {lin.attempt}, exec "
                             f"{lin.exec}); attached to it again\n")
            return lin.exec
        if lin.status in ("ORPHANED", "REVIVING", "ACTIVE") and time.monotonic() < deadline:
            if not said:
                sys.stderr.write(f"tether: {who} ended; waiting for its revival (Ctrl-C "
                                 f"leaves; {again} later)\n")
                said = True
            time.sleep(0.2)
            continue
        if lin.status == "WAITING_LIMIT":
            when = time.strftime("%H:%M:%S", time.localtime(lin.revive_at or time.time()))
            sys.stderr.write(f"tether: {who} waits for its usage limit to reset (revived at "
                             f"{when}); {again} then\n")
        elif lin.status == "ASK_PENDING":
            sys.stderr.write(f"tether: {who} waits for you: `tether lineage resolve "
                             f"{lin.id} --revive|--reap`\n")
        elif lin.status in ("ORPHANED", "REVIVING", "ACTIVE"):
            sys.stderr.write(f"tether: {who} is not revived yet; {again} once it is\n")
        elif lin.status == "FAILED":
            sys.stderr.write(f"tether: {who} FAILED: {lin.reason}\n")
        return None


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


def _pump(home: Path, exec_id: str, offset: int = 0) -> None:
    """Both logs as they were written, each to its own stream (a `2>&1` sees the order),
    from byte ``offset`` of them."""
    with Client(home) as c:
        for stream, data in c.read_output(exec_id, offset=offset, follow=True):
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


def attach_output(c: Client, exec_id: str, interrupts: Interrupts, offset: int = 0) -> int:
    """Stream both logs (from byte ``offset``: what the lean path had shown) until the
    exec ends; Ctrl-C cancels it (twice: kill)."""
    threads = [threading.Thread(target=_pump, args=(c.home, exec_id, offset), daemon=True)]
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

