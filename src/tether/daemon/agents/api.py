"""The ``agent.*`` and ``lineage.*`` methods. On ``agent.sock`` (``rate_limited``) each
lineage's calls draw from its rate limit's bucket."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec

from tether.agent import snapshot
from tether.agent.confinement import git_common_dir
from tether.agent.lifecycle import Thresholds
from tether.agent.providers import REGISTRY, for_command
from tether.agent.providers import get as get_provider
from tether.daemon.execs.api import exec_view, without_tether_secrets
from tether.daemon.root import Daemon
from tether.egress.policy import BadEntry, Policy
from tether.model.errors import RpcCode, TetherError
from tether.model.records import AgentConfig, LineageRecord
from tether.model.states import LINEAGE_LIVE
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler
from tether.store.base import Page

METHODS: dict[str, type[Any]] = {
    "agent.start": m.AgentStart,
    "agent.turn": m.AgentTurn,
    "agent.heartbeat": m.AgentHeartbeat,
    "agent.authorize_tool": m.AgentAuthorize,
    "agent.handoff": m.AgentHandoff,
    "agent.hook": m.AgentHook,
    "agent.reap": m.Empty,
    "lineage.list": m.LineageList,
    "lineage.get": m.LineageRef,
    "lineage.resolve": m.LineageResolve,
    "lineage.finish": m.LineageFinish,
}
#: lineage.finish stops the agent, then commits, pushes and runs the hand-off command:
#: seconds to minutes.
LONG = frozenset({"agent.start", "lineage.resolve", "lineage.finish"})

#: All a sandboxed agent can reach (on ``agent.sock``): its own session, by token.
AGENT_METHODS = frozenset({"daemon.health", "agent.turn", "agent.heartbeat",
                           "agent.authorize_tool", "agent.handoff", "agent.hook"})


def provider_for(argv0: str, cwd: str | None = None) -> str:
    p = for_command(argv0, cwd)
    return p.name if p is not None else "generic"


def claim_worktree(path: str, issue: str | None, *, force: bool, provider: str,
                   issue_id: str | None = None) -> None:
    """Refuse a worktree that belongs to another issue (unless forced); else claim it,
    with ``issue_id`` as its ``issueId`` (``claim_for_issue`` derives one without it)."""
    from tether.agent import worktree as wt

    if not os.path.isdir(path):
        raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                          f"worktree {path!r} is not an existing directory")
    if not issue:
        return  # no issue to guard; the session still keeps .agent/state.json current
    try:
        ids = {"issue_id": issue_id} if issue_id else {}
        wt.claim_for_issue(path, issue, force=force, provider_name=provider, lock_timeout=1.0,
                           **ids)
    except wt.IdentifierMismatch as e:
        raise TetherError(RpcCode.CONFLICT, "WORKTREE_IN_USE", str(e),
                          {"worktree": path}) from None
    except wt.WorktreeError as e:
        raise TetherError(RpcCode.INVALID_STATE, "WORKTREE_BROKEN", str(e),
                          {"worktree": path}) from None


def handlers(d: Daemon, *, rate_limited: bool = False) -> dict[str, Handler]:
    agents, store = d.agents, d.store
    owned = d.tasks.owned  # a client that goes away must not leave a change half done
    limit = d.agent_limit.take if rate_limited else None

    def session(p: m.AgentHeartbeat | m.AgentTurn | m.AgentAuthorize | m.AgentHandoff
                | m.AgentHook, method: str) -> LineageRecord:
        """The lineage a call authenticates as (its token), within its rate limit."""
        rec = agents.authenticate(p.session, p.token)
        if limit is not None:
            limit(rec, method)
        return rec

    async def start(p: m.AgentStart, c: Connection) -> Any:
        refused = agents.reload_providers()  # <home>/providers/*.toml, edited at any time
        provider = p.provider or provider_for(p.argv[0], p.cwd)
        if refused and provider not in REGISTRY:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"unknown agent provider {provider!r}; refused provider "
                              f"files: {'; '.join(refused)}")
        if p.cwd is not None and not os.path.isdir(p.cwd):
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"cwd {p.cwd!r} is not an existing directory")
        cfg = msgspec.convert(msgspec.structs.replace(p, provider=provider), AgentConfig,
                              from_attributes=True)  # the params are an AgentOptions
        cfg.env = without_tether_secrets(cfg.env)
        try:
            get_provider(provider)
            Thresholds(p.aging_pct, p.dying_pct)
        except (KeyError, ValueError) as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS", str(e.args[0])) from None
        try:
            Policy.parse(p.allow_domains)
        except BadEntry as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"allow_domains: {e}") from None
        if p.issue_id is not None and not (p.worktree and p.issue):
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              "issue_id needs worktree and issue")
        if p.worktree:
            claim_worktree(p.worktree, p.issue, force=p.force, provider=provider,
                           issue_id=p.issue_id)
            cfg.git_dir = await asyncio.to_thread(git_common_dir, p.worktree)
        rec = await owned(agents.start(cfg, p.name, p.request_key))
        out = agents.view(rec)
        x = store.get_exec(rec.exec_id) if rec.exec_id else None
        out["exec_view"] = exec_view(d, x) if x is not None else None
        return out

    async def turn(p: m.AgentTurn, c: Connection) -> Any:
        rec = session(p, "agent.turn")
        size = snapshot.size([p.messages, p.config])
        if size > snapshot.MAX_TURN_BYTES:
            raise TetherError(RpcCode.INVALID_PARAMS, "TURN_TOO_LARGE",
                              f"this turn's messages and config take {size} bytes as JSON, "
                              f"more than the {snapshot.MAX_TURN_BYTES} a turn may carry; "
                              "nothing was recorded: send the turn again with fewer or "
                              "shorter messages (the drain snapshot is what a revival "
                              "resumes from, not a transcript)",
                              {"limit": snapshot.MAX_TURN_BYTES, "size": size})
        return await agents.turn(rec, context_pct=p.context_pct, usage=p.usage, model=p.model,
                                 messages=p.messages, config=p.config)

    async def heartbeat(p: m.AgentHeartbeat, c: Connection) -> Any:
        return agents.heartbeat(session(p, "agent.heartbeat"))

    async def authorize(p: m.AgentAuthorize, c: Connection) -> Any:
        return agents.authorize_tool(session(p, "agent.authorize_tool"), p.tool)

    async def handoff(p: m.AgentHandoff, c: Connection) -> Any:
        return agents.handoff(session(p, "agent.handoff"), p.text)

    async def hook(p: m.AgentHook, c: Connection) -> Any:
        rec = session(p, "agent.hook")
        try:
            return await agents.hook(rec, p.provider, p.event, p.payload)
        except KeyError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "UNKNOWN_PROVIDER",
                              str(e.args[0])) from None

    async def reap(p: m.Empty, c: Connection) -> Any:
        return agents.reap()

    async def lineage_list(p: m.LineageList, c: Connection) -> Any:
        statuses = (tuple(p.statuses) if p.statuses else None if p.all
                    else tuple(LINEAGE_LIVE))
        rows, total = store.page_lineages(Page(p.limit, p.offset, p.newest_first, p.query),
                                          statuses=statuses)
        return {"lineages": [agents.view(x) for x in rows], "total": total}

    async def lineage_get(p: m.LineageRef, c: Connection) -> Any:
        return agents.view(agents.resolve(p.lineage), detail=True)

    async def lineage_resolve(p: m.LineageResolve, c: Connection) -> Any:
        return agents.view(await owned(agents.resolve_ask(agents.resolve(p.lineage),
                                                          p.action)))

    async def lineage_finish(p: m.LineageFinish, c: Connection) -> Any:
        rec, outcome = await owned(agents.finish(agents.resolve(p.lineage), commit=p.commit))
        return {**agents.view(rec), "handoff": outcome}

    return {"agent.start": start, "agent.turn": turn, "agent.heartbeat": heartbeat,
            "agent.authorize_tool": authorize, "agent.handoff": handoff, "agent.hook": hook,
            "agent.reap": reap, "lineage.list": lineage_list, "lineage.get": lineage_get,
            "lineage.resolve": lineage_resolve, "lineage.finish": lineage_finish}
