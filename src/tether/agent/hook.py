"""The hook program: ``python -m tether.agent.hook --home H PROVIDER EVENT [PAYLOAD]``.

An agent's own hook mechanism runs it (Claude Code's hooks, Codex's ``notify``), on every
tool call for Claude, so it imports only the SDK and the providers, never click or rich:
it reads the payload (stdin, or the last argument for a provider with
``payload_in_argv``), calls ``agent.hook`` as ``TETHER_SESSION``/``TETHER_TOKEN``, prints
the reply in the agent's own format and exits with its code. It never blocks the agent
because of tether: outside a session, or when no daemon answered within
``session.RETRY_BUDGET`` (it never starts one), it says why on stderr and exits 0 (exit 2
would deny a tool call). ``--home`` is accepted for the command line's sake; the
session's ``TETHER_HOME`` decides. ``tether agent hook …`` runs the same code.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.agent.session import Session

USAGE = "usage: python -m tether.agent.hook [--home HOME] PROVIDER EVENT [PAYLOAD]"


def run(provider: str, event: str, payload_arg: str | None) -> int:
    """Deliver one hook call; returns the exit code the agent must see."""
    from tether.agent.providers import REGISTRY
    from tether.agent.session import NotAnAgent, Session, agent_side
    from tether.client.errors import TetherError

    try:
        s = Session.from_env()
    except NotAnAgent as e:
        print(f"tether: hook {event} ignored: {e}", file=sys.stderr)
        return 0
    prov = REGISTRY.get(provider)
    in_argv = prov is not None and prov.payload_in_argv
    raw = (payload_arg or "") if in_argv else sys.stdin.read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        payload = {"raw": raw}
    if not isinstance(payload, dict):
        payload = {"value": payload}
    try:
        with agent_side():
            stdout, code = _deliver(s, provider, event, payload)
    except TetherError as e:
        print(f"tether: hook {event} not delivered: {e.message}", file=sys.stderr)
        return 0
    sys.stdout.buffer.write(stdout)
    sys.stdout.flush()
    return code


def _deliver(s: Session, provider: str, event: str, payload: dict[str, Any]
             ) -> tuple[bytes, int]:
    """The reply's stdout and exit code: one call with the standard library when the
    daemon answers it (the common case, and no msgspec to import), else through the full
    client, which retries for ``session.RETRY_BUDGET`` (never starting a daemon)."""
    import base64
    from pathlib import Path

    from tether.client.oneshot import call_once
    from tether.model.layout import HomeLayout

    params = {"session": s.session, "token": s.token, "provider": provider, "event": event,
              "payload": payload}
    own = HomeLayout(Path(s.home)).socket
    sock = Path(s.socket) if s.socket else own
    result = call_once(sock, "agent.hook", params, home=Path(s.home) if sock == own else None)
    if result is not None:
        return base64.b64decode(result.get("stdout") or ""), int(result.get("exit_code", 0))
    r = s.client.agent_hook(s.session, s.token, provider, event, payload)
    return r.stdout, r.exit_code


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
