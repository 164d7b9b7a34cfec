"""The monitor fork server: new monitors forked from one warm process.

Starting a monitor from scratch (``python -I -S run.py``: the interpreter, then the
monitor's modules) costs about 15 ms of CPU, most of what an exec's start costs, and
in a burst of starts the monitors' start-ups are what the two cores spend their time
on. The daemon therefore starts one fork server (``run.py --fork-server``, its own
session, its stdin one end of a ``SOCK_SEQPACKET`` pair whose other end only the daemon
holds) that has imported the monitor's modules once, and asks it for each new monitor:

* request: one message, the ``run`` directory the monitor makes its files ahead in (a
  JSON string, or ``null``), with two fds (``SCM_RIGHTS``): the monitor's stdin (the read
  end of the pipe the daemon writes its lines into) and stdout (the write end of the
  pipe its start report comes back on);
* the server forks; the child makes itself a monitor as ``Popen(start_new_session=True,
  cwd="/", stderr=DEVNULL, close_fds=True)`` would have made it — its own session,
  the two pipes as fds 0 and 1, ``/dev/null`` as fd 2, nothing else open, ``/`` as its
  directory, default signal dispositions — and runs :func:`tether.monitor.main.main`,
  exactly the code a started monitor runs;
* reply: one message, ``{"pid": N}`` with a pidfd of the child (how the daemon learns
  it ended, since it is not its child), or ``{"errno": E}`` when the fork failed.

The server reaps its children (SIGCHLD) and removes what a killed idle monitor left
(its socket made ahead, ``run/z/<pid>.sock``), as the daemon does for monitors it
spawned. It exits when its socket reaches EOF (the daemon closed it or died); its
monitors, each in its own session, live on. It acts only on what the daemon writes on
a socket pair no other process holds.

Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import _socket as socket
import gc
import os
import select
import struct
import sys

from tether.monitor import tinyjson as json
from tether.monitor.ahead import socket_tmp
from tether.monitor.main import main
from tether.monitor.userterm import recv_with_fds

#: The argument of ``run.py`` that makes the process the fork server.
FORK_SERVER = "--fork-server"
_FD = struct.Struct("i")
_REQUEST = 64 * 1024  # a run directory's path is far shorter


def _child(ctl: socket.socket, fds: list[int]) -> None:
    """In the forked child: become a fresh monitor, run it, never return."""
    code = 1
    try:
        ctl.detach()  # fd 0: replaced by the monitor's stdin below
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 2)
        os.closerange(3, 1 << 20)  # the server's epoll, wake pipe and the passed fds
        os.chdir("/")
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        try:
            sys.excepthook(*sys.exc_info())  # to fd 2: the exec's monitor log by now
            sys.stderr.flush()
        except BaseException:
            pass
        code = 1
    finally:
        os._exit(code)


def _reply(ctl: socket.socket, obj: dict[str, object], fd: int | None = None) -> None:
    data = json.dumps(obj).encode()
    if fd is None:
        ctl.sendmsg([data])
    else:
        ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _FD.pack(fd))])


def serve() -> int:
    """Fork a monitor per request on fd 0 until EOF (see the module's docstring)."""
    ctl = socket.socket(fileno=0)
    wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake[1], warn_on_full_buffer=False)
    ep = select.epoll()
    ep.register(0, select.EPOLLIN)
    ep.register(wake[0], select.EPOLLIN)
    runs: dict[int, str] = {}  # pid -> run directory of a monitor making files ahead
    gc.freeze()  # the modules' objects: never collected, so never copied by a child's gc
    while True:
        try:
            ready = ep.poll()
        except InterruptedError:
            continue
        for fd, _events in ready:
            if fd == wake[0]:
                try:
                    while os.read(wake[0], 4096):
                        pass
                except BlockingIOError:
                    pass
                _reap(runs)
                continue
            try:
                data, fds = recv_with_fds(ctl, _REQUEST)
            except InterruptedError:
                continue
            except OSError:
                return 0
            if not data:
                for f in fds:
                    os.close(f)
                return 0  # the daemon is gone
            _fork(ctl, data, fds, runs)


def _fork(ctl: socket.socket, data: bytes, fds: list[int], runs: dict[int, str]) -> None:
    try:
        try:
            run = json.loads(data)
        except ValueError:
            run = None
        if len(fds) != 2:
            _reply(ctl, {"errno": 22})  # EINVAL: not a request the daemon sends
            return
        try:
            pid = os.fork()
        except OSError as e:
            _reply(ctl, {"errno": e.errno or 11})
            return
        if pid == 0:
            _child(ctl, fds)
        if isinstance(run, str):
            runs[pid] = run
        try:
            pidfd = os.pidfd_open(pid)  # unreaped until the loop reaps: still this child
        except OSError as e:
            os.kill(pid, signal.SIGKILL)
            _reply(ctl, {"errno": e.errno or 24})
            return
        try:
            _reply(ctl, {"pid": pid}, pidfd)
        finally:
            os.close(pidfd)
    except OSError:
        pass  # the daemon is gone: the next read sees EOF
    finally:
        for f in fds:
            os.close(f)


def _reap(runs: dict[int, str]) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        run = runs.pop(pid, None)
        if run is not None:  # a killed idle monitor's socket; renamed away if it ran an exec
            try:
                os.unlink(socket_tmp(run, pid))
            except OSError:
                pass
