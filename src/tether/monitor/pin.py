"""Pinning a command that runs below the monitor's child (bubblewrap's), for its own status.

bwrap runs the command two processes down (bwrap → the sandbox's init → the command) and
exits with the shell's encoding of the command's end: 128+N for a death by signal N, the
same as a real ``exit 128+N``. A ``gated`` launch (``Launch.gated``) starts the command
behind a gate, ``read _ <&3; exec "$@"``: before opening it the monitor finds the gate's
process (it is the command once the gate ``exec``\\ s), holds a pidfd to it, and learns its
process group. Then the monitor signals that group (the command's, as in the process
runtime; looked up again at each signal, :meth:`Pin.group_now`) and, once the child ends,
asks the kernel for the command's own wait status
(``PIDFD_GET_INFO`` with ``PIDFD_INFO_EXIT``, Linux 6.15+). When any step fails (older
kernel, bwrap died early, the gate never appeared) the child's own status stands.

Standard library only, and only modules the monitor already imports (``fcntl`` comes with
the terminal, ``struct`` with the attach protocol).
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import time

#: The fd the gate reads in the child; the monitor writes one line to it to open it.
GATE_FD = 3
#: _IOWR(0xFF, 11, struct pidfd_info) with the first (64-byte) version of the struct.
PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
PIDFD_INFO_EXIT = 1 << 3
EXIT_CODE_OFFSET = 8 + 8 + 11 * 4  # mask, cgroupid, eleven u32 ids
#: How long to look for the gate (bwrap sets the sandbox up first: usually milliseconds);
#: well within the daemon's wait for the start report (10 s).
FIND_TIMEOUT = 3.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def gate_pipe() -> tuple[int, int]:
    """The gate's pipe (both ends close-on-exec; the spawn's dup2 opens the read end as
    fd 3 in the child), its read end never fd 3 itself (a dup2 onto itself is a no-op
    that would leave it close-on-exec)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    if r == GATE_FD:
        r2 = fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, GATE_FD + 1)
        os.close(r)
        r = r2
    return r, w


def open_gate(gate_w: int) -> None:
    """Let the command start: one line, then close (an early EOF means: never start)."""
    try:
        os.write(gate_w, b"\n")
    except OSError:
        pass  # the gate is gone (the child died): its status says why
    os.close(gate_w)


class Pin:
    """The command's pidfd and process group, once the gate is found; else nothing."""

    def __init__(self) -> None:
        self.pidfd: int | None = None
        self.pid: int | None = None
        self.pgid: int | None = None

    def find(self, child: int) -> None:
        """Find the gate's process (the child's grandchild) and pin it; the monitor
        opens the gate afterwards (:func:`open_gate`), whether it was found or not."""
        deadline = time.monotonic() + FIND_TIMEOUT
        try:
            while time.monotonic() < deadline:
                if os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    return  # bwrap failed; its own status says why
                grand = [g for c in _children(child) for g in _children(c)]
                if len(grand) == 1:
                    fd = os.pidfd_open(grand[0])
                    if grand == [g for c in _children(child) for g in _children(c)]:
                        self.pidfd, self.pid, self.pgid = fd, grand[0], os.getpgid(grand[0])
                        return  # still the gate's child: blocked on the gate, not reused
                    os.close(fd)
                time.sleep(0.0005)  # bwrap reaches the gate in ~2 ms: poll finely
        except OSError:
            pass

    def group_now(self) -> int | None:
        """The command's process group now, or None once it ended. A shell on a terminal
        moves itself to a group of its own (job control) after it was pinned; the group it
        left is bwrap's, the terminal's session leader, whose death would hang it up."""
        if self.pidfd is None or self.pid is None:
            return None
        try:
            pgid = os.getpgid(self.pid)
        except OSError:
            return None
        # Alive after the lookup (its pidfd not readable): the pid was not reused.
        return None if select.select([self.pidfd], [], [], 0)[0] else pgid

    def status(self, wait: float = 2.0) -> tuple[int | None, int | None] | None:
        """The command's (exit code, signal), or None when the kernel cannot say.

        The child may end before the command is reaped (bwrap killed: the kernel then
        kills the sandbox), so wait up to ``wait`` seconds for that."""
        if self.pidfd is None:
            return None
        select.select([self.pidfd], [], [], wait)
        deadline = time.monotonic() + wait
        while True:
            buf = bytearray(struct.pack("=Q", PIDFD_INFO_EXIT) + bytes(56))
            try:
                fcntl.ioctl(self.pidfd, PIDFD_GET_INFO, buf)
            except OSError:
                return None  # a kernel without PIDFD_GET_INFO
            if struct.unpack_from("=Q", buf)[0] & PIDFD_INFO_EXIT:
                break
            if time.monotonic() >= deadline:
                return None  # readable at exit, reaped a moment later: not yet
            time.sleep(0.005)
        st = struct.unpack_from("=i", buf, EXIT_CODE_OFFSET)[0]
        if os.WIFSIGNALED(st):
            return (None, os.WTERMSIG(st))
        return (os.WEXITSTATUS(st), None)
