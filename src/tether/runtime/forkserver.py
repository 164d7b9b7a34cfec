"""The daemon's side of the monitor fork server (:mod:`tether.monitor.forkserver`).

``fork`` asks the server for a new monitor and returns it as a :class:`Forked`: its pid,
a pidfd (it is the server's child, not ours: the pidfd says when it ended and signals it
without a pid race), and the daemon's ends of its stdin and stdout pipes. It runs on the
event loop: a request is one non-blocking ``sendmsg``, its answer is read when the socket
turns readable (the server answers in order, each in about a fork's time), so requests
from concurrent starts and refills are in flight together without a thread. A server that
is gone (killed, or silent for ``TIMEOUT``) fails the requests waiting for it and is started
again at the next one; one that cannot be started makes ``fork`` raise ``OSError`` (and is
not tried again for ``RETRY_AFTER``): the caller then starts the monitor from scratch.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass

from tether.monitor.forkserver import FORK_SERVER

#: How long a request may wait for the server's answer before the server is killed.
TIMEOUT = 5.0
#: After the server could not be started, monitors are started from scratch for this long.
RETRY_AFTER = 30.0
_ANCILLARY = socket.CMSG_SPACE(4 * 4)


@dataclass
class Forked:
    pid: int
    pidfd: int
    stdin: int  # the write end of the monitor's stdin
    stdout: int  # the read end of the monitor's stdout


@dataclass
class _Request:
    answer: asyncio.Future[Forked]
    stdin: int
    stdout: int

    def close(self) -> None:
        for fd in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                os.close(fd)


class ForkServer:
    def __init__(self, argv: list[str]) -> None:
        """``argv``: how a monitor is started (``python -I -S run.py``)."""
        self._argv = [*argv, FORK_SERVER]
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._waiting: deque[_Request] = deque()  # sent, in the order the server answers
        self._starting: asyncio.Lock | None = None
        self._old: list[subprocess.Popen[bytes]] = []  # servers we left: to reap
        self._down_until = 0.0
        self.forks = 0  # monitors it made (daemon.status)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _spawn(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        """Start a server (blocking: run in a thread). Raises OSError."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                self._argv, stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, cwd="/")
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return proc, ours

    async def _ensure(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        if time.monotonic() < self._down_until:
            raise OSError("the monitor fork server could not be started lately")
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sock is not None:  # started meanwhile by another request
                return self._sock
            loop = asyncio.get_running_loop()
            try:
                proc, sock = await loop.run_in_executor(None, self._spawn)
            except OSError:
                self._down_until = time.monotonic() + RETRY_AFTER
                raise
            self._proc, self._sock = proc, sock
            loop.add_reader(sock.fileno(), self._answers)
            return sock

    async def fork(self, run: str | None) -> Forked:
        """A new monitor (``run``: the directory it makes an exec's files ahead in, for
        the server to clean up after it). Raises OSError: start it from scratch."""
        sock = await self._ensure()
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        req = _Request(asyncio.get_running_loop().create_future(), in_w, out_r)
        try:
            sock.sendmsg([json.dumps(run).encode()], [(
                socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [in_r, out_w]))])
        except OSError as e:  # gone, or (BlockingIOError) its socket full: not answering
            req.close()
            self._broken()
            raise OSError(f"the monitor fork server does not take requests: {e}") from None
        finally:
            os.close(in_r)
            os.close(out_w)
        self._waiting.append(req)
        try:
            async with asyncio.timeout(TIMEOUT):
                return await req.answer  # cancelled: _answers closes what comes for it
        except TimeoutError:
            self._broken()
            raise OSError(f"the monitor fork server did not answer in {TIMEOUT:g} s") from None

    def _answers(self) -> None:
        """Its socket is readable: hand each answer to the oldest request."""
        while self._sock is not None:
            try:
                data, anc, _flags, _addr = self._sock.recvmsg(
                    4096, _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
            except BlockingIOError:
                return
            except OSError:
                data, anc = b"", []
            passed = [fd for level, kind, payload in anc
                      if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                      for fd in array.array("i", payload[:len(payload) - len(payload) % 4])]
            if not data:
                self._broken()
                return
            req = self._waiting.popleft() if self._waiting else None
            try:
                reply = json.loads(data)
            except ValueError:
                reply = None
            ok = isinstance(reply, dict) and isinstance(reply.get("pid"), int) and passed
            if req is not None and ok and not req.answer.done():
                assert isinstance(reply, dict)
                req.answer.set_result(Forked(reply["pid"], passed.pop(0), req.stdin,
                                             req.stdout))
                self.forks += 1
            elif req is not None:  # its caller is gone, or no monitor came: close it all
                req.close()
                if not req.answer.done():
                    errno = reply.get("errno") if isinstance(reply, dict) else None
                    req.answer.set_exception(OSError(
                        errno if isinstance(errno, int) else 5,
                        "the monitor fork server could not fork: "
                        f"{os.strerror(errno) if isinstance(errno, int) else reply!r}"))
            for fd in passed:
                os.close(fd)

    def _broken(self) -> None:
        """Forget the server (it exits at EOF on its socket; one that is stuck is killed)
        and fail the requests waiting for it."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()  # it may still fork for nobody
            self._old.append(proc)
        while self._waiting:
            req = self._waiting.popleft()
            req.close()
            if not req.answer.done():
                req.answer.set_exception(OSError("the monitor fork server is gone"))
        self.reap()

    def reap(self) -> None:
        """Collect servers we left."""
        self._old = [p for p in self._old if p.poll() is None]

    def close(self) -> None:
        """At shutdown: the server exits at EOF on its socket."""
        proc = self._proc
        self._broken()
        self._old = [p for p in self._old if p is not proc]
        if proc is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                proc.wait(timeout=2)
        self.reap()
