"""The host I/O of :mod:`tether.agent.worktree`: paths, the lock, atomic writes, reads.

The worktree, and its ``.agent`` directory, is the agent's to write: everything
here works through directory descriptors, never follows a symlink the agent may
have planted, never blocks on a FIFO and never reads an unbounded file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import time
from collections.abc import Iterator
from typing import TypeAlias

from tether.agent.worktree.errors import LockTimeout, Malformed, NotFound, WorktreeError
from tether.hostio.atomic import fsync_dir
from tether.hostio.untrusted import NotRegular, open_regular, replace_at

__all__ = [
    "AGENT_DIR",
    "HEARTBEAT_FILE",
    "LOCK_FILE",
    "MALFORMED_FILE",
    "MAX_STATE_BYTES",
    "STATE_FILE",
    "PathArg",
    "heartbeat_path",
    "state_path",
]

AGENT_DIR = ".agent"
STATE_FILE = "state.json"
HEARTBEAT_FILE = "heartbeat.json"
LOCK_FILE = "state.json.lock"
# Where a malformed state.json is kept when it is deliberately replaced (forensics).
MALFORMED_FILE = "state.json.malformed"

PathArg: TypeAlias = str | os.PathLike[str]


# --------------------------------------------------------------------------- paths


def state_path(worktree: PathArg) -> str:
    """``<worktree>/.agent/state.json``."""
    return os.path.join(os.fspath(worktree), AGENT_DIR, STATE_FILE)


def heartbeat_path(worktree: PathArg) -> str:
    """``<worktree>/.agent/heartbeat.json``."""
    return os.path.join(os.fspath(worktree), AGENT_DIR, HEARTBEAT_FILE)


def _ensure_agent_dir(worktree: PathArg) -> str:
    """Create ``.agent/`` (durably) if needed; the worktree itself must already exist.

    ``os.mkdir`` rather than ``makedirs``: a mistyped worktree path fails with
    FileNotFoundError instead of silently growing a directory tree.
    """
    agent_dir = os.path.join(os.fspath(worktree), AGENT_DIR)
    try:
        os.mkdir(agent_dir, 0o750)
    except FileExistsError:
        if os.path.islink(agent_dir):  # the agent may plant one: never write through it
            raise WorktreeError(f"{agent_dir} is a symlink; refusing to write agent state "
                                "through it", agent_dir) from None
        return agent_dir
    fsync_dir(os.fspath(worktree))
    return agent_dir


# --------------------------------------------------------------------------- files


def _atomic_write(path: str, data: bytes, *, durable: bool) -> None:
    """tmp in the same directory + (fsync) + rename + (fsync dir).

    Not ``monitor.files.atomic_write``: its tmp name is per process, and two threads
    of one process writing the same heartbeat would share it. The ``<name>.tmp-*``
    pattern is the Go store's, so leftovers of either are swept the same way.
    """
    directory, name = os.path.split(path)
    dfd = _dir_fd(directory)  # `.agent` is the agent's to swap: use what it is now
    try:
        replace_at(dfd, name, data, durable=durable)
    finally:
        os.close(dfd)


def _dir_fd(directory: str) -> int:
    """A descriptor of ``directory`` itself, never of what a symlink there points to."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:  # ELOOP / ENOTDIR: swapped for a symlink or a file
        raise WorktreeError(f"{directory} is not a directory ({e.strerror}); refusing to "
                            "write agent state through it", directory) from None


def _sweep_tmp(agent_dir: str, name: str, *, min_age: float = 0.0) -> None:
    """Remove ``<name>.tmp-*`` left by writers killed mid-write.

    For ``state.json`` this runs with the state lock held: every state writer holds
    it, so no tmp file seen then belongs to a live write. Heartbeat writers take no
    lock, so their tmp files are only removed once ``min_age`` seconds old.
    """
    prefix = f"{name}.tmp-"
    cutoff = time.time() - min_age
    try:
        dfd = _dir_fd(agent_dir)
    except (OSError, WorktreeError):
        return
    try:
        for entry in os.listdir(dfd):
            if not entry.startswith(prefix):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
                if min_age <= 0 or st.st_mtime < cutoff:
                    os.unlink(entry, dir_fd=dfd)
    finally:
        os.close(dfd)


MAX_STATE_BYTES = 64 * 1024 * 1024  # bounded; agentfactory's files are a few hundred bytes


def _read_bytes(path: str) -> bytes:
    """The worktree is the agent's to write: never block on a FIFO, never follow a
    planted symlink, never read a device or a huge file."""
    try:
        dfd = _dir_fd(os.path.dirname(path))
    except FileNotFoundError:
        raise NotFound(f"{path} not found", path) from None
    try:
        f = open_regular(os.path.basename(path), dir_fd=dfd, max_bytes=MAX_STATE_BYTES)
    except FileNotFoundError:
        raise NotFound(f"{path} not found", path) from None
    except NotRegular as e:
        raise Malformed(f"{path}: {e.reason}", path, e.reason) from None
    finally:
        os.close(dfd)
    with f:
        return f.read()


_held = threading.local()


@contextlib.contextmanager
def _locked(worktree: PathArg, timeout: float | None = None) -> Iterator[str]:
    """Hold ``flock(LOCK_EX)`` on ``.agent/state.json.lock``; yields the ``.agent`` dir.

    A separate lock file (never renamed) because the state file's inode changes on
    every write. With ``timeout`` (seconds) give up with :class:`LockTimeout` rather
    than wait for ever: the daemon must not hang on a lock an agent's process holds.
    Each acquisition opens its own descriptor, so threads of one process exclude each
    other too. Re-entry from the same thread (an ``update``
    callback calling ``write``) would deadlock on flock, so it raises instead.
    """
    agent_dir = _ensure_agent_dir(worktree)
    lock_path = os.path.join(os.path.realpath(agent_dir), LOCK_FILE)
    held: set[str] = getattr(_held, "paths", None) or set()
    _held.paths = held
    if lock_path in held:
        raise RuntimeError(f"{lock_path} is already held by this thread (re-entrant update?)")
    dfd = _dir_fd(agent_dir)
    try:  # not through a planted symlink, and never blocking on a FIFO
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                     | os.O_NONBLOCK, 0o600, dir_fd=dfd)
    except OSError as e:
        raise WorktreeError(f"cannot open {lock_path} safely: {e.strerror}",
                            lock_path) from None
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WorktreeError(f"{lock_path} is not a regular file", lock_path)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(lock_path, timeout) from None
                    time.sleep(0.01)
        held.add(lock_path)
        try:
            yield agent_dir
        finally:
            held.discard(lock_path)
    finally:
        os.close(fd)  # releases the flock
