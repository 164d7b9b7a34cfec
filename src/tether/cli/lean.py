"""What the CLI's lean paths share (``fast``, ``runfast``, ``attachfast``): how they hand
a command line to click (``Decline``), the home and its socket as strings, one call, and
the exit code and last words of an exec — with the standard library only, and importing
none of the modules that use it, so that they form no cycle."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not ``typing``'s: every import here costs every command
if TYPE_CHECKING:
    from typing import Any

SOCKET_NAME = "tether.sock"  # HomeLayout.socket; a unit test keeps them the same


class Decline(Exception):
    """This path does not handle the command line: the click CLI will (with ``argv``,
    when given, instead of the command line's)."""

    def __init__(self, argv: list[str] | None = None) -> None:
        super().__init__()
        self.argv = argv


def resolve_home(home: str | None) -> str:
    """``daemonctl.resolve_home`` with ``os.path`` (a unit test keeps them the same)."""
    if home:
        return _absolute(os.path.expanduser(home))
    env = os.environ.get("TETHER_HOME")
    if env:
        return _absolute(os.path.expanduser(env))
    xdg = os.environ.get("XDG_STATE_HOME")
    base = os.path.expanduser(xdg) if xdg else os.path.join(os.path.expanduser("~"),
                                                          ".local", "state")
    return _absolute(os.path.join(base, "tether"))


def _absolute(path: str) -> str:
    """``Path.absolute()``: joined to the working directory, not normalized."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def call(home: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """``method``'s result, or ``Decline`` so that the full client makes the call."""
    from tether.client.oneshot import call_once

    try:
        result = call_once(os.path.join(home, SOCKET_NAME), method, params, home=home)
    except Exception as e:  # a TetherError: the click path renders it
        raise Decline from e
    if result is None:
        raise Decline
    return result


def exit_code(x: dict[str, Any]) -> int:
    """``terminal.exit_code``: the exec's own, else 128+N for signal N, else 1 if FAILED."""
    if x.get("exit_code") is not None:
        return int(x["exit_code"])
    if x.get("signal"):
        return 128 + int(x["signal"])
    return 1 if x.get("state") == "FAILED" else 0


def attach_report(info: dict[str, Any], how: str, exit: dict[str, Any] | None) -> int:
    """Say how an attachment ended (``how``: detached, exited or lost), naming the exec by
    its name; the CLI's exit code. Both attach paths end with these words."""
    import sys

    exec_id = str(info["exec"])
    name = info.get("name")
    ref = name if isinstance(name, str) and name else exec_id
    if how == "detached":
        what = f"{name} ({exec_id})" if ref != exec_id else exec_id
        sys.stderr.write(f"\r\ndetached from {what}; re-attach with `tether attach {ref}`\n")
        return 0
    if how == "lost" or exit is None:
        sys.stderr.write(f"\r\ntether: lost the connection to {exec_id}'s monitor; "
                         f"see `tether ps -a` for what happened\n")
        return 1
    code = exit_code({"state": exit.get("state", "FINISHED"),
                      "exit_code": exit.get("exit_code"), "signal": exit.get("signal")})
    what = (f"killed by signal {exit['signal']}" if exit.get("signal")
            else f"exited with code {exit.get('exit_code')}")
    sys.stderr.write(f"\r\n[{exec_id} {what}]\n")
    return code
