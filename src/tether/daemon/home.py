"""The daemon's home: private directories, the exclusive lock, the PID file.

The lock is an ``flock`` on ``daemon.lock``, taken before anything else and held
for the daemon's whole life; the kernel drops it when the process dies, even by
SIGKILL, so a stale lock cannot exist. The lock file also carries the holder's
pid, so a refused second daemon can name the running one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from tether.model.layout import HomeLayout


class HomeLocked(Exception):
    def __init__(self, home: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"a tether daemon ({who}) is already running on {home}")
        self.pid = pid


def prepare(layout: HomeLayout) -> None:
    for d in (layout.root, layout.logs, layout.run):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(layout.root, 0o700)


class HomeLock:
    def __init__(self, layout: HomeLayout) -> None:
        self.layout = layout
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.layout.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HomeLocked(str(self.layout.root), self.layout.lock_holder()) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


def write_pid_file(layout: HomeLayout) -> None:
    tmp = layout.pid_file.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.rename(tmp, layout.pid_file)


def remove_pid_file(layout: HomeLayout) -> None:
    with contextlib.suppress(FileNotFoundError):
        layout.pid_file.unlink()
