"""Writing a copy onto the host, below the destination directory the user chose.

The destination may lie in a sandbox's workspace, where a sandboxed process can
plant symlinks (or swap a directory for one while the copy runs), and the daemon
may run as root. So "beneath" is anchored to the user's destination directory,
resolved once (its given prefix may hold symlinks, as ``/tmp`` does on some
systems); below it every step is a directory descriptor opened ``O_NOFOLLOW``: a
symlink where a directory is merged or a file replaced is refused, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tarfile
from typing import IO

from tether.hostio.beneath import open_dir_beneath, split
from tether.hostio.paths import is_within

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CopyError(Exception):
    def __init__(self, message: str, code: str = "INVALID_PATH") -> None:
        super().__init__(message)
        self.code = code


def fd_path(fd: int) -> str:
    """The real path of an open directory, as the kernel has it."""
    return os.readlink(f"/proc/self/fd/{fd}")


def open_destination(src_name: str, dst: str, forbidden: str) -> tuple[int, str]:
    """``docker cp``'s rule, resolved once: (a descriptor of the directory to write in,
    the name to write there) — into ``dst`` if it is a directory, else as ``dst``. An
    existing ``dst`` that is a symlink is refused, as is anything in ``forbidden``."""
    dst = os.path.abspath(dst)
    parent, base = os.path.split(dst)
    try:
        pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise CopyError(f"{parent} does not exist", "PATH_NOT_FOUND") from None
    anchor, name = pfd, base
    if base:
        try:
            anchor, name = os.open(base, _DIR_FLAGS, dir_fd=pfd), src_name
        except OSError as e:
            if e.errno == errno.ELOOP:
                os.close(pfd)
                raise CopyError(f"{dst} is a symlink; tether cp does not write through "
                                "one") from None
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                os.close(pfd)
                raise
        else:
            os.close(pfd)
    else:  # dst is "/"
        name = src_name
    try:
        if is_within(os.path.join(fd_path(anchor), name), forbidden):
            raise CopyError(f"{dst} is inside tether's home {forbidden}; copy elsewhere")
        if stat.S_ISLNK(_lstat(anchor, name, stat.S_IFREG)):
            raise CopyError(f"{os.path.join(dst, name) if anchor != pfd else dst} is a "
                            "symlink; tether cp does not write through one")
    except BaseException:
        os.close(anchor)
        raise
    return anchor, name


def _lstat(dfd: int, name: str, missing: int) -> int:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return missing


def write_tree(sfd: int, sname: str, dfd: int, dname: str, where: str) -> int:
    """Copy ``sname`` below the directory ``sfd`` to ``dname`` below ``dfd``, neither
    side followed through a symlink; a directory is merged into an existing one.
    Returns the bytes of regular files written. ``where`` names ``dname`` in errors."""
    from tether.hostio.untrusted import NotRegular, open_regular

    try:
        st = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
    except FileNotFoundError:
        raise CopyError(f"{sname} does not exist", "PATH_NOT_FOUND") from None
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(sname, dir_fd=sfd), dname, dir_fd=dfd)
        return 0
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(sname, _DIR_FLAGS, dir_fd=sfd)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(dname, stat.S_IMODE(st.st_mode) & 0o777 | 0o700, dir_fd=dfd)
            out = _open_dir(dfd, dname, where)
            try:
                return sum(write_tree(sub, e, out, e, os.path.join(where, e))
                           for e in sorted(os.listdir(sub)))
            finally:
                os.close(out)
        finally:
            os.close(sub)
    if not stat.S_ISREG(st.st_mode):
        raise CopyError(f"{sname} is not a regular file, a directory or a symlink")
    if not stat.S_ISREG(_lstat(dfd, dname, stat.S_IFREG)):
        raise CopyError(f"{where} exists and is not a regular file (a symlink?); tether cp "
                        "does not write through a symlink")
    try:
        src = open_regular(sname, dir_fd=sfd)
    except NotRegular as e:
        raise CopyError(f"{sname} is {e.reason}") from None
    with src:
        return write_file(src, dfd, dname, stat.S_IMODE(st.st_mode) & 0o777)


def _open_dir(dfd: int, name: str, where: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CopyError(f"{where} exists and is not a directory (a symlink?); tether cp "
                            "does not write through a symlink") from None
        raise


def write_file(src: IO[bytes], dfd: int, name: str, mode: int) -> int:
    """A new file under a temporary name (``O_EXCL | O_NOFOLLOW``, ``mode`` under the
    umask, removed on failure) renamed over ``name`` once complete: never written
    through a planted symlink, FIFO or hard link."""
    tmp = f".{name}.tether-cp-{secrets.token_hex(4)}"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  mode, dir_fd=dfd)
    try:
        with os.fdopen(out, "wb") as o:
            shutil.copyfileobj(src, o)
            size = o.tell()
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    return size


def write_tar(tar: tarfile.TarFile, dfd: int, name: str, where: str) -> int:
    """Extract an archive of one entry (a sandbox's ``docker cp`` tar) as ``name``
    below ``dfd``, member by member, every parent reached by descriptor with no symlink
    followed (so a directory swapped for one mid-way is refused, not written through).
    The rules of tarfile's ``"data"`` filter, except that symlinks are kept as links:
    no devices or FIFOs, no owners, no setuid bits, nothing outside ``name``. Every
    member is checked before anything is written. ``where`` names ``name`` in errors.
    Returns the bytes of the regular files written (what ``tether cp`` reports)."""
    members = [(m, _below(m.name, name)) for m in tar.getmembers()]
    if len({split(m.name)[0] for m, _ in members}) > 1:
        raise CopyError("docker returned an archive of more than one entry", "COPY_FAILED")
    for m, _ in members:
        if not (m.isdir() or m.isreg() or m.issym() or m.islnk()):
            raise CopyError(f"{m.name} is a device or a FIFO in the sandbox; tether cp does "
                            "not copy one", "COPY_FAILED")
        if m.islnk():
            _below(m.linkname, name)
    for m, parts in members:
        pfd = open_dir_beneath(dfd, "/".join(parts[:-1]))
        try:
            _write_member(tar, m, pfd, parts[-1], os.path.join(where, *parts[1:]), dfd, name)
        finally:
            os.close(pfd)
    return sum(m.size for m, _ in members if m.isreg())


def _below(member: str, name: str) -> list[str]:
    """A member's path below the destination directory, its first component renamed
    ``name`` (the archive holds one entry); an absolute path or ``..`` is refused."""
    try:
        parts = split(member)
    except OSError:
        parts = []
    if not parts:
        raise CopyError(f"docker returned an unexpected archive (member {member!r})",
                        "COPY_FAILED")
    return [name, *parts[1:]]


def _write_member(tar: tarfile.TarFile, m: tarfile.TarInfo, pfd: int, leaf: str,
                  where: str, dfd: int, name: str) -> None:
    mode = stat.S_IMODE(m.mode) & 0o755  # no setuid/setgid/sticky, no group/other write
    if m.isdir():
        with contextlib.suppress(FileExistsError):
            os.mkdir(leaf, mode | 0o700, dir_fd=pfd)
        os.close(_open_dir(pfd, leaf, where))
        return
    if m.issym():
        os.symlink(m.linkname, leaf, dir_fd=pfd)
        return
    if not stat.S_ISREG(_lstat(pfd, leaf, stat.S_IFREG)):
        raise CopyError(f"{where} exists and is not a regular file (a symlink?); tether cp "
                        "does not write through a symlink")
    if m.islnk():  # to an earlier member, its directory reached beneath dfd again
        target = _below(m.linkname, name)
        tfd = open_dir_beneath(dfd, "/".join(target[:-1]))
        tmp = f".{leaf}.tether-cp-{secrets.token_hex(4)}"
        try:
            os.link(target[-1], tmp, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
        finally:
            os.close(tfd)
        try:
            os.rename(tmp, leaf, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=pfd)
            raise
        return
    src = tar.extractfile(m)
    if src is None:
        raise CopyError(f"{m.name} cannot be read from the archive", "COPY_FAILED")
    with src:
        write_file(src, pfd, leaf, mode | 0o600)
