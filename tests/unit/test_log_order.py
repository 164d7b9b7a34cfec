"""The order index of an exec's two logs (``tether.monitor.order``): what the monitor
records as the files grow, and what a reader makes of it — the interleaved output,
byte-exact whatever the index says, and the same bytes however it is read (from any
offset, in any chunks, while the writes go on). Real files; the monitor's side is driven
by hand (no inotify wake-ups), so each interleaving is the one a test chooses."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.monitor.order import HEADER, RECORD, Order, runs


class Logs:
    def __init__(self, tmp: Path) -> None:
        self.paths = {"stdout": str(tmp / "x.stdout.log"), "stderr": str(tmp / "x.stderr.log"),
                      "order": str(tmp / "x.order")}
        for k in ("stdout", "stderr"):
            Path(self.paths[k]).write_bytes(b"")
        self.order = Order(self.paths)
        self.order.notify = -1
        self.order.fds = [os.open(self.paths[s], os.O_RDONLY) for s in ("stdout", "stderr")]
        self.order.index = os.open(self.paths["order"], os.O_WRONLY | os.O_CREAT, 0o600)
        self.order.size = os.pwrite(self.order.index, HEADER, 0)

    def write(self, stream: int, data: bytes) -> None:
        with open(self.paths[("stdout", "stderr")[stream]], "ab") as f:
            f.write(data)

    def read(self, final: bool, offset: int = 0, limit: int = 1 << 62
             ) -> list[tuple[int, bytes]]:
        logs = (self.paths["stdout"], self.paths["stderr"])
        pieces, _ = runs(self.paths["order"], logs, final, offset, limit)
        out = []
        for stream, start, end in pieces:
            with open(logs[stream], "rb") as f:
                f.seek(start)
                out.append((stream, f.read(end - start)))
        return out


def _text(parts: list[tuple[int, bytes]]) -> bytes:
    return b"".join(d for _, d in parts)


def test_writes_the_monitor_saw_one_by_one_come_back_in_their_order(tmp_path: Path) -> None:
    """`make`: its command on stdout, the compiler's error and make's on stderr."""
    logs = Logs(tmp_path)
    for stream, data in ((0, b"cc -c x.c\n"), (1, b"x.c:1: error: nope\n"), (0, b"cc y\n"),
                         (1, b"make: *** [x.o] Error 1\n")):
        logs.write(stream, data)
        logs.order.grew(stream)
    logs.order.close()
    got = logs.read(final=True)
    assert got == [(0, b"cc -c x.c\n"), (1, b"x.c:1: error: nope\n"), (0, b"cc y\n"),
                   (1, b"make: *** [x.o] Error 1\n")]
    size = os.path.getsize(logs.paths["order"])
    assert size == len(HEADER) + 4 * RECORD  # one record a switch of stream


def test_a_stream_that_goes_on_adds_no_record_and_is_shown_as_it_grows(
        tmp_path: Path) -> None:
    logs = Logs(tmp_path)
    for i in range(100):
        logs.write(0, b"line %d\n" % i)
        logs.order.grew(0)
        assert _text(logs.read(final=False)).endswith(b"line %d\n" % i)
    assert os.path.getsize(logs.paths["order"]) == len(HEADER) + RECORD


def test_the_other_stream_unseen_holds_back_the_live_view_until_its_record(
        tmp_path: Path) -> None:
    """stderr grew but the monitor has not said where: the reader shows stdout only up
    to the last record, never past the point the next record will name."""
    logs = Logs(tmp_path)
    logs.write(0, b"a\n")
    logs.order.grew(0)
    logs.write(1, b"E\n")  # not yet seen
    logs.write(0, b"b\n")
    shown = _text(logs.read(final=False))
    assert shown == b""  # ordered: nothing of stdout past the record at 0
    logs.order.grew(1)
    assert _text(logs.read(final=False)) in (b"a\nb\nE\n",)


def test_no_index_is_stdout_then_stderr_and_a_dead_monitor_loses_no_byte(
        tmp_path: Path) -> None:
    logs = Logs(tmp_path)
    logs.write(0, b"out\n")
    logs.order.grew(0)
    logs.write(1, b"err\n")  # the monitor was SIGKILLed: never recorded
    logs.write(0, b"more\n")
    assert _text(logs.read(final=True)) == b"out\nmore\nerr\n"
    os.unlink(logs.paths["order"])
    assert logs.read(final=False) == [(0, b"out\nmore\n")]
    assert _text(logs.read(final=True)) == b"out\nmore\nerr\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.binary(min_size=1, max_size=7),
                          st.booleans(), st.integers(0, 40), st.integers(1, 20)),
                min_size=1, max_size=40))
def test_any_interleaving_read_in_any_chunks_is_byte_exact_and_never_changes(
        tmp_path_factory: object, steps: list[tuple[int, bytes, bool, int, int]]) -> None:
    """Writes to either stream, the monitor looking or not after each, a reader
    following in chunks of any size: what it has shown is a prefix of every later
    read, each stream's bytes come out whole and in order, and once the exec ended
    everything is there."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tether-order-") as tmp:
        logs = Logs(Path(tmp))
        shown = b""
        seen: list[bytes] = []
        streams: dict[int, bytes] = {0: b"", 1: b""}
        written = {0: b"", 1: b""}
        for stream, data, look, _, chunk in steps:
            logs.write(stream, data)
            written[stream] += data
            if look:
                logs.order.grew(stream)
            while True:  # a follower: from where it is, in chunks
                parts = logs.read(final=False, offset=len(shown), limit=chunk)
                if not parts:
                    break
                for s, d in parts:
                    streams[s] += d
                shown += _text(parts)
            seen.append(_text(logs.read(final=False)))  # a reader from the start
        logs.order.close()
        while parts := logs.read(final=True, offset=len(shown), limit=7):
            for s, d in parts:
                streams[s] += d
            shown += _text(parts)
        assert streams == written  # byte-exact, each stream in its order
        assert _text(logs.read(final=True)) == shown
        assert all(shown.startswith(early) for early in seen)  # never taken back
        for offset in range(0, len(shown) + 1, 3):
            assert _text(logs.read(final=True, offset=offset)) == shown[offset:]


def test_inotify_sees_the_switches_and_a_stream_that_goes_on_wakes_nobody(
        tmp_path: Path) -> None:
    """The monitor's real watch (inotify, through ``_ctypes``): only the log other than
    the last one written is watched, so a command writing one stream on and on makes no
    event; a write to the other is seen, in order, and flips the watch."""
    import select

    logs = Logs(tmp_path)
    os.close(logs.order.index)
    order = Order(logs.paths)
    assert order.open() >= 0, "inotify is not to be had here"
    poll = select.poll()
    poll.register(order.notify, select.POLLIN)

    def settle() -> bool:
        """Handle what inotify says; whether it said anything."""
        said = bool(poll.poll(200))
        if said:
            order.ready()
        return said

    logs.write(0, b"one\n")
    assert settle()
    while settle():  # the removed watch's own last word (IN_IGNORED)
        pass
    for i in range(50):  # stdout on and on: its log is not watched any more
        logs.write(0, b"more %d\n" % i)
    assert not settle()
    logs.write(1, b"ERR\n")
    assert settle()
    logs.write(0, b"two\n")
    assert settle()
    order.close()
    got = logs.read(final=True)
    assert [s for s, _ in got] == [0, 1, 0]
    assert got[1] == (1, b"ERR\n") and got[2] == (0, b"two\n")
