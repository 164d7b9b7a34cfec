"""The hook program: ``python -m tether.agent.hook --home H PROVIDER EVENT [PAYLOAD]``.

An agent's own hook mechanism runs it (Claude Code's, Codex's and Gemini CLI's hooks), on
every tool call, so it imports only the SDK, never click or rich: it reads the payload
(from stdin, or from its last argument when one is given — Codex's older ``notify``, which
must not touch Codex's stdin, the terminal), calls ``agent.hook`` as
``TETHER_SESSION``/``TETHER_TOKEN``, prints the reply in the agent's own format and exits
with its code. It never blocks the agent because of tether: outside a session, or when no
daemon answered within ``session.RETRY_BUDGET`` (it never starts one), it says why on
stderr and exits 0 (exit 2 would deny a tool call). ``--home`` is accepted for the command
line's sake; the session's ``TETHER_HOME`` decides. ``tether agent hook …`` runs the same code.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not ``typing``'s: every import here costs each tool call
if TYPE_CHECKING:
    from typing import Any

USAGE = "usage: python -m tether.agent.hook [--home HOME] PROVIDER EVENT [PAYLOAD]"
#: The daemon's socket in a home (``HomeLayout.socket``, whose module costs a hook call
#: more than the rest of its imports together; a unit test keeps the two the same).
SOCKET_NAME = "tether.sock"


def run(provider: str, event: str, payload_arg: str | None) -> int:
    """Deliver one hook call; returns the exit code the agent must see. The common case
    imports only ``json``, ``socket`` and the home-trust check: one call with the
    standard library while the daemon answers it. Anything else (outside a session, no
    daemon, an error) takes the full client's path, which explains itself."""
    env = os.environ
    home, session, token = (env.get(k) for k in ("TETHER_HOME", "TETHER_SESSION",
                                                 "TETHER_TOKEN"))
    if not (home and session and token):
        return _run_with_client(event, provider, None)
    raw = payload_arg if payload_arg is not None else sys.stdin.read()
    payload = _parse(raw)
    from tether.client.oneshot import call_once

    own = os.path.join(home, SOCKET_NAME)
    sock = env.get("TETHER_SOCKET") or own
    params = {"session": session, "token": token, "provider": provider, "event": event,
              "payload": payload}
    try:
        result = call_once(sock, "agent.hook", params, home=home if sock == own else None)
    except Exception as e:
        from tether.client.errors import TetherError  # only now: it imports enum, typing

        if not isinstance(e, TetherError):
            raise
        if e.code == "RATE_LIMITED":  # the full client waits retry_after and resends
            return _run_with_client(event, provider, payload)
        print(f"tether: hook {event} not delivered: {e.message}", file=sys.stderr)
        return 0
    if result is None:
        return _run_with_client(event, provider, payload)
    import binascii

    return _reply(binascii.a2b_base64(result.get("stdout") or ""),
                  int(result.get("exit_code", 0)))


def _parse(raw: str) -> dict[str, Any]:
    from tether.client import wirejson

    try:
        payload = wirejson.loads(raw) if raw.strip() else {}
    except ValueError:
        payload = {"raw": raw}
    return payload if isinstance(payload, dict) else {"value": payload}


def _reply(stdout: bytes, code: int) -> int:
    sys.stdout.buffer.write(stdout)
    sys.stdout.flush()
    return code


def _run_with_client(event: str, provider: str, payload: dict[str, Any] | None) -> int:
    """The call through the full client, which retries for ``session.RETRY_BUDGET``
    (never starting a daemon); outside a session (``payload`` not read), says so."""
    from tether.agent.session import NotAnAgent, Session, agent_side
    from tether.client.errors import TetherError

    try:
        s = Session.from_env()
    except NotAnAgent as e:
        print(f"tether: hook {event} ignored: {e}", file=sys.stderr)
        return 0
    assert payload is not None
    try:
        with agent_side():
            r = s.client.agent_hook(s.session, s.token, provider, event, payload)
    except TetherError as e:
        print(f"tether: hook {event} not delivered: {e.message}", file=sys.stderr)
        return 0
    return _reply(r.stdout, r.exit_code)


def main(argv: list[str] | None = None) -> int:
    """Parse by hand: argparse alone would add milliseconds to every hook call. Options
    come first; after PROVIDER every word is an argument (a payload may start with -)."""
    args = list(sys.argv[1:] if argv is None else argv)
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt == "--":
            break
        if opt == "--home" and args:
            args.pop(0)
        elif not opt.startswith("--home="):
            print(USAGE, file=sys.stderr)
            return 2
    if not 2 <= len(args) <= 3:
        print(USAGE, file=sys.stderr)
        return 2
    return run(args[0], args[1], args[2] if len(args) == 3 else None)


if __name__ == "__main__":
    sys.exit(main())
