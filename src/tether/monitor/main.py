"""The monitor process. Run as ``python -I -S .../tether/monitor/main.py``.

Life of a monitor (no asyncio; one ``epoll`` loop):

1. Read one JSON spec line from stdin. A pooled monitor waits here until the
   daemon hands it an exec; EOF (the daemon died) means exit quietly.
2. Claim the exec (``O_EXCL`` claim file, ``flock`` held for life). If a
   recovering daemon claimed it first, start nothing.
3. Start the child with ``posix_spawn`` in its own process group, behind a gate
   (``child.START_GATE``: it waits on a pipe before it execs the command). Without a
   terminal its stdout and stderr *are* the log files: no byte passes through
   any tether process. With a terminal (``tty``) the child is a session leader
   on a PTY whose master we own; we copy its output to ``pty.log`` and to every
   attached client.
4. Write the handles file, report ``{"pid": ...}`` on stdout, open the gate, close
   both pipes: from here on the daemon may die at any moment without affecting us.
   Killed before the gate opens, we leave no command running: the gate reads EOF.
5. Serve the socket (control commands, attach clients, daemon watchers),
   enforce the timeout, and when the child ends write the exit file (atomic,
   fsynced, into blocks reserved at start; on a full disk, retried with backoff
   for as long as we live) and exit.

The socket speaks JSON lines until a client sends ``{"op": "attach"}``; from
then on both directions are frames: 1 type byte, 4-byte big-endian length,
payload (docs/PROTOCOL.md, "Attach protocol").

This module keeps the start-up sequence and the loop; the parts it composes are
:mod:`~tether.monitor.child` (spawn, signals, timeout and kill grace, reaping,
the exit record), :mod:`~tether.monitor.terminal` (log files, PTY, window size,
typed input), :mod:`~tether.monitor.clients` (the socket, attach and watch
connections) and :mod:`~tether.monitor.control` (the JSON-line ops).
"""

from __future__ import annotations

# Low-level modules on purpose (``_signal``, ``_socket``, ``select.epoll``, our
# ``tinyjson``): ``signal``/``socket`` pull in ``enum``, ``selectors`` and ``json``
# pull in more; together ~2.5 MB of RSS in a process we run once per exec. The same
# holds for every module of this package that the monitor imports.
import _signal as signal  # type: ignore[import-not-found]
import os
import select
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tether.hostio.proc import boot_id, proc_start_time  # noqa: E402
from tether.monitor import tinyjson as json  # noqa: E402
from tether.monitor.ahead import Ahead  # noqa: E402
from tether.monitor.child import Child  # noqa: E402
from tether.monitor.clients import Clients  # noqa: E402
from tether.monitor.control import Control  # noqa: E402
from tether.monitor.fence import Fence  # noqa: E402
from tether.monitor.files import (  # noqa: E402
    NO_ROOM,
    claim,
    reserve_exit,
    write_exit,
    write_handles,
)
from tether.monitor.order import Order  # noqa: E402
from tether.monitor.pin import GATE_FD, Pin, gate_pipe, open_gate  # noqa: E402
from tether.monitor.terminal import Terminal  # noqa: E402
from tether.monitor.zygote import Zygote  # noqa: E402


def _report(obj: dict[str, Any]) -> None:
    try:
        os.write(1, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass  # the daemon is gone; the files say everything


EXIT_RETRY_MAX = 2.0  # seconds between two tries at writing the exit file on a full disk


def _detach_pipes() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


_unread = bytearray()  # what a read took past the line (a zygote's two lines may meet)


def _read_spec() -> dict[str, Any] | None:
    while b"\n" not in _unread:
        try:
            chunk = os.read(0, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return None
        _unread.extend(chunk)
    end = _unread.index(b"\n") + 1
    line = bytes(_unread[:end])
    del _unread[:end]
    spec = json.loads(line)
    if not isinstance(spec, dict):
        raise ValueError("spec is not an object")
    return spec



class Poller:
    """The loop's one ``epoll`` and what each registered fd is."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.fds: dict[int, Any] = {}  # fd -> "wake" | "listen" | "master" | "stdin" | Client

    def register(self, fd: int, what: Any, mask: int = select.EPOLLIN) -> None:
        self.fds[fd] = what
        self.epoll.register(fd, mask)

    def unregister(self, fd: int) -> None:
        if self.fds.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def modify(self, fd: int, mask: int) -> None:
        self.epoll.modify(fd, mask)


class Monitor:
    """The start-up sequence and the loop; the parts do the rest."""

    def __init__(self, spec: dict[str, Any], zygote: Zygote | None = None,
                 ahead: Ahead | None = None) -> None:
        self.spec = spec
        self.zygote = zygote  # a sandbox started ahead, if the daemon made this a zygote
        self.ahead = ahead  # the exec's files made ahead, if the daemon asked for them
        self.paths: dict[str, str] = spec["paths"]
        self.poller = Poller()
        self.child = Child(spec)
        self.term = Terminal(spec, self.poller)
        self.clients = Clients(spec, self.poller, self.term, self.child)
        self.control = Control(self.child, self.clients)
        self.pin = Pin()
        self.exit_fd: int | None = None  # the exit file's room, unnamed (made ahead)
        self.order: Order | None = None  # which log was written when (no terminal)
        # A fleet agent's attempt: killed once its host's lease runs out (monitor.fence).
        self.fence = Fence(spec["fence"]) if spec.get("fence") else None
        self.term.on_output = self.clients.broadcast
        self.term.on_input_room = self.clients.resume_paused
        self.clients.on_command = self.control.command

    # -------------------------------------------------------------- start
    def start(self) -> int:
        z = self._zygote_for_spec()
        a = self.ahead
        if a is not None and not a.fits(self.paths):
            a.discard()
            a = self.ahead = None
        # Held (locked) until we exit: tells the daemon this exec has a live monitor.
        if a is not None:
            fd = a.claim(self.paths["claim"])
        else:
            fd = claim(self.paths["claim"], f"monitor {os.getpid()}\n", locked=True)
        if fd is None:
            if z is not None:
                z.discard()
            if a is not None:
                a.discard()
            _report({"error": "exec was already claimed (a recovering daemon failed it)",
                     "code": "CLAIMED"})
            return 3
        self._claim_fd = fd
        if a is not None:  # the log and the exit file's room, made ahead
            os.dup2(a.monitor_log(), 2)
            self.exit_fd = a.take_exit_reservation()
        elif not self._open_files():
            return 0

        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self._wake_r = rfd
        gate_w = self._warm_start() if z is not None else None
        if gate_w is None:
            gate_w = self._cold_start()
            if gate_w is None:
                return 0
        self._watch_order()
        try:
            self._announce()
        except BaseException as e:
            # Nobody could track the command: never let it start, and say so on disk.
            os.close(gate_w)
            try:
                write_exit(self.paths["exit"], self.child.never_let_start(e), self.exit_fd)
            except OSError:
                pass
            raise
        open_gate(gate_w)  # tracked from here: the command may run
        _detach_pipes()
        if self.zygote is not None:  # what waited for the start: the stub's rest
            self.zygote.finish_script()
        self.name_log()
        return self.loop()

    def _watch_order(self) -> None:
        """Before the command may write: note which of its logs it writes when
        (``tether logs`` interleaves them); without it the logs are whole, only not
        interleaved, so a failure is said in the log and the exec goes on."""
        if self.term.tty or "order" not in self.paths:
            return
        order = Order(self.paths)
        try:
            fd = order.open()
        except OSError as e:
            os.write(2, f"monitor: the logs' order is not recorded: {e}\n".encode())
            return
        if fd >= 0:
            self.poller.register(fd, "order")
        self.order = order

    def name_log(self) -> None:
        """Name the log made ahead (a no-op for one opened by name, or named already)."""
        if self.ahead is None:
            return
        try:
            self.ahead.name_monitor_log(self.paths["monitor_log"])
        except OSError as e:
            os.write(2, f"monitor: cannot name this log {self.paths['monitor_log']}: "
                        f"{e}\n".encode())

    def _drop_zygote(self) -> None:
        z = self.zygote
        if z is not None:
            z.discard()
            self.zygote = None

    def _zygote_for_spec(self) -> Zygote | None:
        """The zygote, if it can run this exec; else discarded."""
        z, warm = self.zygote, self.spec.get("warm")
        if z is None:
            return None
        if warm is None or not z.usable(warm) or self.term.tty or self.term.keep_stdin:
            self._drop_zygote()
            return None
        return z

    def _open_files(self) -> bool:
        """A cold start's log and exit reservation; False if there is no room (reported)."""
        log = os.open(self.paths["monitor_log"],
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.dup2(log, 2)
        os.close(log)
        try:  # before the command runs: ending it must never need a new block
            reserve_exit(self.paths["exit"])
        except OSError as e:
            if e.errno not in NO_ROOM:
                raise
            _report({"error": f"no room for the exit file {self.paths['exit']}: {e}",
                     "code": "DISK_FULL", "path": self.paths["exit"]})
            return False
        return True

    def _warm_start(self) -> int | None:
        """Hand the exec to the zygote (:meth:`_zygote_for_spec`): its gate's write end,
        or None (start cold)."""
        z, warm = self.zygote, self.spec["warm"]
        assert z is not None
        try:
            z.hand_off(self.paths)
        except OSError as e:
            os.write(2, f"monitor: zygote not used ({e}); starting cold\n".encode())
            self._drop_zygote()
            return None
        self.clients.listen(self.ahead.take_listener() if self.ahead is not None else None)
        self.child.pid, self.child.started_at = z.pid, time.time()
        self.pin = z.pin
        self.child.group, self.child.pin = z.pin.pgid, z.pin
        try:
            return z.send(warm, self.spec["env"], int(self.spec.get("umask", 0o022)))
        except OSError as e:  # the stub died between the check and now: it never ran
            self.clients.remove_socket()
            msg = f"the sandbox prepared for this exec ended before it started: {e}"
            self._write_exit({"exit_code": None, "signal": None, "ended_at": time.time(),
                              "started_at": None, "outcome": "start_failed", "reason": msg})
            self._drop_zygote()
            _report({"error": msg, "code": "START_FAILED"})
            raise SystemExit(0) from None

    def _cold_start(self) -> int | None:
        """Spawn the child behind its gate: the gate's write end, or None (it could not
        be spawned; the exit file and the report say why)."""
        actions, setsid, to_close = self.term.open()
        # The command's gate (child.START_GATE, or a gated launch's own: monitor.pin).
        gate_r, gate_w = gate_pipe()
        actions.append((os.POSIX_SPAWN_DUP2, gate_r, GATE_FD))
        to_close.append(gate_r)
        self.clients.listen(self.ahead.take_listener() if self.ahead is not None else None)
        try:
            self.child.spawn(actions, setsid)
        except OSError as e:
            os.close(gate_w)
            msg, record = self.child.start_failed(e)
            self.clients.remove_socket()
            self._write_exit(record)
            _report({"error": msg, "code": "START_FAILED"})
            return None
        finally:
            for f in to_close:
                os.close(f)
        self.child.started_at = time.time()
        if self.spec.get("gated"):
            self.pin.find(self.child.pid)
            self.child.group, self.child.pin = self.pin.pgid, self.pin
        return gate_w

    def _announce(self) -> None:
        """Handles file and start report (the command already runs; the child is unreaped,
        so its pid cannot have been reused if this fails and it must be killed)."""
        pid, started_at = self.child.pid, self.child.started_at
        known = {**(self.ahead.known if self.ahead is not None else {}),
                 **(self.zygote.known if self.zygote is not None else {})}
        start_time = known.get("child") or proc_start_time(pid)
        me = {"pid": os.getpid(), "start_time": known.get("monitor") or
              proc_start_time(os.getpid())}
        write_handles(self.paths["handles"], {
            "exec": self.spec["exec_id"], "name": self.spec.get("name"),
            "lineage": self.spec.get("lineage"), "monitor": me,
            "child": {"pid": pid, "pgid": pid, "start_time": start_time},
            "socket": self.paths["socket"], "started_at": started_at, "tty": self.term.tty,
            "boot_id": known.get("boot_id") or boot_id(),
            "stdin": self.term.keep_stdin or self.term.tty,
        }, self.ahead.handles_file() if self.ahead is not None else None)
        self.child.start_timeout()
        _report({"pid": pid, "start_time": start_time, "started_at": started_at,
                 "monitor": me})

    # -------------------------------------------------------------- loop
    def loop(self) -> int:
        self.poller.register(self._wake_r, "wake")
        self.clients.watch()
        self.term.watch()
        while True:
            status = self.child.poll()
            if status is not None:
                return self._finish(status)
            try:
                ready = self.poller.epoll.poll(self._wait_time())
            except InterruptedError:
                ready = []
            for fd, events in ready:
                what = self.poller.fds.get(fd)
                if what is None:
                    continue
                if what == "wake":
                    self._drain_wake()
                elif what == "listen":
                    self.clients.accept()
                elif what == "master":
                    self.term.ready(events)
                elif what == "stdin":
                    self.term.flush_input()
                elif what == "order":
                    self.order.ready()  # type: ignore[union-attr]
                else:
                    self.clients.ready(what, events)
            self.child.run_timers()
            if self.order is not None:
                self.order.tick(time.monotonic())
            if self.fence is not None and self.fence.due(time.monotonic()):
                # The lineage is revived on another host: SIGKILL, for it resumes from
                # its session there (the child is unreaped: its pid is still its own).
                self.child.begin_cancel("fenced", signal.SIGKILL, 0.0, self.fence.reason)
                self.fence = None

    def _wait_time(self) -> float:
        wait = self.child.wait_time()
        if self.fence is not None:
            wait = min(wait, max(0.0, self.fence.next_check - time.monotonic()))
        if self.order is not None and (look := self.order.wait_time(time.monotonic())) \
                is not None:
            wait = min(wait, look)
        return wait

    def _drain_wake(self) -> None:
        self.child.may_have_ended = True  # the wake-up fd carries SIGCHLD (and SIGTERM)
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # -------------------------------------------------------------- end
    def _finish(self, status: tuple[int | None, int | None]) -> int:
        self.term.drain()  # what the program wrote just before it ended
        if self.order is not None:
            self.order.close()  # before the exit file: a reader seeing it sees it all
        record = self.child.exit_record(self.pin.status() or status)
        self._write_exit(record)
        self.clients.close_all(record)
        self.clients.remove_socket()
        return 0

    def _write_exit(self, record: dict[str, Any]) -> None:
        """Write the exit file; while the disk is full, keep the status and retry, for
        until it is on disk it exists nowhere else (the daemon settles from the file)."""
        delay = 0.05
        while True:
            try:
                write_exit(self.paths["exit"], record, self.exit_fd)
                return
            except OSError as e:
                if e.errno not in NO_ROOM:
                    raise
                if delay == 0.05:
                    try:
                        os.write(2, f"monitor: cannot write {self.paths['exit']} yet ({e}); "
                                    "retrying until there is room\n".encode())
                    except OSError:
                        pass  # the log is on the same full disk
                time.sleep(delay)
                delay = min(delay * 2, EXIT_RETRY_MAX)


def _read_ahead(spec: dict[str, Any] | None) -> tuple[dict[str, Any] | None, Ahead | None]:
    """Make the files an ``ahead`` (or ``zygote``) line asks for; the next line if it was
    an ``ahead`` one. Without room or a directory the exec's start makes them, as before."""
    prep = spec.get("ahead") or spec.get("zygote") if spec is not None else None
    if prep is None or "run" not in prep:
        return spec, None
    ahead: Ahead | None = Ahead(prep["run"], prep.get("logs") or prep["dir"])
    assert ahead is not None
    try:
        ahead.prepare()
    except OSError as e:
        os.write(2, f"monitor: files not made ahead: {e}\n".encode())
        ahead.discard()
        ahead = None
    return (_read_spec() if spec is not None and "ahead" in spec else spec), ahead


def main() -> int:
    zygote: Zygote | None = None
    ahead: Ahead | None = None
    try:
        spec, ahead = _read_ahead(_read_spec())
        if spec is not None and "zygote" in spec:
            zygote = Zygote(spec["zygote"])
            try:
                zygote.start()
                _report({"zygote": "ready"})
            except OSError as e:  # the daemon ends us; a spec sent meanwhile starts cold
                os.write(2, f"monitor: zygote failed: {e}\n".encode())
                zygote.discard()
                _report({"zygote": "failed"})
            spec = _read_spec()
    except (ValueError, OSError) as e:
        if zygote is not None:
            zygote.discard()
        if ahead is not None:
            ahead.discard()
        _report({"error": f"bad spec: {e}", "code": "BAD_SPEC"})
        return 2
    if spec is None:
        if zygote is not None:
            zygote.discard()
        if ahead is not None:
            ahead.discard()
        return 0  # pooled monitor whose daemon went away (or whose sandbox did)
    monitor = Monitor(spec, zygote, ahead)
    try:
        return monitor.start()
    except BaseException:
        monitor.name_log()  # the traceback goes to the log: give it its name
        raise


if __name__ == "__main__":
    sys.exit(main())
