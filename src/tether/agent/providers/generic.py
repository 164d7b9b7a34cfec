"""The generic provider: any command that speaks the tether agent protocol itself
(``agent.turn`` etc. over ``TETHER_SOCKET``, e.g. with :class:`tether.agent.session.Session`).
It resumes by running the same command again with ``TETHER_DRAIN_SNAPSHOT`` set."""

from __future__ import annotations

from typing import Any

from tether.agent.providers.base import HookEvent, LaunchPlan, Provider, SessionContext


class GenericProvider(Provider):
    name = "generic"

    def launch(self, argv: list[str], ctx: SessionContext) -> LaunchPlan:
        return LaunchPlan(argv=list(argv))

    def resume(self, argv: list[str], provider_session_id: str | None, snapshot_path: str,
               ctx: SessionContext) -> LaunchPlan:
        env = {"TETHER_DRAIN_SNAPSHOT": snapshot_path}
        if provider_session_id:
            env["TETHER_PROVIDER_SESSION"] = provider_session_id
        return LaunchPlan(argv=list(argv), env=env)

    def parse_hook(self, event: str, payload: dict[str, Any]) -> HookEvent:
        return HookEvent(kind="other", raw=payload)
