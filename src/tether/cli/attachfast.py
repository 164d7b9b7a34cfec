"""``tether attach`` without click, the SDK's RPC client or msgspec: the common case only.

An attach client stays resident for the whole session, so its start and its memory
are paid by every attached terminal. When the command line is a plain
``[--home H] attach [--detach-keys K] [--read-only] [--replay N] EXEC`` and the exec's
monitor socket is found from the home's files, it attaches from here; anything else —
``--help``, a usage error, an exec that is not running or not found by its files, an
untrusted home — returns None and the caller runs the full CLI, which says the same
things it always has.

The most common case of all — stdin and stdout one terminal, the default detach keys —
is :func:`direct`: the terminal handed to the monitor over ``_socket`` with the standard
library's C modules (``termios``, ``select``, ``_signal``) and ``wirejson``, none of the
attach client's ``json``, ``socket``, ``pathlib``, ``signal`` or ``dataclasses``, whose
imports cost more than the rest of an attach. Should the monitor keep the terminal to
itself, the connection is adopted by the SDK's ``Attachment`` and copied as before.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not ``typing``'s: every import here costs every attach
if TYPE_CHECKING:
    from typing import Any

DEFAULT_REPLAY = 64 * 1024  # monitor.attachproto.DEFAULT_REPLAY (a unit test keeps it)
DEFAULT_KEYS = b"\x1c"  # terminal.DEFAULT_DETACH_KEYS, ctrl-\\ (a unit test keeps it)
_VALUED = {"--detach-keys", "--replay"}


def _parse(argv: list[str]) -> dict[str, str | bool] | None:
    """The options of a plain ``[--home H] attach ... EXEC``; None for anything else."""
    opts: dict[str, str | bool] = {}
    args = iter(argv)
    seen_attach = False
    for arg in args:
        name, eq, value = arg.partition("=")
        if (name == "--home" and not seen_attach) or (name in _VALUED and seen_attach):
            if not eq:
                value = next(args, "")
            if not value or value.startswith("-") or name in opts:
                return None
            opts[name] = value
        elif arg == "attach" and not seen_attach:
            seen_attach = True
        elif arg == "--read-only" and seen_attach:
            opts[arg] = True
        elif seen_attach and not arg.startswith("-") and "ref" not in opts:
            opts["ref"] = arg
        else:
            return None  # help, an unknown option, a second argument: click's to say
    return opts if seen_attach and "ref" in opts else None


def run(argv: list[str]) -> int | None:
    """Attach as ``tether attach`` would; the exit code, or None: run the full CLI."""
    opts = _parse(argv)
    if opts is None:
        return None
    code = direct(opts)
    if code is not None:
        return code
    from tether.cli.terminal import (
        DEFAULT_DETACH_KEYS,
        BadDetachKeys,
        attach_session,
        parse_detach_keys,
    )
    from tether.client.attach import Attachment, find_socket
    from tether.client.daemonctl import resolve_home, trusted
    from tether.client.errors import TetherError
    from tether.model.layout import HomeLayout

    try:
        keys = parse_detach_keys(str(opts.get("--detach-keys") or
                                     os.environ.get("TETHER_DETACH_KEYS") or
                                     DEFAULT_DETACH_KEYS))
        replay = int(opts.get("--replay", DEFAULT_REPLAY))
        home = resolve_home(str(opts["--home"]) if "--home" in opts else None)
        trusted(home)
        agent = _match(str(home), str(opts["ref"]))
        if agent is not None and agent[1]:
            return None  # an agent's attempt: the full path follows its revivals
        sock = find_socket(HomeLayout(home), str(opts["ref"]))
    except (BadDetachKeys, ValueError, TetherError):
        return None
    if replay < 0:
        return None
    read_only = bool(opts.get("--read-only"))
    try:
        return attach_session(
            lambda size, passed: Attachment(sock, read_only=read_only, rows=size and size[0],
                                            cols=size and size[1], replay=replay,
                                            terminal=passed, detach_keys=keys),
            keys, read_only=read_only)
    except TetherError:  # refused before it attached: the full CLI says why
        return None


def _find_socket(home: str, ref: str) -> str | None:
    m = _match(home, ref)
    return m[0] if m is not None and not m[1] else None


def _match(home: str, ref: str) -> tuple[str, bool] | None:
    """``client.attach.find_socket`` over strings: the one live monitor socket ``ref``
    names (an exec id, a name, a lineage, else an id prefix), or None (the full path
    then says why: none, or several), with whether it is an agent's attempt: then the
    full path attaches, since it follows the lineage to its next attempt when this one is
    revived (issue 23 item 9)."""
    from tether.client import wirejson

    run_dir = os.path.join(home, "run")
    exact: list[tuple[str, bool]] = []
    prefix: list[tuple[str, bool]] = []
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    for name in names:
        if not name.endswith(".handles.json"):
            continue
        exec_id = name.split(".", 1)[0]
        try:
            with open(os.path.join(run_dir, name), "rb") as f:
                data = wirejson.loads(f.read())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        sock = (str(data.get("socket", os.path.join(run_dir, f"{exec_id}.sock"))),
                bool(data.get("lineage")))
        if exec_id == ref or data.get("name") == ref or data.get("lineage") == ref:
            exact.append(sock)
        elif exec_id.startswith(ref):
            prefix.append(sock)
    live = ([m for m in exact if os.path.exists(m[0])]
            or [m for m in prefix if os.path.exists(m[0])])
    return live[0] if len(live) == 1 else None


def direct(opts: dict[str, str | bool]) -> int | None:
    """Attach by handing this terminal to the monitor; the exit code, or None when this
    is not the case handled here (nothing was attached: the caller goes on)."""
    import sys

    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    if "--detach-keys" in opts or "TETHER_DETACH_KEYS" in os.environ:
        return None  # keys to parse: the terminal module's
    try:
        if not (os.isatty(in_fd) and os.isatty(out_fd)) or \
                os.fstat(in_fd).st_rdev != os.fstat(out_fd).st_rdev:
            return None
        replay = int(opts.get("--replay", DEFAULT_REPLAY))
    except (OSError, ValueError):
        return None
    if replay < 0:
        return None
    from tether.cli.lean import resolve_home
    from tether.client import oneshot

    home = resolve_home(str(opts["--home"]) if "--home" in opts else None)
    try:
        oneshot.check(home)
    except Exception:
        return None
    sock_path = _find_socket(home, str(opts["ref"]))
    if sock_path is None:
        return None
    import termios
    import tty

    read_only = bool(opts.get("--read-only"))
    saved = termios.tcgetattr(in_fd)
    _signal = _signals()

    def restore() -> None:
        try:  # noqa: SIM105 (contextlib: imports this path does without)
            termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
        except (termios.error, OSError):
            pass

    names = {_signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}

    def on_signal(signum: int, frame: Any) -> None:
        restore()
        sys.stderr.write(f"\r\ntether: terminal restored ({names[signum]})\r\n")
        os._exit(128 + signum)

    old = {s: _signal.signal(s, on_signal) for s in names}
    tty.setraw(in_fd, termios.TCSANOW)  # first: the monitor may write the replay at once
    try:
        attached = _hand_over(sock_path, in_fd, out_fd, read_only, replay)
    finally:
        restore()
        for s, h in old.items():
            _signal.signal(s, h)
    if attached is None:
        return None
    from tether.cli.lean import attach_report

    info, how, exit = attached
    return attach_report(info, how, exit)


def _hand_over(sock_path: str, in_fd: int, out_fd: int, read_only: bool, replay: int
               ) -> tuple[dict[str, Any], str, dict[str, Any] | None] | None:
    """The attachment, in raw mode: (the monitor's hello, how it ended, the exit record),
    or None when the monitor refused it or is gone (the caller goes on)."""
    import _socket
    import sys

    from tether.client import wirejson

    try:
        size = os.get_terminal_size(in_fd)
        rows, cols = (size.lines, size.columns) if size.lines and size.columns else (0, 0)
    except OSError:
        rows = cols = 0
    hello = {"op": "attach", "read_only": read_only, "rows": rows, "cols": cols,
             "replay": replay, "terminal": True, "detach_keys": list(DEFAULT_KEYS)}
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    buf = bytearray()
    try:
        s.settimeout(5.0)
        s.connect(sock_path)
        s.sendmsg([wirejson.dumps(hello).encode() + b"\n"],
                  [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                    in_fd.to_bytes(4, sys.byteorder))])  # a C int, as send_fds packs it
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        nl = buf.index(b"\n")
        reply = wirejson.loads(bytes(buf[:nl]))
        del buf[:nl + 1]
        s.settimeout(None)
    except (OSError, ValueError):
        s.close()
        return None  # not running, or it did not answer: the full path says so
    if not isinstance(reply, dict) or not reply.get("ok"):
        s.close()
        return None  # refused (no terminal): the full path asks again and says why
    if not reply.get("terminal"):  # the monitor keeps the terminal: the copy loop's
        return _copied(s, bytes(buf), reply, in_fd, out_fd, read_only)
    return (reply, *_wait(s, buf, in_fd))


def _wait(s: Any, buf: bytearray, size_fd: int) -> tuple[str, dict[str, Any] | None]:
    """``terminal.wait_loop``: the monitor has the terminal; send window sizes until it
    says detached or ended (or the connection is lost)."""
    import select

    from tether.client import wirejson
    from tether.monitor import attachproto as proto

    _signal = _signals()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_wakeup = _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    old_winch = _signal.signal(_signal.SIGWINCH, lambda *_: None)
    poller = select.poll()
    for fd in (s.fileno(), wake_r):
        poller.register(fd, select.POLLIN)
    try:
        while True:
            while (got := proto.split(buf)) is not None:
                kind, payload = got
                if kind == proto.EXIT:
                    return "exited", wirejson.loads(payload)
                if kind == proto.DETACH:
                    return "detached", None
            ready = {fd for fd, _ in poller.poll()}
            if wake_r in ready:
                try:  # noqa: SIM105 (contextlib: imports this path does without)
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
                try:
                    size = os.get_terminal_size(size_fd)
                    if size.lines and size.columns:
                        s.sendall(proto.frame(proto.RESIZE,
                                              proto.SIZE.pack(size.lines, size.columns)))
                except OSError:
                    pass
            if s.fileno() in ready:
                try:
                    chunk = s.recv(1 << 20)
                except OSError:
                    chunk = b""
                if not chunk:
                    return "lost", None
                buf += chunk
    finally:
        _signal.set_wakeup_fd(old_wakeup)
        _signal.signal(_signal.SIGWINCH, old_winch)
        os.close(wake_r)
        os.close(wake_w)
        s.close()


def _copied(s: Any, buffered: bytes, reply: dict[str, Any], in_fd: int, out_fd: int,
            read_only: bool) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """The monitor kept the terminal: the SDK's ``Attachment`` adopts the connection and
    the terminal module copies, as the full path would."""
    import socket

    from tether.cli.terminal import copy_loop
    from tether.client.attach import Attachment

    att = Attachment.adopt(socket.socket(fileno=s.detach()), reply, buffered)
    result = copy_loop(att, stdin_fd=in_fd, stdout_fd=out_fd, detach_keys=DEFAULT_KEYS,
                       forward_input=not read_only)
    att.detach()
    return reply, result.how, result.exit


def _signals() -> Any:
    """``_signal``, the C module under ``signal`` (which adds enums: ``import enum``)."""
    import _signal  # type: ignore[import-not-found]  # no stub: ``signal``'s functions

    return _signal
