"""``tether attach`` without click, the SDK's RPC client or msgspec: the common case only.

An attach client stays resident for the whole session, so its start and its memory
are paid by every attached terminal. When the command line is a plain
``[--home H] attach [--detach-keys K] [--read-only] [--replay N] EXEC`` and the exec's
monitor socket is found from the home's files, it attaches from here; anything else —
``--help``, a usage error, an exec that is not running or not found by its files, an
untrusted home — returns None and the caller runs the full CLI, which says the same
things it always has.
"""

from __future__ import annotations

import os

from tether.client.attach import Attachment, find_socket
from tether.client.daemonctl import resolve_home, trusted
from tether.client.errors import TetherError
from tether.model.layout import HomeLayout
from tether.monitor.attachproto import DEFAULT_REPLAY

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
    from tether.cli.terminal import (
        DEFAULT_DETACH_KEYS,
        BadDetachKeys,
        attach_session,
        parse_detach_keys,
    )

    try:
        keys = parse_detach_keys(str(opts.get("--detach-keys") or
                                     os.environ.get("TETHER_DETACH_KEYS") or
                                     DEFAULT_DETACH_KEYS))
        replay = int(opts.get("--replay", DEFAULT_REPLAY))
        home = resolve_home(str(opts["--home"]) if "--home" in opts else None)
        trusted(home)
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
