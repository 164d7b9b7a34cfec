"""The order of an exec's output across its two logs (``<exec>.order``; category D).

Without a terminal the child writes ``stdout.log`` and ``stderr.log`` itself: no byte
passes through the monitor, so nothing says in which order the two were written. The
monitor watches both files (inotify; where it cannot, it looks every :data:`POLL`
seconds) and appends a record each time the other stream than the last one grows:
``"<stream> <stdout offset> <stderr offset>\n"`` (0 stdout, 1 stderr; 15 digits each,
:data:`RECORD` bytes), after a header line. It says: from these two offsets on, that
stream was written next, up to where the next record's offset of it says (the last
record's, up to the end of its log). Records are only appended, never rewritten, so
what a reader has seen never changes under it, and the file grows only when the writer
switches streams.

A reader (``tether logs``, :func:`runs`) takes no byte from this file, only the order: it
reads each log once, front to back, so the output is byte-exact whatever the index says
— a record that lags (a monitor killed), or never came (an exec started before this
file existed), only moves where the streams meet. Granular to the monitor's wake-ups:
writes to both logs that land before it looks are ordered stream by stream.
Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

HEADER = b"tether log order v1".ljust(33) + b"\n"
RECORD = 34
STREAMS = ("stdout", "stderr")
POLL = 0.05  # seconds between looks where inotify is not to be had
IN_MODIFY, IN_Q_OVERFLOW = 0x2, 0x4000


_ctypes: Any
try:  # here, not at the start: an idle pooled monitor loads it, not an exec's start
    import _ctypes
except ImportError:  # a Python built without it: ctypes fails too, and we poll
    _ctypes = None


def _libc() -> Callable[..., int]:
    """A way to call libc's inotify functions: ``_ctypes`` alone (a fraction of
    ``ctypes``'s memory, in a process run once per exec), else ``ctypes``."""
    try:
        handle = _ctypes.dlopen(None, os.RTLD_NOW)
        call = _ctypes.call_function
        return lambda name, *args: int(call(_ctypes.dlsym(handle, name), args))
    except (ImportError, AttributeError, OSError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return lambda name, *args: int(getattr(libc, name)(*args))


class Order:
    """The monitor's side: :meth:`open` before the command may run, :meth:`ready` when
    the inotify fd is readable, :meth:`tick` from the loop, :meth:`close` once it ended
    (before the exit file: a reader that sees the exec ended finds the whole index)."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.path = paths["order"]
        self.logs = [paths[s] for s in STREAMS]
        self.fds = [-1, -1]
        self.known = [0, 0]  # each log's size when last looked at
        self.cur = -1  # the stream of the last record (-1: none yet)
        self.index = -1
        self.size = 0  # the index's size
        self.notify = -1
        self.call: Callable[..., int] | None = None  # libc's inotify functions
        self.wds: dict[int, int] = {}  # inotify watch -> stream
        self.next_look = 0.0  # monotonic; only without inotify

    def open(self) -> int:
        """Make the index and start watching; the inotify fd for the loop (-1: none, so
        :meth:`tick` looks every :data:`POLL` s). Raises OSError: no index at all."""
        flags = os.O_RDONLY | os.O_CLOEXEC
        self.fds = [os.open(p, flags) for p in self.logs]
        self.index = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                             0o600)
        self.size = os.pwrite(self.index, HEADER, 0)
        try:
            self.call = _libc()
            self.notify = self.call("inotify_init1", os.O_NONBLOCK | os.O_CLOEXEC)
            if self.notify >= 0 and not (self._watch(0) and self._watch(1)):
                os.close(self.notify)
                self.notify = -1
        except (ImportError, OSError, AttributeError):
            self.notify = -1
        return self.notify

    def _watch(self, stream: int) -> bool:
        assert self.call is not None
        wd = self.call("inotify_add_watch", self.notify, os.fsencode(self.logs[stream]),
                       IN_MODIFY)
        if wd >= 0:
            self.wds[wd] = stream
        return wd >= 0

    def _switched(self, stream: int, prev: int) -> None:
        """Only a switch of stream makes a record, so only the other log is watched: a
        command writing one stream on and on wakes nobody (what it costs the writer
        stays the kernel's, not a process woken at every write)."""
        if self.notify < 0 or self.call is None:
            return
        for wd in [w for w, st in self.wds.items() if st == stream]:
            self.call("inotify_rm_watch", self.notify, wd)
            del self.wds[wd]
        if prev >= 0 and prev not in self.wds.values() and not self._watch(prev):
            self.notify_lost()

    def notify_lost(self) -> None:
        """inotify cannot watch any more: look every :data:`POLL` s instead."""
        os.close(self.notify)
        self.notify = -1
        self.wds.clear()

    def ready(self) -> None:
        """inotify says the logs changed: note them in the order it saw them."""
        try:
            data = os.read(self.notify, 65536)
        except BlockingIOError:
            return
        at = 0
        while at + 16 <= len(data):
            wd = int.from_bytes(data[at:at + 4], "little", signed=True)
            mask = int.from_bytes(data[at + 4:at + 8], "little")
            at += 16 + int.from_bytes(data[at + 12:at + 16], "little")
            if mask & IN_Q_OVERFLOW:
                self.look()
            elif wd in self.wds:
                self.grew(self.wds[wd])

    def wait_time(self, now: float) -> float | None:
        """Seconds until :meth:`tick` should look (None: inotify tells us)."""
        if self.notify >= 0 or self.index < 0:
            return None
        return max(0.0, self.next_look - now)

    def tick(self, now: float) -> None:
        if self.notify < 0 and self.index >= 0 and now >= self.next_look:
            self.next_look = now + POLL
            self.look()

    def look(self) -> None:
        """Both logs, the one written last first (it most likely went on)."""
        first = max(self.cur, 0)
        self.grew(first)
        self.grew(1 - first)

    def _size(self, stream: int) -> int:
        try:
            return os.fstat(self.fds[stream]).st_size
        except OSError:
            return self.known[stream]

    def grew(self, stream: int) -> None:
        for _ in range(16):  # bounded: a command switching streams on and on is not ours
            size = self._size(stream)
            if size <= self.known[stream]:
                return
            if stream == self.cur:
                self.known[stream] = size
                return
            prev = self.cur
            if prev >= 0:  # the one it leaves: its end now, not when it last grew (it may
                # have gone on since, and a reader may have shown that much: ``runs``)
                self.known[prev] = max(self.known[prev], self._size(prev))
            if not self._append(stream, *self.known):
                return
            self.known[stream] = size
            self._switched(stream, prev)
            if prev < 0:
                return
            stream = prev  # what it wrote before its watch was back: no event says it

    def _append(self, stream: int, out: int, err: int) -> bool:
        try:
            self.size += os.pwrite(self.index, b"%d %015d %015d\n" % (stream, out, err),
                                   self.size)
        except OSError:
            return False  # a full disk: the reader goes on from the last record it finds
        self.cur = stream
        return True

    def close(self) -> None:
        """The command ended: what it wrote last, then let go of every fd."""
        if self.index < 0:
            return
        if self.notify >= 0:
            self.ready()
        self.look()
        for fd in (*self.fds, self.index, self.notify):
            if fd >= 0:
                os.close(fd)
        self.index = self.notify = -1


def runs(order: str, logs: tuple[str, str], final: bool, offset: int = 0,
         limit: int = 1 << 62) -> tuple[list[tuple[int, int, int]], tuple[int, int]]:
    """The interleaved output from its byte ``offset``, up to ``limit`` bytes, as
    (stream, start, end) runs of the two ``logs``, and their sizes (read after this
    file's records, so no record is missing below them). While the exec runs, only what
    is ordered: the last record's stream up to its log's end only while the other has
    not grown past the record (else the next record says where it switched). Once it
    ended (``final``: known before this call) both logs to their ends. Without an index
    (an exec started before it existed): stdout, then (``final``) stderr."""
    def sizes() -> tuple[int, int]:
        got = []
        for path in logs:
            try:
                got.append(os.stat(path).st_size)
            except FileNotFoundError:
                got.append(0)
        return got[0], got[1]

    try:
        f = open(order, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        size = sizes()
        return _cut([(0, 0, size[0])] + ([(1, 0, size[1])] if final else []), offset,
                    limit), size
    with f:
        fd = f.fileno()
        if os.pread(fd, len(HEADER), 0) != HEADER:
            return [], sizes()
        n = (os.fstat(fd).st_size - len(HEADER)) // RECORD
        size = sizes()

        def rec(k: int) -> tuple[int, int, int]:
            line = os.pread(fd, RECORD, len(HEADER) + k * RECORD)
            return (int(line[:1]), min(int(line[2:17]), size[0]),
                    min(int(line[18:33]), size[1]))

        if n == 0:
            return _cut([(0, 0, size[0]), (1, 0, size[1])] if final else [], offset,
                        limit), size
        lo, hi = 0, n  # the last record at or before offset: its run holds it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if sum(rec(mid)[1:]) <= offset:
                lo = mid
            else:
                hi = mid
        start = pos = sum(rec(lo)[1:])
        pieces: list[tuple[int, int, int]] = []
        k = lo
        while k < n and pos < offset + limit:
            stream, *at = rec(k)
            if k + 1 < n:
                end = rec(k + 1)[1 + stream]
            elif final or size[1 - stream] <= at[1 - stream]:
                end = size[stream]
            else:  # the other went on: wait for the record that says where, but never
                # take back what an earlier read showed (``offset``: that record will
                # name a point past it, since the other had not grown then)
                end = max(at[stream], min(size[stream], at[stream] + offset - pos))
            pieces.append((stream, at[stream], end))
            pos += end - at[stream]
            k += 1
            if k == n and final:  # then the rest of the other log
                pieces.append((1 - stream, at[1 - stream], size[1 - stream]))
        return _cut(pieces, offset - start, limit), size


def _cut(pieces: list[tuple[int, int, int]], skip: int, limit: int
         ) -> list[tuple[int, int, int]]:
    """``pieces`` less their first ``skip`` bytes, up to ``limit`` bytes."""
    out = []
    for stream, start, end in pieces:
        if skip >= end - start:
            skip -= end - start
            continue
        start += max(0, skip)
        skip = 0
        end = min(end, start + limit)
        if end > start:
            out.append((stream, start, end))
            limit -= end - start
        if limit <= 0:
            break
    return out
