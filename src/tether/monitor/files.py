"""The monitor's files (category D): its wire protocol with the daemon. Standard library only.

* handles file — pid and kernel start time of the monitor and of the child,
  written atomically once the child runs (momentary reality, like a VM manager's handles);
* exit file — how the child ended, written atomically *and durably* into blocks
  reserved before the command starts (``<exit>.reserve``), so a disk that fills up
  meanwhile cannot cost the exit status;
* claim file — created with ``O_EXCL`` by whoever decides an exec's fate first
  (a monitor that will start it, or a recovering daemon that fails it), and
  ``flock``-ed by the monitor for its whole life.

Process identity lives in :mod:`tether.hostio.proc`; durable replacement in
:mod:`tether.hostio.atomic`.
"""

from __future__ import annotations

import errno
import os

from tether.hostio.atomic import atomic_write, fsync_dir, write_all
from tether.monitor import tinyjson

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

HANDLES_VERSION = 1
EXIT_VERSION = 1
EXIT_RESERVE = 16384  # bytes kept for the exit record: many times what one takes
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


class FileCorrupt(Exception):
    """A monitor file exists but cannot be understood."""


def _read_json(path: str, what: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        obj = tinyjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise FileCorrupt(f"{what} file {path} is corrupt ({len(raw)} bytes): {e}") from None
    if not isinstance(obj, dict):
        raise FileCorrupt(f"{what} file {path} is corrupt: not a JSON object")
    return obj


def _require_int(obj: dict[str, Any], key: str, what: str, path: str,
                 optional: bool = False) -> int | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise FileCorrupt(f"{what} file {path} is corrupt: field {key!r} is {value!r}")
    return value


def write_handles(path: str, handles: dict[str, Any],
                  ahead: tuple[int, int] | None = None) -> None:
    """Write the handles file, whole or not at all. ``ahead``: an unnamed file made for it
    and its directory's fd (a zygote's), written then named (the name is new: an exec's
    handles are written once)."""
    data = tinyjson.dumps({"version": HANDLES_VERSION, **handles}).encode()
    if ahead is not None:
        write_all(ahead[0], data, 0)
        name(ahead[0], os.path.basename(path), ahead[1])
        return
    # Not fsynced: processes do not survive a power cut, so neither need their handles.
    atomic_write(path, data, durable=False)


def read_handles(path: str) -> dict[str, Any] | None:
    """The handles dict, None if absent; :class:`FileCorrupt` if unreadable."""
    obj = _read_json(path, "handles")
    if obj is None:
        return None
    for who in ("monitor", "child"):
        sub = obj.get(who)
        if not isinstance(sub, dict):
            raise FileCorrupt(f"handles file {path} is corrupt: no {who!r} entry")
        _require_int(sub, "pid", "handles", path)
        _require_int(sub, "start_time", "handles", path)
    return obj


def reserve_exit(path: str) -> None:
    """Allocate the exit file's blocks now, under ``<exit>.reserve``: writing the status
    then needs no new block. Raises OSError (ENOSPC) when there is no room even for that."""
    reserve = path + ".reserve"
    fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, EXIT_RESERVE)
        except OSError as e:
            if e.errno in NO_ROOM:
                raise
            write_all(fd, bytes(EXIT_RESERVE), 0)  # a filesystem without fallocate
    except BaseException:
        os.close(fd)
        os.unlink(reserve)
        raise
    os.close(fd)


def unnamed(directory: int, size: int = 0) -> int:
    """A new unnamed file (``O_TMPFILE``) in the directory open as ``directory``, with
    ``size`` bytes allocated: made before an exec arrives, named by :func:`name` once it
    does (a killed monitor leaves nothing behind). Raises OSError (ENOSPC; EOPNOTSUPP
    where the filesystem has no unnamed files)."""
    fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=directory)
    if size:
        try:
            os.posix_fallocate(fd, 0, size)
        except BaseException:
            os.close(fd)
            raise
    return fd


def name(fd: int, path: str, directory: int | None = None) -> None:
    """Give the unnamed file ``fd`` the name ``path`` (relative to ``directory`` if
    given); FileExistsError if it is taken: a name appears whole, and only once."""
    # linkat(AT_SYMLINK_FOLLOW): link(2) would link the /proc symlink itself (EXDEV).
    if directory is None:
        directory = os.open(os.path.dirname(path) or ".",
                            os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.link(f"/proc/self/fd/{fd}", os.path.basename(path), dst_dir_fd=directory)
        finally:
            os.close(directory)
        return
    os.link(f"/proc/self/fd/{fd}", path, dst_dir_fd=directory)


def write_exit(path: str, status: dict[str, Any], reserved: int | None = None) -> None:
    """Write the exit file into its reservation (or, without one, atomically anew):
    fsynced, then renamed into place, so readers see no file or the whole one.
    ``reserved``: the reservation as an unnamed file (a zygote's), named at the end."""
    data = tinyjson.dumps({"version": EXIT_VERSION, **status}).encode()
    if reserved is not None:
        write_all(reserved, data, 0)
        os.ftruncate(reserved, len(data))
        os.fsync(reserved)
        try:
            name(reserved, path)
        except FileExistsError:
            pass  # an earlier try named it, then failed at the directory's fsync
        fsync_dir(os.path.dirname(path) or ".")
        return
    reserve = path + ".reserve"
    try:
        fd = os.open(reserve, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        atomic_write(path, data, durable=True)
        return
    try:
        write_all(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(reserve, path)
    fsync_dir(os.path.dirname(path) or ".")


def read_exit(path: str) -> dict[str, Any] | None:
    """The exit status dict, None if absent; :class:`FileCorrupt` if unreadable."""
    obj = _read_json(path, "exit")
    if obj is None:
        return None
    _require_int(obj, "exit_code", "exit", path, optional=True)
    _require_int(obj, "signal", "exit", path, optional=True)
    if obj.get("exit_code") is None and obj.get("signal") is None:
        raise FileCorrupt(f"exit file {path} is corrupt: neither exit_code nor signal")
    if not isinstance(obj.get("ended_at"), (int, float)):
        raise FileCorrupt(f"exit file {path} is corrupt: no ended_at")
    return obj


def claim(path: str, owner: str, *, locked: bool = False) -> int | None:
    """Create the claim file exclusively; return its fd, or None if already claimed.

    With ``locked`` (a monitor) the file appears already ``flock``-ed: it is made
    and locked under a private name, then ``link``-ed into place, which fails if
    the claim exists. Nobody can ever see a monitor's claim unlocked while it lives.
    """
    if not locked:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return None
        os.write(fd, owner.encode())
        return fd
    import fcntl

    tmp = claim_tmp(path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, owner.encode())
    try:
        os.link(tmp, path)
    except FileExistsError:
        os.close(fd)
        return None
    finally:
        os.unlink(tmp)
    return fd


def unnamed_claim(directory: int, owner: str) -> int:
    """A monitor's claim made ahead, unnamed, ``flock``-ed: :func:`claim_unnamed` names it.
    Raises OSError."""
    import fcntl

    fd = unnamed(directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, owner.encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def claim_unnamed(fd: int, path: str, directory: int) -> bool:
    """Name a claim made by :func:`unnamed_claim` ``path``: False if the exec is claimed
    already (then ``fd`` is closed). Like :func:`claim` with ``locked``: it appears locked."""
    try:
        name(fd, os.path.basename(path), directory)
    except FileExistsError:
        os.close(fd)
        return False
    return True


def claim_tmp(path: str, pid: int) -> str:
    """The private name monitor ``pid`` locks its claim under before linking it."""
    return f"{path}.{pid}.tmp"


def claim_owner(path: str) -> str | None:
    """Who wrote the claim ("monitor ..." or "daemon ..."), or None if there is none."""
    try:
        with open(path) as f:
            return f.read().strip() or "unknown"
    except FileNotFoundError:
        return None


def claim_is_held(path: str) -> bool:
    """True while a live monitor holds the claim's flock."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
