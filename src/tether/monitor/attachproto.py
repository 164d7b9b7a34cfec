"""The attach protocol's frames, shared by the monitor and the SDK. Standard library only.

After a JSON line ``{"op": "attach", ...}`` and its JSON reply, both directions
carry frames: a type byte, a 4-byte big-endian payload length, the payload.
A client that passed its terminal with the attach line (``"terminal": true``, the fd
in ``SCM_RIGHTS``) and was answered ``"terminal": true`` gets no DATA frames: the
monitor writes the output to that terminal and reads its keys itself.
"""

from __future__ import annotations

import struct

DATA = b"d"  # both ways: terminal output / typed input
RESIZE = b"r"  # client -> monitor: rows, cols as two big-endian uint16
EXIT = b"x"  # monitor -> client: the exit record as JSON; the monitor then closes
DETACH = b"q"  # client -> monitor: leave; the program is not disturbed. monitor -> client
# (a client that passed its terminal): the user typed the detach keys; the monitor has
# stopped using the terminal and closes the connection
EOF = b"e"  # client -> monitor: close the program's stdin (no-terminal execs)

HEADER = struct.Struct(">cI")
SIZE = struct.Struct(">HH")
MAX_FRAME = 1024 * 1024
DEFAULT_REPLAY = 64 * 1024


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def split(buf: bytearray) -> tuple[bytes, bytes] | None:
    """Take one complete frame off the front of ``buf``: (kind, payload), or None."""
    if len(buf) < HEADER.size:
        return None
    kind, size = HEADER.unpack_from(buf)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    end = HEADER.size + size
    if len(buf) < end:
        return None
    payload = bytes(buf[HEADER.size:end])
    del buf[:end]
    return kind, payload
