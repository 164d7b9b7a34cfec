"""Replacing a file so that readers see the old one or the new one, never a mix, and
(when ``durable``) so that the new one survives a power cut. ``os`` only: the monitor
writes its exit file with it.
"""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    """Every byte of ``data`` (at ``offset`` with ``pwrite``, else at the file position)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[n:]
        if offset is not None:
            offset += n


def tmp_name(path: str, pid: int) -> str:
    """The temporary that process ``pid``'s :func:`atomic_write` of ``path`` uses (one a
    killed writer leaves behind)."""
    return f"{path}.tmp.{pid}"


def atomic_write(path: str, data: bytes, *, durable: bool = True) -> None:
    """tmp + (fsync) + rename + (fsync dir): readers see the old file or the new one."""
    directory = os.path.dirname(path) or "."
    tmp = tmp_name(path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:  # noqa: SIM105 (no contextlib in the monitor) ENOSPC: leave no scratch file
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory)
