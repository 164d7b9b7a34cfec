"""Process identity for the daemon: ``(pid, start_time)`` checked, then pinned by a pidfd.

Opening a pidfd *then* re-checking the start time closes the race with pid
reuse: from that moment the fd refers to that exact process, and signals sent
through it (``pidfd_send_signal``) can never reach another one.
"""

from __future__ import annotations

import os
import signal

from tether.hostio.proc import is_same_process


def open_verified_pidfd(pid: int, start_time: int) -> int | None:
    """A pidfd for ``pid`` if it is still the process that started at ``start_time``."""
    if pid <= 1:
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    # Any other error (EMFILE above all) says nothing about the process: raise it.
    if not is_same_process(pid, start_time):
        os.close(fd)
        return None
    return fd


def signal_verified_group(pid: int, start_time: int, sig: int) -> bool:
    """Signal the process group led by ``pid``, only if the leader is who we think.

    The leader's pidfd is held across the check and the ``killpg``, so the pid
    (and therefore the pgid) cannot be recycled in between.
    """
    try:
        fd = open_verified_pidfd(pid, start_time)
    except OSError:  # e.g. out of descriptors: refuse rather than risk a bare-pid signal
        return False
    if fd is None:
        return False
    try:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            signal.pidfd_send_signal(fd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        os.close(fd)
