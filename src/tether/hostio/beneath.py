"""Opening a path below a directory descriptor without following a symlink at any
level, and without leaving the directory: what a sandbox may have planted on the way
cannot redirect the daemon (which may run as root).

``openat2(2)`` with ``RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`` does it in one call
(Linux 5.6+). Python 3.11 has no ``os.openat2``, so it is called through ctypes;
where the kernel lacks it (``ENOSYS``), or seccomp hides it (``EPERM``), the path is
walked one component at a time with ``O_NOFOLLOW | O_DIRECTORY``, which gives the
same answer: ``ELOOP`` for a symlink, ``ENOTDIR`` for a file on the way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_state: dict[str, bool] = {}  # "openat2": whether the kernel answered it


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int | None:
    """The descriptor, or None when the kernel has no usable openat2."""
    if _SYS_OPENAT2 is None or _state.get("openat2") is False:
        return None
    mode = mode if flags & os.O_CREAT else 0  # else EINVAL
    how = _OpenHow(flags | os.O_CLOEXEC, mode, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)
    fd = _syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd),
                  ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                  ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        _state["openat2"] = True
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and "openat2" not in _state:
        _state["openat2"] = False  # never worked here: the walk from now on
        return None
    raise OSError(err, os.strerror(err), path)


def has_openat2() -> bool:
    """Whether this kernel resolves with openat2 (asked once, on a harmless open)."""
    if "openat2" not in _state:
        fd = os.open("/", _DIR_FLAGS)
        try:
            got = _openat2(fd, ".", _DIR_FLAGS, 0)
            if got is not None:
                os.close(got)
        finally:
            os.close(fd)
    return _state.get("openat2", False)


def split(rel: str) -> list[str]:
    """``rel``'s components; ``..`` and an absolute path are refused (``EXDEV``, as
    ``RESOLVE_BENEATH`` does)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts:
        raise OSError(errno.EXDEV, "leaves the directory it is resolved beneath", rel)
    return parts


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o600, *,
                 walk: bool = False) -> int:
    """``openat(dir_fd, rel, flags | O_NOFOLLOW)`` with no symlink followed at any
    component and nothing outside ``dir_fd`` reached. ``walk`` forces the fallback
    (for tests). Raises OSError: ``ELOOP`` (a symlink), ``ENOTDIR``, ``EXDEV``, …"""
    parts = split(rel)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not walk:
        fd = _openat2(dir_fd, "/".join(parts) or ".", flags, mode)
        if fd is not None:
            return fd
    if not parts:
        return os.open(".", flags, mode, dir_fd=dir_fd)
    cur = dir_fd
    try:
        for p in parts[:-1]:
            nxt = _step(cur, p)
            if cur != dir_fd:
                os.close(cur)
            cur = nxt
        return os.open(parts[-1], flags, mode, dir_fd=cur)
    finally:
        if cur != dir_fd:
            os.close(cur)


def _step(fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except NotADirectoryError:  # O_DIRECTORY on a symlink: say ELOOP, as openat2 does
        if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def open_dir_beneath(dir_fd: int, rel: str, *, walk: bool = False) -> int:
    """A directory below ``dir_fd``, every component reached without a symlink."""
    return open_beneath(dir_fd, rel, _DIR_FLAGS, 0, walk=walk)
