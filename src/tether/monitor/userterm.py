"""An attached user's own terminal, passed to the monitor over ``SCM_RIGHTS``.

``tether attach`` may hand the monitor its terminal (one fd, in the attach line's
ancillary data) so that no process sits between the program's PTY and the user's
screen: the monitor writes the program's output to that terminal itself and reads
the keystrokes, applying the detach keys and read-only mode. The socket then
carries only resizes, the detach notice and the exit record.

The passed fd shares its open file description (and so ``O_NONBLOCK``) with the
user's shell; the monitor must not block on it, and must not change it. So it is
reopened through ``/proc/self/fd`` (a file description of our own, non-blocking,
``O_NOCTTY`` so the monitor never acquires it as its controlling terminal) and the
passed fd is closed at once. The terminal's modes (raw, set by the CLI) are the
CLI's to set and restore. Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _socket as socket
import os
import select
import stat
import struct
from _collections import deque  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from tether.monitor.loop import Poller

MAX_PASSED_FDS = 1  # one terminal, read and written
_FD = struct.Struct("i")
_ANCILLARY = socket.CMSG_SPACE(_FD.size * 4)  # room to see (and close) a few extra


def recv_with_fds(sock: socket.socket, size: int) -> tuple[bytes, list[int]]:
    """``recv`` that also takes the fds passed with the bytes (close-on-exec)."""
    data, ancillary, _flags, _addr = sock.recvmsg(size, _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD.size
            fds.extend(fd for (fd,) in _FD.iter_unpack(payload[:usable]))
    return data, fds


class DetachMatcher:
    """Finds the detach sequence in typed input; holds back a partial match."""

    def __init__(self, keys: bytes) -> None:
        self.keys = keys
        self.held = b""

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """(bytes to send to the program, whether the user detached)."""
        if not self.held and self.keys[0] not in data:
            return data, False  # the common case, per keystroke: nothing to look at
        out = bytearray()
        for b in data:
            candidate = self.held + bytes([b])
            # Release bytes from the front until what is left could still be the start
            # of the sequence (so "aab" is found in "aaab").
            while candidate and not self.keys.startswith(candidate):
                out.append(candidate[0])
                candidate = candidate[1:]
            if candidate == self.keys:
                self.held = b""
                return bytes(out), True
            self.held = candidate
        return bytes(out), False


class UserTerm:
    """The monitor's own handle on an attached user's terminal, and its unsent output."""

    def __init__(self, fd: int, keys: bytes, poller: Poller, owner: int) -> None:
        self.fd = fd
        self.matcher = DetachMatcher(keys)
        self.poller = poller
        self.owner = owner  # the fd of the client connection this terminal belongs to
        self.out: deque[memoryview] = deque()
        self.out_size = 0
        self.replay_left = 0  # replay bytes still queued (exempt from the backlog limit)
        self.mask = 0

    @classmethod
    def open(cls, passed: int, keys: bytes, poller: Poller, owner: int) -> UserTerm:
        """Our own file description of the terminal behind ``passed`` (not closed here).

        Raises OSError when it is not a terminal or cannot be reopened; the client
        then relays the bytes itself."""
        if not keys:
            raise OSError("no detach keys")
        if not stat.S_ISCHR(os.fstat(passed).st_mode) or not os.isatty(passed):
            raise OSError("not a terminal")
        fd = os.open(f"/proc/self/fd/{passed}",
                     os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
        term = cls(fd, keys, poller, owner)
        term.set_mask(reading=True)
        return term

    def set_mask(self, *, reading: bool) -> None:
        mask = (select.EPOLLIN if reading else 0) | (select.EPOLLOUT if self.out else 0)
        if self.fd < 0 or (mask == self.mask and self.fd in self.poller.fds):
            return
        self.mask = mask
        if self.fd in self.poller.fds:
            self.poller.modify(self.fd, mask)
        else:
            self.poller.register(self.fd, self, mask)

    # -------------------------------------------------------------- output
    def write(self, data: bytes) -> bool:
        """Output for the screen: written now if the terminal takes it, else queued;
        whether some is queued. Raises OSError when the terminal is gone (hung up)."""
        n = 0
        if not self.out:
            try:
                n = os.write(self.fd, data)
            except BlockingIOError:
                pass
            if self.replay_left:
                self.replay_left = max(0, self.replay_left - n)
            if n == len(data):  # the common case: nothing to keep
                return False
        self.out.append(memoryview(data)[n:])  # over immutable bytes: kept, not copied
        self.out_size += len(data) - n
        return True

    def flush(self) -> None:
        """Write queued output until the terminal would block. Raises OSError if gone."""
        while self.out:
            try:
                n = os.writev(self.fd, list(self.out)[:64])
            except BlockingIOError:
                return
            self.out_size -= n
            self.replay_left = max(0, self.replay_left - n)
            while self.out and n >= len(self.out[0]):
                n -= len(self.out.popleft())
            if n:
                self.out[0] = self.out[0][n:]

    def discard(self) -> None:
        """Drop the backlog (the client skips ahead)."""
        self.out.clear()
        self.out_size = 0
        self.replay_left = 0

    def finish(self, timeout: float) -> None:
        """Write what is queued, waiting at most ``timeout`` seconds (the program ended)."""
        poll = select.poll()
        poll.register(self.fd, select.POLLOUT)
        while self.out and poll.poll(int(timeout * 1000)):
            try:
                self.flush()
            except OSError:
                return
        self.close()

    # -------------------------------------------------------------- input
    def read(self) -> tuple[bytes, bool] | None:
        """Typed bytes for the program and whether the detach keys were typed; None
        when the terminal is gone."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return b"", False
        except OSError:  # EIO: the terminal hung up
            return None
        if not data:
            return None
        return self.matcher.feed(data)

    def close(self) -> None:
        if self.fd < 0:
            return
        self.poller.unregister(self.fd)
        os.close(self.fd)
        self.fd = -1
        self.discard()
