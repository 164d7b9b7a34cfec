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
import stat

from tether.hostio.trust import UntrustedHome, check_home, open_private
from tether.model.layout import HomeLayout


class HomeLocked(Exception):
    def __init__(self, home: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"a tether daemon ({who}) is already running on {home}")
        self.pid = pid


def prepare(layout: HomeLayout) -> None:
    """Check the home is ours alone (``UntrustedHome`` if not), then make it and its
    private directories."""
    check_home(layout.root)
    layout.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(layout.root, 0o700)
    for d in (layout.logs, layout.run, layout.agent_dir):
        private_dir(layout, d)
    for d in (layout.root, layout.logs, layout.run, layout.agent_dir,
              layout.root / "drain", layout.root / "agents", layout.root / "egress",
              layout.root / "egress" / "keys", layout.root / "egress" / "socks"):
        no_symlinks(layout, d)


def no_symlinks(layout: HomeLayout, d: os.PathLike[str]) -> None:
    """Tether makes no symlinks in its home: one there was planted while the home was
    open to others, and writing where it leads (``logs/<sandbox>/`` → ``/etc``) must not
    happen. Once the home is private, nobody else can plant one."""
    try:
        entries = list(os.scandir(d))
    except (FileNotFoundError, NotADirectoryError):
        return
    for e in entries:
        if e.is_symlink():
            raise UntrustedHome(str(layout.root), e.path, "is a symlink (tether makes none "
                                "in its home; it was planted)", f"remove it: `rm {e.path}`")


def private_dir(layout: HomeLayout, d: os.PathLike[str]) -> None:
    """Make ``d`` inside the home, or accept it only as a real directory of ours (not
    a symlink planted while the home was open to others)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UntrustedHome(str(layout.root), os.fspath(d),
                            "is not a directory of yours (a symlink?)",
                            f"remove it: `rm -rf {os.fspath(d)}`")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(d, 0o700)


def check_store(layout: HomeLayout) -> None:
    """SQLite follows symlinks: refuse a store (or its journal files) that is one."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = f"{layout.db}{suffix}"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise UntrustedHome(str(layout.root), path,
                                "is not a regular file of yours (a symlink?)",
                                f"move it away: `mv {path} {path}.suspect`")


class HomeLock:
    def __init__(self, layout: HomeLayout) -> None:
        self.layout = layout
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = open_private(self.layout.lock_file, os.O_RDWR | os.O_CREAT)
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
    """Create-exclusive then rename: never writes through a planted symlink."""
    tmp = layout.pid_file.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    os.rename(tmp, layout.pid_file)


def remove_pid_file(layout: HomeLayout) -> None:
    with contextlib.suppress(FileNotFoundError):
        layout.pid_file.unlink()


def identity(layout: HomeLayout) -> tuple[int, int] | None:
    """The home directory's (device, inode), or None when it is gone: a daemon whose home
    was deleted or replaced serves state nobody can see any more, and must stop."""
    try:
        st = os.stat(layout.root)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino)
