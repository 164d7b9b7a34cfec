"""The ``tether`` console script: the hot commands without click, rich or msgspec.

A command's wall time is mostly imports, and ``tether ps``, ``status`` and ``logs`` are what
scripts and people run most. When the command line is one of their plain forms, this
module makes the calls with ``client.oneshot`` (``json``, ``socket``) and prints exactly
what the click command would. Anything else — another command, ``--help``, an option it
does not know, no daemon answering (the full client auto-starts one), an error reply, a
home that fails the trust check, a terminal on stdout for ``ps`` (rich lays tables out to
its width) — goes to the click CLI (``tether.cli.main``) as if this module were not there;
a read-only call that fails here is simply made again there, which renders the error.
``tests/e2e/test_cli_fast.py`` compares both paths' bytes. ``run``, ``wait`` and ``kill``
take the same way through :mod:`tether.cli.runfast` (imported only for them), and so
does fleet mode (``TETHER_FLEET_URL``): always click's.
"""

from __future__ import annotations

import os
import sys

from tether.cli.lean import SOCKET_NAME as SOCKET_NAME  # re-exported: a unit test reads it
from tether.cli.lean import Decline, resolve_home
from tether.cli.lean import call as _call

TYPE_CHECKING = False  # not ``typing``'s: every import here costs every command
if TYPE_CHECKING:
    from collections.abc import Callable

def main() -> None:
    args = sys.argv[1:]
    try:
        code = run(args)
    except Decline as e:
        args, code = e.argv or args, None
    except KeyboardInterrupt:  # click's words for it
        sys.stderr.write("\nAborted!\n")
        code = 1
    if code is None:
        from tether.cli.main import cli

        cli(args, prog_name="tether")
    sys.exit(code)


def run(argv: list[str]) -> int | None:
    """The exit code of a command handled here, else ``None`` (or ``Decline``)."""
    home = None
    while argv and argv[0].startswith("--home"):
        if argv[0] == "--home" and len(argv) > 1:
            home, argv = argv[1], argv[2:]
        elif argv[0].startswith("--home="):
            home, argv = argv[0].removeprefix("--home="), argv[1:]
        else:
            return None
    command = COMMANDS.get(argv[0]) if argv else None
    if command is None or "TETHER_FLEET_URL" in os.environ \
            or "TETHER_FLEET_URL_FILE" in os.environ:
        return None  # fleet mode (its variables are the root group's): click's
    return command(resolve_home(home), argv[1:])


def _flags(args: list[str], known: set[str]) -> set[str]:
    """The flags among ``known`` that ``args`` holds, which must be nothing else."""
    if not set(args) <= known or len(set(args)) != len(args):
        raise Decline
    return set(args)


def ps(home: str, args: list[str]) -> int:
    from tether.cli import pstable  # only here: it imports re, shlex and datetime

    flags = _flags(args, {"-a", "--all", "--json"})
    as_json = "--json" in flags
    if not as_json and (sys.stdout.isatty() or "FORCE_COLOR" in os.environ
                        or "TTY_COMPATIBLE" in os.environ):
        raise Decline  # rich draws for a terminal (and colours on request)
    execs = _call(home, "exec.list", {"sandbox": None,
                                      "all": bool(flags & {"-a", "--all"})})["execs"]
    if as_json:
        import json

        sys.stdout.write(json.dumps([pstable.exec_row(x) for x in execs]) + "\n")
        return 0
    names = (pstable.sandbox_names(_call(home, "sandbox.list", {"all": True})["sandboxes"])
             if pstable.named_sandboxes(execs) else None)
    text = pstable.plain(*pstable.exec_cells(execs, names))
    if text is None:
        raise Decline
    sys.stdout.write(text)
    return 0


def status(home: str, args: list[str]) -> int:
    _flags(args, set())
    st = _call(home, "daemon.status", {})
    counts = st.get("counts") or {}
    by_state = counts.get("execs") or {}
    execs = ", ".join(f"{k.lower()} {v}" for k, v in sorted(by_state.items())) or "none"
    lines = [f"daemon   pid {st['pid']}, {st['state']}, up {st.get('uptime', 0.0):.0f}s, "
             f"version {st['version']}", f"home     {st['home']}"]
    for name, rt in (st.get("runtimes") or {}).items():
        ok = rt.get("available")
        detail = rt.get("version") or ""
        if not ok and rt.get("reason"):
            detail = rt["reason"]
        mark = {True: "available", False: "unavailable", None: "not probed"}[ok]
        lines.append(f"{name:<8} {mark}" + (f" ({detail})" if detail else ""))
    lines.append(f"execs    {execs} (watched {counts.get('watched', 0)})")
    lines.append(f"sandboxes {counts.get('sandboxes', 0)}, clients "
                 f"{counts.get('connections', 0)}")
    lines += [f"warning  {w}" for w in st.get("warnings") or ()]
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()
    return 0


def logs(home: str, args: list[str]) -> int:
    """``logs [--stdout|--stderr] EXEC`` to its end: both streams interleaved in the order
    written, each to its own stream (or the one asked for, to stdout). Should a call fail
    once bytes are out, the click command carries on from the offset reached."""
    refs = [a for a in args if not a.startswith("-")]
    flags = _flags([a for a in args if a.startswith("-")], {"--stderr", "--stdout"})
    if len(refs) != 1:
        raise Decline
    x = _call(home, "exec.get", {"exec": refs[0]})
    tty = x["spec"].get("tty")
    stream = ("all" if len(flags) != 1 else "stderr" if "--stderr" in flags else
              "pty" if tty else "stdout")
    import binascii

    sinks = {"stderr": sys.stderr.buffer}
    offset = 0
    try:
        while True:
            try:
                chunk = _call(home, "exec.logs", {"exec": x["id"], "stream": stream,
                                                  "offset": offset, "limit": 1024 * 1024,
                                                  "wait": 0.0})
            except Decline:
                if offset == 0:
                    raise
                raise Decline(["--home", home, "logs", *args, "--offset", str(offset)]
                              ) from None
            data = binascii.a2b_base64(chunk.get("data") or "")
            if not data:
                return 0
            offset = chunk["offset"]
            at = 0
            for name, n in chunk.get("runs") or [["stdout", len(data)]]:
                sink = sinks.get(name, sys.stdout.buffer)
                sink.write(data[at:at + n])
                sink.flush()
                at += n
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _lean(name: str) -> Callable[[str, list[str]], int]:
    """A command of :mod:`tether.cli.runfast` (``run``, ``wait``, ``kill``), imported
    when it runs."""

    def command(home: str, args: list[str]) -> int:
        from tether.cli import runfast

        fn: Callable[[str, list[str]], int] = getattr(runfast, name)
        return fn(home, args)

    return command


COMMANDS: dict[str, Callable[[str, list[str]], int]] = {
    "ps": ps, "status": status, "logs": logs,
    "run": _lean("run"), "wait": _lean("wait"), "kill": _lean("kill")}


if __name__ == "__main__":
    main()
