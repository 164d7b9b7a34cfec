"""The bridge inside a sandbox: ``127.0.0.1:PORT`` in the sandbox's own network namespace,
carried to tether's egress proxy through the Unix socket bound into the sandbox.

bwrap runs ``python -I -S bridge.py PORT SOCKET CMD ARGS...`` as the sandbox's command. It
binds and listens, forks the relay, and ``exec``\\ s CMD in the same process: the process
the monitor pins (bwrap's grandchild, ``tether.monitor.pin``) is the one that becomes the
gate and then the command, and the port listens before the command starts. The relay
leaves the command's process group and session (signals sent to the command's group do not
reach it), holds nothing of the command's (stdio ``/dev/null``, every other descriptor
closed), and dies with the sandbox: bwrap's init ends, the kernel kills the rest of the pid
namespace. So it lives exactly as long as the agent, daemon restarts included, and every
connection is a fresh connection to the socket: a restarted proxy serves the next one.

Standard library only and no tether import: it runs on the host's interpreter inside the
sandbox, with nothing else of tether bound there. Only C modules (``_socket``, not
``socket``, which pulls in ``enum`` and ``selectors``: 25 ms more before the command
starts on a busy machine). A relay costs one process of a few MiB; its loop is one
``epoll`` over non-blocking sockets with back-pressure (a side is read only while what
it sent before has been written on).
"""

import _signal as signal  # type: ignore[import-not-found]
import _socket as socket
import os
import select
import sys

BUF = 65536
IN, OUT = select.EPOLLIN | select.EPOLLRDHUP, select.EPOLLOUT


class Pair:
    """One connection: the sandbox's side and the proxy's. ``pending[i]``: bytes to write
    to ``socks[i]``; ``eof[i]``: ``socks[i]`` said it sends no more."""

    __slots__ = ("eof", "pending", "registered", "shut", "socks")

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.socks = (a, b)
        self.pending = [b"", b""]
        self.eof = [False, False]
        self.shut = [False, False]
        self.registered = [True, True]

    def wants(self, i: int) -> int:
        ev = 0
        if not self.eof[i] and not self.pending[1 - i]:
            ev |= IN
        if self.pending[i]:
            ev |= OUT
        return ev

    def done(self) -> bool:
        return all(self.eof) and not any(self.pending)


class Relay:
    def __init__(self, listener: socket.socket, path: str) -> None:
        self.listener = listener
        self.path = path
        self.ep = select.epoll()
        self.by_fd: dict[int, tuple[Pair, int]] = {}
        self.ep.register(listener.fileno(), select.EPOLLIN)

    def run(self) -> None:
        while True:
            try:
                events = self.ep.poll()
            except InterruptedError:
                continue
            for fd, ev in events:
                if fd == self.listener.fileno():
                    self.accept()
                    continue
                found = self.by_fd.get(fd)
                if found is not None:
                    self.step(*found, ev)

    def accept(self) -> None:
        try:
            fd, _ = self.listener._accept()  # type: ignore[attr-defined]
        except OSError:
            return
        inner = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, fd)
        outer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            outer.settimeout(5)
            outer.connect(self.path)  # local: at once, or refused (no proxy serving)
        except OSError:
            inner.close()  # the sandbox's client sees its connection reset
            outer.close()
            return
        pair = Pair(inner, outer)
        for i, s in enumerate(pair.socks):
            s.setblocking(False)
            self.by_fd[s.fileno()] = (pair, i)
            self.ep.register(s.fileno(), pair.wants(i))

    def step(self, pair: Pair, i: int, ev: int) -> None:
        j = 1 - i
        # A hang-up is reported whatever the mask: read what is left then (even past the
        # back-pressure, bounded by the socket's buffer) so that it stops being reported.
        hup = ev & (select.EPOLLHUP | select.EPOLLERR)
        try:
            if (ev & IN or hup) and not pair.eof[i] and (not pair.pending[j] or hup):
                data = pair.socks[i].recv(BUF)
                if data:
                    pair.pending[j] += data
                else:
                    pair.eof[i] = True
                self.flush(pair, j)
            if ev & OUT or (hup and pair.pending[i]):
                self.flush(pair, i)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.close(pair)
            return
        if pair.done():
            self.close(pair)
            return
        for k in (0, 1):
            fd, mask = pair.socks[k].fileno(), pair.wants(k)
            if pair.eof[k] and not mask:  # nothing more to do on it: stop its reports
                if pair.registered[k]:
                    pair.registered[k] = False
                    self.ep.unregister(fd)
            elif pair.registered[k]:
                self.ep.modify(fd, mask)
            else:
                pair.registered[k] = True
                self.ep.register(fd, mask)

    @staticmethod
    def flush(pair: Pair, k: int) -> None:
        """Write what is pending to side ``k``; once it is all written and the other side
        ended, pass the end on."""
        data = pair.pending[k]
        if data:
            try:
                n = pair.socks[k].send(data)
            except BlockingIOError:
                n = 0
            pair.pending[k] = data[n:]
        if not pair.pending[k] and pair.eof[1 - k] and not pair.shut[k]:
            pair.shut[k] = True
            try:  # noqa: SIM105 (no contextlib: the bridge imports as little as it can)
                pair.socks[k].shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self, pair: Pair) -> None:
        for s in pair.socks:
            fd = s.fileno()
            if fd >= 0:
                self.by_fd.pop(fd, None)
                try:  # noqa: SIM105
                    self.ep.unregister(fd)
                except OSError:
                    pass  # unregistered already
            s.close()


def _detach(keep: int) -> None:
    """The relay's process: a session of its own, stdio /dev/null, nothing else open."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        sys.stderr.write("usage: bridge.py PORT SOCKET CMD [ARGS...]\n")
        return 2
    port, path, cmd = int(argv[1]), argv[2], argv[3:]
    listener: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        assert listener is not None
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    except OSError as e:
        sys.stderr.write(f"tether: the egress bridge cannot listen on 127.0.0.1:{port} "
                         f"({e}); the command runs without a way out\n")
        listener = None
    if listener is not None:
        if os.fork() == 0:
            try:
                _detach(listener.fileno())
                Relay(listener, path).run()
            finally:
                os._exit(0)
        listener.close()
    # Python ignores these at start; ignored signals would stay ignored in the command.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execv(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write(f"tether: cannot run {cmd[0]}: {e}\n")
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
