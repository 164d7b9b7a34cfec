"""Files in places a sandbox or an agent can write (a workspace, a worktree's
``.agent``, a provider's config): what is there may have been swapped for a symlink,
a FIFO or a device since anyone looked. One way to open such a file, and one way to
replace one, for everyone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from typing import BinaryIO


class NotRegular(Exception):
    """The name is a symlink, a FIFO, a device, a directory, or too large; ``reason``
    says which, for the caller's own error."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def open_regular(path: str, *, dir_fd: int | None = None,
                 max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` (relative to ``dir_fd`` if given) for reading, only if it is a
    regular file (of at most ``max_bytes``): never through a symlink at its last
    component, never blocking on a FIFO. FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:  # ELOOP: a symlink
        raise NotRegular(path, f"cannot be opened safely: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(path, "not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        os.close(fd)
        raise NotRegular(path, f"larger than {max_bytes} bytes")
    return os.fdopen(fd, "rb")



def replace_at(dir_fd: int, name: str, data: bytes, *, durable: bool) -> None:
    """Replace ``name`` in the directory ``dir_fd`` with ``data``: a new temporary file
    (``<name>.tmp-<hex>``, never opened through a planted symlink), (fsync), rename,
    (fsync the directory). Per call, not per process, so threads never share a tmp."""
    for _ in range(100):
        tmp = f"{name}.tmp-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name for {name}")
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if durable:
        os.fsync(dir_fd)
