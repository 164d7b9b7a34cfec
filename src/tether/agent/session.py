"""The agent side of the tether agent protocol.

An agent started by tether finds ``TETHER_HOME``, ``TETHER_SESSION`` and
``TETHER_TOKEN`` in its environment; :meth:`Session.from_env` picks them up::

    from tether.agent.session import Session

    s = Session.from_env()
    previous = s.restored_messages()          # after a revival: the conversation so far
    reply = s.turn(context_pct=72.5, messages=[{"role": "assistant", "content": "..."}])
    if reply.lifecycle == "AGING":
        s.handoff("what my successor needs to know")
    if not s.authorize_tool("Bash").allowed:
        ...                                   # fenced: the context is nearly full
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.client.errors import DaemonUnavailable

if TYPE_CHECKING:  # imported on first use: the hook program may never need the client
    from tether.client.blocking import Client
    from tether.client.replies import Handoff, Heartbeat, ToolDecision, TurnReply

#: Seconds an agent-side call keeps retrying while no daemon answers (a restart, an
#: upgrade) before it fails with a clear error. It never starts a daemon: one started
#: from an agent would inherit the agent's environment and token and take the home's
#: lock, and the supervisor's own daemon would then refuse to start.
RETRY_BUDGET = 5.0


@contextlib.contextmanager
def agent_side() -> Iterator[None]:
    """Say what an agent should do when no daemon answered: not start one."""
    try:
        yield
    except DaemonUnavailable as e:
        raise DaemonUnavailable(
            f"{e.message.split('; ')[0]} (retried {RETRY_BUDGET:g} s); an agent never "
            "starts a daemon: the one that started this session is gone or restarting, "
            "and whoever runs tether must start it again") from None


class NotAnAgent(RuntimeError):
    """The process was not started by tether as an agent session."""


@dataclass
class Session:
    home: str
    session: str
    token: str
    snapshot_path: str | None = None
    handoff_path: str | None = None
    socket: str | None = None  # TETHER_SOCKET: in a sandbox, the restricted agent socket
    _client: Client | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Session:
        e = os.environ if env is None else env
        missing = [k for k in ("TETHER_HOME", "TETHER_SESSION", "TETHER_TOKEN") if not e.get(k)]
        if missing:
            raise NotAnAgent(f"{', '.join(missing)} not set: start the agent with "
                             "`tether run --agent generic -- CMD` (or claude / codex)")
        return cls(home=e["TETHER_HOME"], session=e["TETHER_SESSION"], token=e["TETHER_TOKEN"],
                   snapshot_path=e.get("TETHER_DRAIN_SNAPSHOT"),
                   handoff_path=e.get("TETHER_HANDOFF"), socket=e.get("TETHER_SOCKET"))

    @property
    def client(self) -> Client:
        if self._client is None:
            from tether.client.blocking import Client
            from tether.model.layout import HomeLayout

            # In a sandbox TETHER_SOCKET is the restricted agent socket.
            own = self.socket is None or Path(self.socket) == HomeLayout(Path(self.home)).socket
            self._client = Client(self.home, autostart=False, reconnect=RETRY_BUDGET,
                                  socket=None if own else self.socket)
        return self._client

    def turn(self, *, context_pct: float | None = None, usage: dict[str, int] | None = None,
             model: str | None = None, messages: list[dict[str, Any]] | None = None,
             config: dict[str, Any] | None = None) -> TurnReply:
        """Report a completed turn; the reply carries the lifecycle and instructions."""
        with agent_side():
            return self.client.agent_turn(self.session, self.token, context_pct=context_pct,
                                          usage=usage, model=model, messages=messages,
                                          config=config)

    def heartbeat(self, activity: str | None = None) -> Heartbeat:
        with agent_side():
            return self.client.agent_heartbeat(self.session, self.token, activity=activity)

    def authorize_tool(self, tool: str, input: Any = None) -> ToolDecision:
        """Whether the tool call is allowed (``allowed``), why, and the lifecycle."""
        with agent_side():
            return self.client.agent_authorize_tool(self.session, self.token, tool, input)

    def handoff(self, text: str) -> Handoff:
        with agent_side():
            return self.client.agent_handoff(self.session, self.token, text)

    def restored_messages(self) -> list[dict[str, Any]]:
        """The conversation from the drain snapshot this attempt was revived from."""
        if not self.snapshot_path or not os.path.exists(self.snapshot_path):
            return []
        from pathlib import Path

        from tether.agent import snapshot

        return list(snapshot.read(Path(self.snapshot_path)).get("messages", []))

    def predecessor_handoff(self) -> str | None:
        if not self.handoff_path or not os.path.exists(self.handoff_path):
            return None
        with open(self.handoff_path) as f:
            return f.read()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


__all__ = ["NotAnAgent", "Session", "agent_side"]
