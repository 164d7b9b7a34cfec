"""Copying into and out of places a sandbox can write, on the host's own files.

The daemon may run as root, and the workspace is writable from inside the
sandbox, so a sandboxed process can plant symlinks there. Writing into a
sandbox therefore never follows a symlink: the destination's real parent must
stay inside the mapped place, an existing destination may not be a symlink,
and a directory is only ever copied to a new name (never merged into a tree
the sandbox could have prepared).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from typing import BinaryIO

from tether.hostio.beneath import open_dir_beneath
from tether.hostio.copyout import CopyError, fd_path, open_destination, write_tree
from tether.hostio.untrusted import NotRegular, open_regular

__all__ = ["CopyError", "copy_into", "copy_out_of", "copy_path", "final_destination"]


def final_destination(src: str, dst: str) -> str:
    """``docker cp``'s rule: into ``dst`` if it is a directory, else as ``dst``."""
    if os.path.isdir(dst) and not os.path.islink(dst):
        return os.path.join(dst, os.path.basename(src.rstrip("/")))
    return dst


def copy_path(src: str, dst: str, *, forbidden: str) -> int:
    """``cp -a`` of ``src`` to ``dst`` (into it if it is a directory) for the process
    runtime, whose paths are the host's own; never into ``forbidden`` (tether's home).
    Both given paths are resolved once; below them nothing is followed through a
    symlink (a process of the sandbox may have planted one). Returns the bytes copied."""
    src = os.path.abspath(src)
    sparent, sname = os.path.split(src)
    if not sname:
        raise CopyError("tether cp does not copy /")
    if not os.path.lexists(src):
        raise CopyError(f"{src} does not exist", "PATH_NOT_FOUND")
    sfd = os.open(sparent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _write_out(sfd, sname, sname, dst, forbidden, src)
    finally:
        os.close(sfd)


def _write_out(sfd: int, sname: str, base: str, dst: str, forbidden: str,
               what: str) -> int:
    dfd, name = open_destination(base, dst, forbidden)
    try:
        with _not_too_deep(what):
            return write_tree(sfd, sname, dfd, name, os.path.join(fd_path(dfd), name))
    finally:
        os.close(dfd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_into(src: str, root: str, rel: str) -> int:
    """Copy host ``src`` to ``root/rel`` (into it if that is a directory) the way a
    sandbox that is running meanwhile cannot redirect: every step is relative to a
    directory descriptor opened without following symlinks, and nothing existing is
    written through. Returns the bytes copied."""
    if not os.path.lexists(src):
        raise CopyError(f"{src} does not exist", "PATH_NOT_FOUND")
    parts = _parts(rel)
    if not os.path.isdir(root):  # a single-file mount: written in place (a rename would
        return _overwrite_file_mount(src, root)  # leave the sandbox the old inode)
    fd = _walk(root, parts[:-1])
    try:
        name = parts[-1] if parts else None
        if name is not None:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                fd = _descend(fd, name)
                name = None
        with _not_too_deep(src):
            return _copy_one(src, fd, name or os.path.basename(src.rstrip("/")))
    finally:
        os.close(fd)


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CopyError(f"{rel} leaves the sandbox's place")
    return parts


def _open_source(name: str, dir_fd: int | None = None) -> BinaryIO:
    try:
        return open_regular(name, dir_fd=dir_fd)
    except NotRegular as e:
        raise CopyError(f"{name} is {e.reason}") from None


def _overwrite_file_mount(src: str, target: str) -> int:
    with _open_source(src) as i:
        out = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(out, "wb") as o:
            shutil.copyfileobj(i, o)
            return o.tell()


@contextlib.contextmanager
def _not_too_deep(what: str) -> Iterator[None]:
    try:
        yield
    except RecursionError:
        raise CopyError(f"{what} is nested too deeply to copy") from None


def _descend(fd: int, name: str) -> int:
    """The subdirectory's descriptor, in place of ``fd`` (closed on success only: on
    failure the caller still owns it)."""
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        raise CopyError(f"{name} does not exist in the sandbox", "PATH_NOT_FOUND") from None
    except OSError as e:  # ELOOP or ENOTDIR: a symlink or a file where a directory was
        raise CopyError(f"{name} is not a directory of the sandbox ({e.strerror}); tether "
                        "cp does not follow symlinks into one") from None
    os.close(fd)
    return sub


def _copy_one(src: str, dfd: int, name: str) -> int:
    st = os.lstat(src)
    if stat.S_ISDIR(st.st_mode):
        try:
            os.mkdir(name, 0o700, dir_fd=dfd)
        except FileExistsError:
            raise CopyError(f"{name} exists; tether cp copies a directory into a sandbox "
                            "only to a new name") from None
        sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        try:
            total = sum(_copy_one(os.path.join(src, e), sub, e)
                        for e in sorted(os.listdir(src)))
            os.fchmod(sub, stat.S_IMODE(st.st_mode) & 0o777)  # no setuid/setgid/sticky
        finally:
            os.close(sub)
        return total
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), name, dir_fd=dfd)
        return 0
    if not stat.S_ISREG(st.st_mode):
        raise CopyError(f"{src} is not a regular file, a directory or a symlink")
    try:
        old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise CopyError(f"{name} exists and is not a regular file; tether cp does not "
                        "write through a symlink")
    # Source first (nothing is touched if it cannot be read), then a new file under a
    # temporary name, renamed over the old one only once complete.
    with _open_source(src) as i:
        tmp = f".{name}.tether-cp-{secrets.token_hex(4)}"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600, dir_fd=dfd)
        try:
            with os.fdopen(out, "wb") as o:
                shutil.copyfileobj(i, o)
                os.fchmod(o.fileno(), stat.S_IMODE(st.st_mode) & 0o777)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    return st.st_size


def copy_out_of(root: str, rel: str, dst: str, *, forbidden: str) -> int:
    """Copy ``root/rel`` (in a running sandbox) to host ``dst`` (into it if that is a
    directory), reading by directory descriptors: a swapped symlink cannot make the
    daemon read host files, nor a swapped FIFO or device hang or fill the disk; and
    writing the same way below ``dst`` (``copyout``), which may lie in the workspace."""
    parts = _parts(rel)
    if not os.path.isdir(root):  # a single-file mount
        parent = os.open(os.path.dirname(root) or "/", _DIR_FLAGS)
        try:
            base = os.path.basename(root)
            return _write_out(parent, base, base, dst, forbidden, root)
        finally:
            os.close(parent)
    fd = _walk(root, parts[:-1])
    try:
        name = parts[-1] if parts else "."
        return _write_out(fd, name, name if name != "." else os.path.basename(root), dst,
                          forbidden, rel)
    finally:
        os.close(fd)


def _walk(root: str, parts: list[str]) -> int:
    """The directory ``root/parts``, no symlink followed on the way (openat2 where the
    kernel has it, else one ``O_NOFOLLOW`` step at a time: ``hostio.beneath``)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        sub = open_dir_beneath(fd, "/".join(parts))
    except FileNotFoundError:
        raise CopyError(f"{'/'.join(parts)} does not exist in the sandbox",
                        "PATH_NOT_FOUND") from None
    except OSError as e:  # ELOOP or ENOTDIR: a symlink or a file where a directory was
        raise CopyError(f"{'/'.join(parts)} is not a directory of the sandbox "
                        f"({e.strerror}); tether cp does not follow symlinks into one"
                        ) from None
    finally:
        os.close(fd)
    return sub
