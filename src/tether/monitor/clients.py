"""The monitor's socket and its clients: control, attach and watch connections.

A connection speaks JSON lines (handled by :mod:`tether.monitor.control`) until it
sends ``{"op": "attach"}`` or ``{"op": "watch"}``. An attached client then exchanges
frames (:mod:`tether.monitor.attachproto`): it is sent a replay of the recent output
and everything the program writes, and the most recently active one sets the window
size. An attach line may carry the client's own terminal (``SCM_RIGHTS``): the monitor
then writes the output to it and reads the keys itself (:mod:`tether.monitor.userterm`).
A watch connection (the daemon's) is sent every attach, detach and resize as a
numbered event, and each is appended to the exec's events file too (a JSON line), for a
daemon that was not watching — none ran, the client attached without one — to journal
once it sees the exec. Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _socket as socket
import os
import select
import sys
from _collections import deque  # type: ignore[import-not-found]

from tether.monitor import attachproto as proto
from tether.monitor import tinyjson as json
from tether.monitor.screen import ScreenModes
from tether.monitor.userterm import MAX_PASSED_FDS, UserTerm, recv_with_fds

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tether.monitor.child import Child
    from tether.monitor.loop import Poller
    from tether.monitor.terminal import Terminal

MAX_CONTROL_LINE = 64 * 1024
MAX_CLIENT_BACKLOG = 4 * 1024 * 1024  # an attached client further behind is dropped
MAX_TTY_EVENTS = 10000  # terminal events kept for a daemon that catches up
frame = proto.frame


class Client:
    """One connection to the monitor's socket."""

    def __init__(self, sock: socket.socket, ident: int) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.id = ident
        self.mode = "control"  # "control" | "attach" | "watch"
        self.inbuf = bytearray()
        # Unsent output as whole frames (a backlog can be dropped at a frame boundary);
        # ``out_off`` bytes of the first one have been sent already.
        self.out: deque[bytes] = deque()
        self.out_off = 0
        self.out_size = 0
        self.read_only = False
        self.rows = 0
        self.cols = 0
        self.writable_wanted = False
        self.replay_left = 0  # replay bytes still queued (exempt from the backlog limit)
        self.skips = 0  # times it fell behind and skipped ahead
        self.passed: list[int] = []  # fds received over the socket, not yet taken
        self.term: UserTerm | None = None  # its own terminal, written and read by us


def listening(path: str) -> socket.socket:
    """A socket bound at ``path`` (0600), listening, non-blocking, not inherited."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(16)
        listener.setblocking(False)
        os.set_inheritable(listener.fileno(), False)
    except BaseException:
        listener.close()
        raise
    return listener


class Clients:
    def __init__(self, spec: dict[str, Any], poller: Poller, term: Terminal,
                 child: Child) -> None:
        self.exec_id: str = spec["exec_id"]
        self.name: str | None = spec.get("name")
        self.path: str = spec["paths"]["socket"]
        self.tty = bool(spec.get("tty"))
        self.screen = ScreenModes()  # the modes the program's output set (detach resets)
        self.poller = poller
        self.term = term
        self.child = child
        self.clients: dict[int, Client] = {}
        self.next_client = 1
        self.listener: socket.socket | None = None
        self.active: Client | None = None  # the most recently active attached client
        self.paused: set[Client] = set()  # attach clients not read while input is full
        self.tty_events: list[dict[str, Any]] = []  # attach/detach/resize, numbered
        self.tty_events_base = 0
        self.events_path: str | None = spec["paths"].get("events")
        self.events_fd: int | None = None  # opened at the first event
        self.on_command: Callable[[Client, bytes], None]  # a JSON line (wired to control)

    # -------------------------------------------------------------- socket
    def listen(self, ready: tuple[socket.socket, str] | None = None) -> None:
        """Listen on the exec's socket; ``ready``: one bound and listening ahead under
        another name (a zygote's), renamed into place (a connect finds it by its inode)."""
        if ready is not None:
            os.rename(ready[1], self.path)  # replaces a stale one, as unlink + bind do
            self.listener = ready[0]
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.listener = listening(self.path)

    def remove_socket(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def watch(self) -> None:
        assert self.listener is not None
        self.poller.register(self.listener.fileno(), "listen")

    def accept(self) -> None:
        assert self.listener is not None
        try:
            fd, _ = self.listener._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
        os.set_inheritable(fd, False)
        conn.setblocking(False)
        c = Client(conn, self.next_client)
        self.next_client += 1
        self.clients[fd] = c
        self.poller.register(fd, c)

    def ready(self, c: Client | UserTerm, events: int) -> None:
        """The loop's call when a client's connection (or its terminal) is ready."""
        if isinstance(c, UserTerm):
            self._term_ready(c, events)
            return
        try:
            # Read first: a client that sent "detach" and closed must be seen
            # detaching, not failing on the write of its pending output.
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                self._readable(c)
            if events & select.EPOLLOUT and c.fd in self.clients:
                self._flush(c)
        except Exception as e:  # a hostile client costs only its connection
            sys.stderr.write(f"monitor: dropping client {c.id}: {e!r}\n")
            self.drop(c, "protocol error")

    def drop(self, c: Client, reason: str = "closed") -> None:
        if self.clients.get(c.fd) is not c:
            return  # already dropped
        self.paused.discard(c)
        self.poller.unregister(c.fd)
        self.clients.pop(c.fd, None)
        c.sock.close()
        self._release_terminal(c)
        if c.mode == "attach":
            if self.active is c:
                self.active = None
            self.notify_watchers({"event": "detach", "client": c.id, "reason": reason})

    # -------------------------------------------------------------- output
    def broadcast(self, data: bytes) -> None:
        """The program's output, for every attached client (framed for the sockets)."""
        if self.tty:
            self.screen.feed(data)
        framed = b""
        for c in list(self.clients.values()):
            if c.mode != "attach":
                continue
            if c.term is not None:
                self._to_term(c, c.term, data)
            else:
                framed = framed or frame(proto.DATA, data)
                self._queue(c, framed)

    def send_line(self, c: Client, obj: dict[str, Any]) -> None:
        self._queue(c, (json.dumps(obj) + "\n").encode())

    def _queue(self, c: Client, data: bytes) -> None:
        if c.fd not in self.clients:
            return
        c.out.append(data)
        c.out_size += len(data)
        # The replay a client asked for does not count against its backlog.
        if c.out_size - c.replay_left > MAX_CLIENT_BACKLOG and c.mode == "attach":
            self._skip_ahead(c)
        self._flush(c)

    def _skip_ahead(self, c: Client) -> None:
        """A client far behind (a slow terminal or link) jumps to the present instead of
        being dropped or slowing the program: its backlog is discarded, its terminal is
        reset and shown the recent output, and the program is asked to redraw. Nothing
        is lost: every byte is in pty.log."""
        head = c.out[0] if c.out and c.out_off else None  # finish a half-sent frame
        c.out.clear()
        c.out_size = 0
        if head is not None:
            c.out.append(head)
            c.out_size = len(head) - c.out_off
        else:
            c.out_off = 0
        c.skips += 1
        for chunk in (b"\x1bc", *self.term.tail(proto.DEFAULT_REPLAY)):
            c.out.append(frame(proto.DATA, chunk))
            c.out_size += len(c.out[-1])
        c.replay_left = c.out_size
        self.term.redraw()

    def _flush(self, c: Client) -> None:
        while c.out:
            views = [memoryview(c.out[0])[c.out_off:], *list(c.out)[1:64]]
            try:
                n = c.sock.sendmsg(views)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._read_last_words(c)  # a DETACH it sent before closing counts
                self.drop(c, "connection lost")
                return
            c.out_size -= n
            c.replay_left = max(0, c.replay_left - n)
            n += c.out_off
            while c.out and n >= len(c.out[0]):
                n -= len(c.out.popleft())
            c.out_off = n
        want = bool(c.out)
        if want != c.writable_wanted and c.fd in self.poller.fds:
            c.writable_wanted = want
            self._set_mask(c)

    def _set_mask(self, c: Client) -> None:
        mask = (0 if c in self.paused else select.EPOLLIN) | (
            select.EPOLLOUT if c.writable_wanted else 0)
        self.poller.modify(c.fd, mask)
        if c.term is not None:
            c.term.set_mask(reading=c not in self.paused)

    def close_all(self, record: dict[str, Any]) -> None:
        """The child ended: send every client what it is owed, the exit last, and close."""
        exit_frame = frame(proto.EXIT, json.dumps(record).encode())
        for c in list(self.clients.values()):
            # Control connections are request/reply: they only see their own replies.
            last = {"attach": exit_frame,
                    "watch": (json.dumps({"event": "exit", **record}) + "\n").encode(),
                    }.get(c.mode, b"")
            if c.term is not None:
                self._give_back(c.term)  # the screen shows it all before the status
            pending = b"".join(c.out)[c.out_off:] + last
            try:
                c.sock.settimeout(1.0)
                c.sock.sendall(pending)
            except OSError:
                pass
            c.sock.close()

    # -------------------------------------------------------------- input
    def _readable(self, c: Client) -> None:
        try:
            if c.mode == "control":  # an attach line may carry the client's terminal
                chunk, fds = recv_with_fds(c.sock, 65536)
                c.passed += fds
                while len(c.passed) > MAX_PASSED_FDS:  # the newest is the attach's
                    os.close(c.passed.pop(0))
            else:
                chunk = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.drop(c, "client went away")
            return
        c.inbuf += chunk
        self._process(c)

    def _read_last_words(self, c: Client) -> None:
        """Process whatever a client sent before its connection broke."""
        c.sock.setblocking(False)
        while c.fd in self.clients:
            try:
                chunk = c.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            c.inbuf += chunk
            self._process(c)

    def _process(self, c: Client) -> None:
        while c.fd in self.clients and c not in self.paused:
            if c.mode == "attach":
                if not self._attach_frame(c):
                    break
                continue
            if b"\n" not in c.inbuf:
                if len(c.inbuf) > MAX_CONTROL_LINE:
                    self.drop(c, "control line too long")
                break
            nl = c.inbuf.index(b"\n")
            line = bytes(c.inbuf[:nl])
            del c.inbuf[:nl + 1]
            self.on_command(c, line)

    def resume_paused(self) -> None:
        for c in list(self.paused):  # the program caught up: read clients again
            self.paused.discard(c)
            if c.fd in self.clients:
                self._set_mask(c)
                self._process(c)

    def _attach_frame(self, c: Client) -> bool:
        try:
            got = proto.split(c.inbuf)
        except ValueError:
            self.drop(c, "frame too large")
            return False
        if got is None:
            return False
        kind, payload = got
        if kind == proto.DATA:
            if not c.read_only and not self._typed(c, payload):
                return False
        elif kind == proto.RESIZE and len(payload) == proto.SIZE.size:
            if not c.read_only:  # watchers do not size the window
                c.rows, c.cols = proto.SIZE.unpack(payload)
                self._make_active(c)
        elif kind == proto.EOF:
            if not c.read_only:
                self.term.close_stdin()
        elif kind == proto.DETACH:
            self.drop(c, "detached")
            return False
        return True

    def _typed(self, c: Client, data: bytes) -> bool:
        """Input from an attached client; False when it must wait (the program's input
        is full: backpressure, it is not read until that drains)."""
        if self.active is not c:
            self._make_active(c)
        self.term.write_input(data)
        if self.term.input_full():
            self.paused.add(c)
            self._set_mask(c)
            return False
        return True

    # -------------------------------------------------------------- a passed terminal
    def _take_terminal(self, c: Client, cmd: dict[str, Any]) -> bool:
        """Use the terminal the client passed with its attach line, if it asked to."""
        try:
            if not (cmd.get("terminal") and c.passed and self.tty):
                return False
            keys = cmd.get("detach_keys")
            if not isinstance(keys, list) or not 0 < len(keys) <= 16:
                return False
            c.term = UserTerm.open(c.passed[0], bytes(keys), self.poller, c.fd)
            return True
        except (OSError, ValueError, TypeError) as e:
            sys.stderr.write(f"monitor: client {c.id} relays its own terminal: {e}\n")
            return False
        finally:
            self._release_terminal(c, passed_only=True)

    def _release_terminal(self, c: Client, passed_only: bool = False) -> None:
        while c.passed:
            os.close(c.passed.pop())
        if c.term is not None and not passed_only:
            c.term.close()
            c.term = None

    def _to_term(self, c: Client, t: UserTerm, data: bytes) -> None:
        try:
            if not t.write(data) and not t.mask & select.EPOLLOUT:
                return  # all written, as before: nothing to change
        except OSError:
            self.drop(c, "terminal hung up")
            return
        if t.out_size - t.replay_left > MAX_CLIENT_BACKLOG:
            t.discard()  # far behind: skip ahead, as _skip_ahead does for a socket
            c.skips += 1
            for chunk in (b"\x1bc", *self.term.tail(proto.DEFAULT_REPLAY)):
                t.out.append(memoryview(chunk))
                t.out_size += len(chunk)
            t.replay_left = t.out_size
            self.term.redraw()
        t.set_mask(reading=c not in self.paused)

    def _term_ready(self, t: UserTerm, events: int) -> None:
        c = self.clients.get(t.owner)
        if c is None or c.term is not t:  # its client is gone (the fd may be another's now)
            return
        try:
            if events & select.EPOLLOUT:
                t.flush()
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                got = t.read()
                if got is None:
                    self.drop(c, "terminal hung up")
                    return
                data, detached = got
                if data and not c.read_only:
                    self._typed(c, data)
                if detached:
                    self._detach_by_keys(c)
                    return
            if c.term is t:
                t.set_mask(reading=c not in self.paused)
        except Exception as e:  # the terminal is gone; the client's connection goes too
            sys.stderr.write(f"monitor: dropping client {c.id}: {e!r}\n")
            self.drop(c, "terminal hung up")

    def _give_back(self, t: UserTerm) -> None:
        """Hand a user's terminal back as tmux does: what is queued for it, then the
        modes the program set turned off and its alternate screen left; then close."""
        try:
            t.write(self.screen.restore())
        except OSError:
            pass
        t.finish(timeout=1.0)

    def _detach_by_keys(self, c: Client) -> None:
        """The user typed the detach keys: give the terminal back, then tell the client
        (which restores its terminal's line modes and exits)."""
        if c.term is not None:
            self._give_back(c.term)
        self._release_terminal(c)
        pending = b"".join(c.out)[c.out_off:] + frame(proto.DETACH)
        try:
            c.sock.settimeout(1.0)
            c.sock.sendall(pending)
        except OSError:
            pass
        self.drop(c, "detached")

    # -------------------------------------------------------------- attach and watch
    def attached(self) -> int:
        return sum(1 for c in self.clients.values() if c.mode == "attach")

    def attach(self, c: Client, cmd: dict[str, Any]) -> None:
        if not self.term.has_input():
            self.send_line(c, {"ok": False, "error": "this exec has no terminal and no open "
                               "stdin; follow its output with `tether logs -f`"})
            return
        c.read_only = bool(cmd.get("read_only"))
        try:
            c.rows = max(0, min(int(cmd.get("rows") or 0), 65535))
            c.cols = max(0, min(int(cmd.get("cols") or 0), 65535))
            replay = max(0, min(int(cmd.get("replay", proto.DEFAULT_REPLAY)),
                                16 * proto.MAX_FRAME))
        except (ValueError, TypeError, OverflowError):
            self.send_line(c, {"ok": False, "error": "bad rows, cols or replay"})
            return
        direct = self._take_terminal(c, cmd)
        self.send_line(c, {"ok": True, "exec": self.exec_id, "name": self.name,
                           "pid": self.child.pid, "tty": self.tty, "client": c.id,
                           "rows": self.term.rows, "cols": self.term.cols,
                           "terminal": direct, "screen": self.screen.state()})
        c.mode = "attach"
        self.notify_watchers({"event": "attach", "client": c.id, "read_only": c.read_only,
                              "rows": c.rows, "cols": c.cols})
        if self.tty and replay:
            for chunk in self.term.tail(replay):
                if c.term is not None:
                    c.term.replay_left += len(chunk)
                    self._to_term(c, c.term, chunk)
                    if c.fd not in self.clients:
                        return
                    continue
                c.replay_left += len(chunk) + proto.HEADER.size
                self._queue(c, frame(proto.DATA, chunk))
        if c.fd not in self.clients:
            return
        if self.tty and not c.read_only:
            before = (self.term.rows, self.term.cols)
            self._make_active(c)
            if (self.term.rows, self.term.cols) == before:
                self.term.redraw()

    def _make_active(self, c: Client) -> None:
        """The most recently active client (attach, input, resize) sets the size."""
        self.active = c
        if c.rows and c.cols and self.term.resize(c.rows, c.cols):
            self.notify_watchers({"event": "resize", "rows": c.rows, "cols": c.cols,
                                  "client": c.id})

    def watch_events(self, c: Client, since: int) -> None:
        """Make ``c`` a watch connection: reply, then every event from number ``since``."""
        c.mode = "watch"
        self.send_line(c, {"ok": True, "clients": self.attached(),
                           "next": self.tty_events_base + len(self.tty_events)})
        for ev in self.tty_events[max(0, since - self.tty_events_base):]:
            self.send_line(c, ev)

    def _record(self, event: dict[str, Any]) -> None:
        """Append the event to the events file (not fsynced: a power cut ends the exec
        too). At most MAX_TTY_EVENTS lines; a failed write (a full disk) loses the line,
        never the event, which a watching daemon still gets."""
        if self.events_path is None or event["n"] >= MAX_TTY_EVENTS:
            return
        try:
            if self.events_fd is None:
                self.events_fd = os.open(self.events_path, os.O_WRONLY | os.O_CREAT
                                         | os.O_APPEND | os.O_CLOEXEC, 0o600)
            # A line torn by a full disk is ended by the next one's leading newline.
            os.write(self.events_fd, ("\n" + json.dumps(event) + "\n").encode())
        except OSError:
            pass

    def notify_watchers(self, event: dict[str, Any]) -> None:
        """Number the terminal event, keep it, and push it to the daemon's watchers.

        The numbered backlog lets a daemon that was not watching (not yet, or not
        running) journal every event exactly once, resuming from its own count.
        """
        event["n"] = self.tty_events_base + len(self.tty_events)
        self._record(event)
        self.tty_events.append(event)
        if len(self.tty_events) > MAX_TTY_EVENTS:
            drop = len(self.tty_events) - MAX_TTY_EVENTS
            del self.tty_events[:drop]
            self.tty_events_base += drop
        for c in list(self.clients.values()):
            if c.mode == "watch":
                self.send_line(c, event)
