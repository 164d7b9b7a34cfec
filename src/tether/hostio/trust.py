"""Whether a tether home can be trusted, as ssh decides for ``~/.ssh``.

Whoever can write the home (or any directory above it) can swap ``tether.sock`` for
their own listener, which then receives every ``tether run``'s environment, or plant
``daemon.log`` as a symlink so that our daemon appends to a file of their choosing.
So a home is used only when it is owned by us and writable by nobody else, and each
directory above it is owned by root or by us and writable by nobody else — except a
sticky directory owned by root (``/tmp``), where others may add names but never
rename or remove ours. Every symlink on the way must be owned by root or by us.

Once the home passes, only we (and root) can add or replace its entries; the files
we open there are still opened without following symlinks (``open_private``), in
case something was planted before the home was made private.
"""

from __future__ import annotations

import os
import pwd
import stat


class UntrustedHome(Exception):
    """The home, or a directory above it, could be written by another user. The
    message names the path and the command that fixes it."""

    def __init__(self, home: str, path: str, problem: str, fix: str) -> None:
        super().__init__(f"refusing the tether home {home}: {path} {problem}; {fix}")
        self.home = home
        self.path = path


def _ancestors(path: str) -> list[str]:
    """``/``, ``/a``, ``/a/b`` … for an absolute ``path`` (excluding ``path`` itself)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _check_parent(home: str, path: str, st: os.stat_result, uid: int) -> None:
    if st.st_uid not in (0, uid):
        raise UntrustedHome(home, path, f"is owned by {_user(st.st_uid)}",
                            "choose a home whose parents are owned by root or by you "
                            f"({_user(uid)}), or run `chown {_user(uid)} {path}`")
    if stat.S_ISLNK(st.st_mode):
        return  # its target is checked on the resolved path
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
        raise UntrustedHome(home, path, "is writable by group or others",
                            f"run `chmod go-w {path}`")


def _check_home(home: str, path: str, st: os.stat_result, uid: int) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedHome(home, path, "is not a directory", "choose another --home")
    if st.st_uid != uid:
        raise UntrustedHome(home, path, f"is owned by {_user(st.st_uid)}, not by you "
                            f"({_user(uid)})",
                            f"run `chown {_user(uid)} {path}` if you trust its contents, "
                            "or choose another --home")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedHome(home, path, "is writable by group or others",
                            f"run `chmod 700 {path}`")


def check_home(home: str | os.PathLike[str], uid: int | None = None) -> None:
    """Raise ``UntrustedHome`` unless ``home`` (which may not exist yet) and every
    directory above it are safe for user ``uid`` (default: ours) to use.

    Both the path as given (its symlinks) and its resolved path are checked."""
    uid = os.geteuid() if uid is None else uid
    given = os.path.abspath(os.fspath(home))
    real = os.path.realpath(given)
    for path in dict.fromkeys(_ancestors(given) + _ancestors(real)):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # not made yet: we will make it, privately
        except NotADirectoryError:
            raise UntrustedHome(given, path, "is not a directory",
                                "choose another --home") from None
        _check_parent(given, path, st, uid)
    try:
        link = os.lstat(given)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(link.st_mode):
        _check_parent(given, given, link, uid)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return  # a dangling symlink: making the home fails, with its own error
    _check_home(given, real, st, uid)


def open_private(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symlink at the last component (``ELOOP``
    becomes a clear ``OSError``), never blocks on a planted FIFO (``O_NONBLOCK``, which
    a regular file ignores) and never hands out another user's file."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if os.path.islink(path):
            raise OSError(e.errno, f"{os.fspath(path)} is a symlink; remove it "
                          "(tether never writes through one)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(f"{os.fspath(path)} is not a regular file of yours; remove it")
    return fd
