"""``tether run``, ``wait`` and ``kill`` without click, msgspec or the full client: their
common forms only (:mod:`tether.cli.fast` hands them here).

``tether run [-d] [--name N] [--sandbox S] [-e K=V]... [--cwd D] [--timeout T]
[--clean-env] [--no-agent] [--] CMD ARGS...`` is what scripts, CI jobs and an agent's tool
calls type, and each of them paid for click, rich, msgspec and the full client before the
one request that matters. Here it is one connection: ``exec.start``, then the exec's
output (``exec.logs`` of both streams, long-polled) and its end (``exec.wait``) pipelined
on that connection, each stream to its own, and the exit code (128+N when killed by signal
N); Ctrl-C cancels it (twice: kill), as the click command does.

Anything else raises ``Decline`` before anything happened, and the click command runs as
if this module were not there: another flag (a sandbox's, an agent's, ``-t``, ``-i``,
``--detach-keys``, ``--help``), a value click would refuse, a command an agent provider
claims (built in, or any profile in ``<home>/providers``), ``TETHER_DETACH_KEYS`` set, an
untrusted home, no daemon answering (the full client starts one), or the start refused
by a stopping or full daemon. Once the exec may have started, nothing is handed back (it
would start twice): a connection lost during the start is retried by the full client with
the same request key, and one lost while following carries on with the full client from
the byte reached (:func:`tether.cli.foreground.attach_output`). Errors are rendered by
the click path's own ``output.fail``, loaded only then.
``tests/e2e/test_cli_lean.py`` compares both paths' bytes and exit codes.
"""

from __future__ import annotations

import os
import sys

from tether.cli.lean import SOCKET_NAME, Decline, exit_code

TYPE_CHECKING = False  # not ``typing``'s: every import here costs every `tether run`
if TYPE_CHECKING:
    from typing import Any

    from tether.client.oneshot import Pipeline
    from tether.model.errors import TetherError

#: What the built-in agent providers' ``commands`` name: `tether run claude …` starts an
#: agent session, the click command's (a unit test keeps this equal to the providers').
AGENT_COMMANDS = frozenset({"claude", "codex", "gemini", "opencode", "aider", "amp"})
KILL_GRACE = 5.0  # model.records.KILL_GRACE (a unit test keeps them the same)
ENDED = ("FINISHED", "FAILED", "CANCELLED")
LOG_CHUNK = 1024 * 1024
#: ``run -it`` from a pipe: Docker's words and exit code (the click command's too).
NOT_A_TTY = "the input device is not a TTY"
NOT_A_TTY_HINT = ("run it from a terminal; or -t alone to watch its output, -i alone to pipe "
                  "input to it, -d to start it and `tether attach` from a terminal later")

_FLAGS = {"-d": "detach", "--detach": "detach", "-t": "tty", "--tty": "tty",
          "-i": "interactive", "--interactive": "interactive", "--clean-env": "clean_env",
          "--no-agent": "no_agent"}
_VALUED = {"--name": "name", "--sandbox": "sandbox", "--env": "env", "--cwd": "cwd",
           "--timeout": "timeout"}


def parse_run(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``run``'s options and the program's command line, as the click command (with
    ``ArgvCommand``) would read them; ``Decline`` for anything outside the common forms."""
    opts: dict[str, Any] = {"env": []}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break  # the program's first word
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in _FLAGS and not eq:
                opts[_FLAGS[name]] = True
            elif name in _VALUED:
                if not eq:
                    i += 1
                    value = args[i] if i < len(args) else ""
                _value(opts, _VALUED[name], value)
            else:
                raise Decline
        else:  # a cluster of short flags, perhaps ending in -e and its value: -di, -eK=V
            for j in range(1, len(arg)):
                if arg[j] == "e":
                    value = arg[j + 1:]
                    if not value:
                        i += 1
                        value = args[i] if i < len(args) else ""
                    _value(opts, "env", value)
                    break
                flag = _FLAGS.get("-" + arg[j])
                if flag is None:
                    raise Decline
                opts[flag] = True
        i += 1
    if i >= len(args):
        raise Decline  # no program: click's usage error
    return opts, args[i:]


def _value(opts: dict[str, Any], key: str, value: str) -> None:
    """An option's value, checked as click's type would (or ``Decline``: click says)."""
    if not value or value.startswith("-"):
        raise Decline
    if key == "env":
        opts["env"].append(value)
    elif key == "timeout":
        try:
            seconds = float(value)
        except ValueError:
            raise Decline from None
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            raise Decline  # NaN and infinities do not travel as JSON numbers
        opts[key] = seconds
    elif key == "cwd":  # click.Path(file_okay=False): an existing one is a readable dir
        if os.path.exists(value) and not (os.path.isdir(value)
                                          and os.access(value, os.R_OK)):
            raise Decline
        opts[key] = value
    else:
        opts[key] = value


def _env(opts: dict[str, Any]) -> dict[str, str]:
    """This shell's environment (unless ``--clean-env``) with the ``-e`` pairs
    (``context.kv``: ``KEY=VALUE``, or a bare ``KEY`` to copy this shell's)."""
    extra: dict[str, str] = {}
    for pair in opts["env"]:
        key, eq, value = pair.partition("=")
        if not eq:
            if pair not in os.environ:
                raise Decline  # click's "is not KEY=VALUE"
            extra[pair] = os.environ[pair]
        elif not key:
            raise Decline
        else:
            extra[key] = value
    env = {} if opts.get("clean_env") else dict(os.environ)
    env.update(extra)
    return env


def _has_profiles(home: str) -> bool:
    """Whether ``<home>/providers`` holds a provider profile (any of which may claim the
    command, or be refused with a note): the click command looks."""
    try:
        return any(n.endswith(".toml") for n in os.listdir(os.path.join(home, "providers")))
    except OSError:
        return False


def run(home: str, args: list[str]) -> int:
    opts, argv = parse_run(args)
    detach = bool(opts.get("detach"))
    if opts.get("tty"):
        if opts.get("interactive") and not detach and not os.isatty(sys.stdin.fileno()):
            return _fail(NOT_A_TTY, 1, NOT_A_TTY_HINT)
        raise Decline  # a terminal: the click command attaches it
    if opts.get("interactive") or "TETHER_DETACH_KEYS" in os.environ:
        raise Decline
    if not opts.get("no_agent") and (os.path.basename(argv[0]) in AGENT_COMMANDS
                                     or _has_profiles(home)):
        raise Decline
    env = _env(opts)
    try:
        cwd = opts.get("cwd")
        workdir = os.path.abspath(cwd) if cwd else os.getcwd()
    except OSError:
        raise Decline from None
    params: dict[str, Any] = {  # as ``api.exec_start`` sends them: no nulls
        "argv": argv, "sandbox": opts.get("sandbox", "default"), "env": env, "cwd": workdir,
        "request_key": os.urandom(16).hex(), "unconfined_ok": True}
    for key in ("timeout", "name"):
        if key in opts:
            params[key] = opts[key]
    try:  # the full client cannot send a string that is not UTF-8 (a traceback there)
        "\0".join([*argv, workdir, *env, *env.values()]).encode()
    except UnicodeEncodeError:
        raise Decline from None
    from tether.client import oneshot

    try:
        oneshot.check(home)
        conn: Pipeline | None = oneshot.Pipeline(os.path.join(home, SOCKET_NAME))
    except Exception:  # untrusted (77), or no daemon (the full client starts one)
        raise Decline from None
    ints = None if detach else _Interrupts()
    assert conn is not None
    try:
        rid = conn.send("exec.start", params)
        reply = _reply(conn, rid)
    except (OSError, ValueError):  # it may have started: the same request key says
        conn.close()
        x = _start_fully(home, params)
        if isinstance(x, int):
            return x
        conn = None
    else:
        err = reply.get("error")
        if err is not None:
            conn.close()
            if oneshot.unanswered(err):  # refused, not started: the click command retries
                if ints is not None:
                    ints.close()
                raise Decline
            return _render(_error(err))
        x = reply.get("result") or {}
    if x.get("notice"):
        _echo_err(f"tether: {x['notice']}")
    if detach:
        if conn is not None:
            conn.close()
        sys.stdout.write(f"{x['id']}\n")
        sys.stdout.flush()
        return 0
    assert ints is not None
    if conn is None:
        return _resume(home, x["id"], 0, ints)
    return _follow(conn, home, x["id"], ints)


def _reply(conn: Pipeline, rid: int) -> dict[str, Any]:
    while True:
        for msg in conn.read():
            if msg.get("id") == rid:
                return msg


def _start_fully(home: str, params: dict[str, Any]) -> dict[str, Any] | int:
    """``exec.start`` again with the full client (it reconnects, retries, starts a
    daemon) and the same request key, so it starts once: the exec, or the exit code."""
    import msgspec

    from tether.client.blocking import Client
    from tether.client.errors import TetherError

    p = dict(params)
    try:
        x = Client(home).exec_start(
            p.pop("argv"), sandbox=p["sandbox"], env=p["env"], cwd=p["cwd"],
            timeout=p.get("timeout"), name=p.get("name"), request_key=p["request_key"],
            unconfined_ok=True)
    except TetherError as e:
        return _render(e)
    result: dict[str, Any] = msgspec.to_builtins(x)
    return result


def _follow(conn: Pipeline, home: str, exec_id: str, ints: _Interrupts) -> int:
    """Both logs as written, each to its own stream (a ``2>&1`` sees the order), until
    the exec ended and its output is read; its exit code."""
    import binascii
    import select

    sinks: dict[str, Any] = {"stdout": sys.stdout.buffer, "pty": sys.stdout.buffer,
                             "stderr": sys.stderr.buffer}
    offset = 0
    ended: dict[str, Any] | None = None
    done = False
    cancels: set[int] = set()
    try:
        wait_id = conn.send("exec.wait", {"exec": exec_id, "timeout": 5.0})
        logs_id = conn.send("exec.logs", {"exec": exec_id, "stream": "all", "offset": 0,
                                          "limit": LOG_CHUNK, "wait": 5.0})
        while ended is None or not done:
            if ints.count > ints.handled:
                ints.handled = ints.count
                cancels.add(conn.send("exec.cancel", {
                    "exec": exec_id, "signal": "TERM" if ints.handled == 1 else "KILL",
                    "grace": KILL_GRACE, "reason": "interrupted (Ctrl-C)"}))
            ready = select.select([conn.fileno(), ints.fd], [], [])[0]
            if ints.fd in ready:
                ints.drain()
            if conn.fileno() not in ready:
                continue
            for msg in conn.read():
                mid = msg.get("id")
                if mid not in (wait_id, logs_id) and mid not in cancels:
                    continue  # a log read made stale by the exec's end
                err = msg.get("error")
                if err is not None:
                    from tether.client import oneshot

                    if oneshot.unanswered(err):
                        if mid in cancels:  # not done: sent again from the full client
                            ints.handled -= 1
                        raise ConnectionError("refused")
                    if mid == logs_id:
                        _render(_error(err))
                        done = True
                        continue
                    return _render(_error(err))
                result = msg.get("result") or {}
                if mid == wait_id:
                    if result.get("state") not in ENDED:
                        wait_id = conn.send("exec.wait", {"exec": exec_id, "timeout": 5.0})
                        continue
                    ended = result
                    if not done:  # the pending read may wait a poll: read the rest now
                        logs_id = conn.send("exec.logs", {
                            "exec": exec_id, "stream": "all", "offset": offset,
                            "limit": LOG_CHUNK, "wait": 0.0})
                elif mid == logs_id:
                    data = binascii.a2b_base64(result.get("data") or "")
                    if data:
                        offset = result["offset"]
                        _write(data, result.get("runs") or [["stdout", len(data)]], sinks)
                    elif result.get("eof"):
                        done = True
                        continue
                    logs_id = conn.send("exec.logs", {
                        "exec": exec_id, "stream": "all", "offset": offset,
                        "limit": LOG_CHUNK, "wait": 0.0 if ended else 5.0})
    except (OSError, ValueError):
        conn.close()
        return _resume(home, exec_id, offset, ints)
    conn.close()
    ints.close()
    if ended["state"] == "FAILED" and ended.get("reason"):
        _fail(f"exec {exec_id} failed: {ended['reason']}", 1)
    return exit_code(ended)


def _write(data: bytes, runs: list[list[Any]], sinks: dict[str, Any]) -> None:
    at = 0
    for name, n in runs:
        try:
            sinks[name].write(data[at:at + n])
            sinks[name].flush()
        except BrokenPipeError:  # nobody reads it any more: the exec runs to its end
            if name == "stderr":
                sinks["stderr"] = _Discard()
            else:
                sinks["stdout"] = sinks["pty"] = _Discard()
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        at += n


class _Discard:
    def write(self, data: bytes) -> None:
        pass

    def flush(self) -> None:
        pass


def _resume(home: str, exec_id: str, offset: int, ints: _Interrupts) -> int:
    """Follow on with the full client (it reconnects, and waits for a restarted daemon)
    from byte ``offset`` of the output, the Ctrl-C counted so far carried over."""
    from tether.cli import foreground as fg
    from tether.client.blocking import Client
    from tether.client.errors import TetherError

    ints.close()
    full = fg.Interrupts()
    full.count, full.handled = ints.count, ints.handled
    try:
        return fg.attach_output(Client(home), exec_id, full, offset=offset)
    except TetherError as e:
        return _render(e)


class _Interrupts:
    """Ctrl-C counted from before the start, and woken on: SIGINT writes to a pipe that
    the follow loop selects on beside the socket (``_signal``: ``signal`` imports
    ``enum``)."""

    def __init__(self) -> None:
        _signal = _signals()
        self.count = self.handled = 0
        self.fd, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old = _signal.signal(_signal.SIGINT, self._on_sigint)
        self._old_fd = _signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1

    def drain(self) -> None:
        os.read(self.fd, 4096)

    def close(self) -> None:
        _signal = _signals()
        _signal.set_wakeup_fd(self._old_fd)
        _signal.signal(_signal.SIGINT, self._old)
        os.close(self.fd)
        os.close(self._w)


def _signals() -> Any:
    """``_signal``, the C module under ``signal`` (which adds enums: ``import enum``)."""
    import _signal  # type: ignore[import-not-found]  # no stub: ``signal``'s functions

    return _signal


def _error(err: dict[str, Any]) -> TetherError:
    from tether.client.errors import TetherError

    return TetherError.from_wire(err)


def _render(e: TetherError) -> int:
    """What the click command prints for a failed call, and its exit code."""
    from tether.client.errors import DaemonUnavailable, HomeUntrusted
    from tether.model.layout import HOME_UNTRUSTED_EXIT

    if e.code == "START_FAILED":
        return _fail(e.message, 127 if "not found" in e.message else 126)
    if isinstance(e, DaemonUnavailable):
        return _fail(str(e), 125)
    if isinstance(e, HomeUntrusted):
        return _fail(e.message, HOME_UNTRUSTED_EXIT)
    return _fail(e.message, 1)


def _fail(message: str, code: int, hint: str | None = None) -> int:
    from tether.cli.output import fail

    fail(message, hint)
    return code


def _echo_err(line: str) -> None:
    """``click.echo(line, err=True)``; click only for what it would change (escapes)."""
    if "\x1b" in line:
        import click

        click.echo(line, err=True)
        return
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def wait(home: str, args: list[str]) -> int:
    """``wait EXEC``: its exit code, printed and returned."""
    if len(args) != 1 or args[0].startswith("-"):
        raise Decline
    from tether.cli.lean import call

    while True:  # a call that fails is made again by the click command, which says why
        x = call(home, "exec.wait", {"exec": args[0], "timeout": 30.0})
        if x.get("state") in ENDED:
            break
    code = exit_code(x)
    sys.stdout.write(f"{code}\n")
    sys.stdout.flush()
    return code


def kill(home: str, args: list[str]) -> int:
    """``kill [-s SIG] [--grace SEC] EXEC...``: each cancelled, its id printed; a ref
    that fails is said and the exit code is 1."""
    sig, grace, refs = "TERM", KILL_GRACE, []
    it = iter(args)
    for arg in it:
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in ("-s", "--signal", "--grace") or (arg.startswith("-s") and arg != "-s"):
            if arg.startswith("-s") and len(arg) > 2:
                name, value = "-s", arg[2:]
            elif not eq:
                value = next(it, "")
            if not value or value.startswith("-"):
                raise Decline
            if name == "--grace":
                try:
                    grace = float(value)
                except ValueError:
                    raise Decline from None
                if grace != grace or grace in (float("inf"), float("-inf")):
                    raise Decline
            else:
                sig = value
        elif arg.startswith("-"):
            raise Decline
        else:
            refs.append(arg)
    if not refs:
        raise Decline
    from tether.client import oneshot

    try:
        oneshot.check(home)
    except Exception:
        raise Decline from None
    sock = os.path.join(home, SOCKET_NAME)
    status = 0
    for k, ref in enumerate(refs):
        try:
            x = oneshot.call_once(sock, "exec.cancel", {"exec": ref, "signal": sig,
                                                        "grace": grace,
                                                        "reason": "tether kill"})
        except Exception as e:  # the daemon's answer: said as the click command says it
            from tether.client.errors import TetherError

            if not isinstance(e, TetherError):
                raise
            _fail(e.message, 1)
            status = 1
            continue
        if x is None:  # no daemon answered: the full client (it starts one) from here
            if k == 0:
                raise Decline
            return _kill_fully(home, refs[k:], sig, grace, status)
        sys.stdout.write(f"{x['id']}\n")
        sys.stdout.flush()
    return status


def _kill_fully(home: str, refs: list[str], sig: str, grace: float, status: int) -> int:
    from tether.client.blocking import Client
    from tether.client.errors import TetherError

    c = Client(home)
    for ref in refs:
        try:
            x = c.exec_cancel(ref, signal=sig, grace=grace, reason="tether kill")
            sys.stdout.write(f"{x.id}\n")
            sys.stdout.flush()
        except TetherError as e:
            _fail(e.message, 1)
            status = 1
    return status
