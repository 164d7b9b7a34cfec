"""The daemon's JSON-RPC methods: validate, resolve references, call a service.

Each handler is thin on purpose; the services own the behaviour.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any, Protocol, cast

import msgspec

from tether import __version__
from tether.agent import snapshot
from tether.agent.lifecycle import Thresholds
from tether.agent.providers import REGISTRY, for_command
from tether.agent.providers import get as get_provider
from tether.daemon import cost_api, digest_api, lineage_api, metrics_api
from tether.daemon.agents import AgentService, git_common_dir
from tether.daemon.agents.ratelimit import AgentRateLimit
from tether.daemon.cost import CostService
from tether.daemon.digest import DigestService
from tether.daemon.events import MAX_TOTAL_SUBSCRIPTIONS, EventBus
from tether.daemon.execs import ExecService
from tether.daemon.outbox import HookService
from tether.daemon.outbox.api import HOOK_METHODS, hook_handlers
from tether.daemon.retention import RetentionService
from tether.daemon.sandboxes import SandboxService
from tether.daemon.scheduler import Scheduler
from tether.daemon.scheduler.handlers import schedule_handlers
from tether.daemon.signals import parse_signal
from tether.daemon.tasks import Tasks
from tether.egress.policy import BadEntry, Policy
from tether.model.errors import RpcCode, TetherError, events_purged
from tether.model.layout import HomeLayout
from tether.model.records import (
    AgentConfig,
    ExecRecord,
    ExecSpec,
    LineageRecord,
    RuntimeName,
    SandboxSpec,
    to_builtins,
)
from tether.model.states import LINEAGE_LIVE, DaemonState
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler, Router
from tether.runtime.registry import Runtimes
from tether.store import Store
from tether.store.base import Page


class Daemon(Protocol):
    """What the handlers use of the daemon (the composition root implements it; this
    module never imports it, so there is no cycle)."""

    layout: HomeLayout
    store: Store
    bus: EventBus
    execs: ExecService
    sandboxes: SandboxService
    agents: AgentService
    agent_limit: AgentRateLimit
    digest: DigestService
    cost: CostService
    hooks: HookService
    scheduler: Scheduler
    retention: RetentionService
    runtimes: Runtimes
    tasks: Tasks
    state: DaemonState
    instance: str
    started_at: float
    recovery_summary: dict[str, Any]
    warnings: list[str]

    def connection_count(self) -> int: ...

    def server_accepting(self) -> bool: ...

    def rpc_requests(self) -> Counter[tuple[str, str]]: ...

MAX_SUBSCRIPTIONS = 64  # per connection; each may queue up to QUEUE_LIMIT events

# Methods that may wait on outside events; the RPC server runs them as tasks.
# sandbox.create and sandbox.start stay inline although a docker one takes seconds:
# a client's next request on the same connection may rely on the sandbox existing.
LONG_POLL_METHODS = {"exec.wait", "exec.logs", "sandbox.stop", "sandbox.delete",
                     "sandbox.copy", "agent.start", "lineage.resolve", "retention.prune",
                     *digest_api.LONG, *lineage_api.LONG}


#: tether's own secrets a client's environment may hold (``tether run`` sends the whole
#: shell's): never handed on to a command, least of all an agent (docs/SECURITY.md).
TETHER_SECRETS = ("TETHER_FLEET_URL",)


def without_tether_secrets(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in TETHER_SECRETS}


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


#: Every method and the type of its params (docs/PROTOCOL.md lists them). A table of its
#: own, apart from the handlers, so that tests can enumerate the protocol's surface.
METHODS: dict[str, type[Any]] = {
    "daemon.health": m.Empty,
    "daemon.status": m.Empty,
    "sandbox.create": m.SandboxCreate,
    "sandbox.get": m.SandboxRef,
    "sandbox.list": m.SandboxList,
    "sandbox.stop": m.SandboxStop,
    "sandbox.start": m.SandboxRef,
    "sandbox.delete": m.SandboxStop,
    "sandbox.copy": m.SandboxCopy,
    "exec.start": m.ExecStart,
    "exec.get": m.ExecRef,
    "exec.list": m.ExecList,
    "exec.wait": m.ExecWait,
    "exec.cancel": m.ExecCancel,
    "exec.logs": m.ExecLogs,
    "exec.remove": m.ExecRemove,
    "retention.prune": m.RetentionPrune,
    "retention.df": m.Empty,
    "events.list": m.EventsList,
    "events.subscribe": m.EventsSubscribe,
    "events.unsubscribe": m.EventsUnsubscribe,
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
    **digest_api.METHODS,
    **lineage_api.METHODS,
    **cost_api.METHODS,
    **HOOK_METHODS,
    **metrics_api.METHODS,
    "schedule.add": m.ScheduleAdd,
    "schedule.list": m.ScheduleList,
    "schedule.show": m.ScheduleShow,
    "schedule.pause": m.ScheduleRef,
    "schedule.resume": m.ScheduleRef,
    "schedule.run_now": m.ScheduleRef,
    "schedule.remove": m.ScheduleRef,
    "scheduler.status": m.SchedulerStatus,
}

#: All a sandboxed agent can reach (on ``agent.sock``): its own session, by token.
AGENT_METHODS = frozenset({"daemon.health", "agent.turn", "agent.heartbeat",
                           "agent.authorize_tool", "agent.handoff", "agent.hook"})


def build_router(d: Daemon, only: frozenset[str] | None = None) -> Router:
    """Every method, or only those in ``only`` (the restricted agent socket)."""
    r = Router()
    execs, sandboxes, store, bus, agents = d.execs, d.sandboxes, d.store, d.bus, d.agents
    # On agent.sock (``only``), each lineage's calls draw from its rate limit's bucket.
    limit = d.agent_limit.take if only is not None else None

    def session(p: m.AgentHeartbeat | m.AgentTurn | m.AgentAuthorize | m.AgentHandoff
                | m.AgentHook, method: str) -> LineageRecord:
        """The lineage a call authenticates as (its token), within its rate limit."""
        rec = agents.authenticate(p.session, p.token)
        if limit is not None:
            limit(rec, method)
        return rec

    def xview(rec: ExecRecord) -> dict[str, Any]:
        out = execs.view(rec)
        out["agent"] = agents.summary_for_exec(rec.id, rec.lineage) if rec.lineage else None
        return out

    def health(p: m.Empty, c: Connection) -> Any:  # never waits: called, not awaited
        if store.lost is not None:  # it answers reads, but accepts no more intent
            return {"status": "NOT_SERVING", "state": str(d.state),
                    "reason": f"STORE_LOST: the store {store.path} was {store.lost}"}
        serving = d.state == DaemonState.RUNNING and d.server_accepting()
        return {"status": "SERVING" if serving else "NOT_SERVING", "state": str(d.state)}

    async def status(p: m.Empty, c: Connection) -> Any:
        return {
            "pid": os.getpid(), "version": __version__, "state": str(d.state),
            "home": str(d.layout.root), "instance": d.instance, "epoch": store.epoch,
            "started_at": d.started_at, "uptime": time.time() - d.started_at,
            "runtime": "process",
            "runtimes": {rt.name: (await rt.status()).view() for rt in d.runtimes},
            "recovery": d.recovery_summary, "warnings": list(d.warnings),
            "counts": {"sandboxes": len(store.list_sandboxes()), "execs": store.count_execs(),
                       "watched": execs.live_count(), "connections": d.connection_count(),
                       "subscriptions": len(bus.subs)},
            "monitors": execs.monitors.status(),
        }

    async def sandbox_create(p: m.SandboxCreate, c: Connection) -> Any:
        flat = (p.runtime != m.FLAT_RUNTIME or p.workspace is not None or p.env or p.labels
                or p.network is not None or p.idle_timeout is not None or p.ttl is not None)
        if p.spec is not None and flat:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              "give either a spec or the runtime/workspace/env/labels/network "
                              "fields, not both (use --set to override the spec)")
        if p.spec is not None:
            from tether.sandbox.spec import SpecError, parse_spec, parse_spec_object

            if p.base_dir is not None and not os.path.isabs(p.base_dir):
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                                  "base_dir must be an absolute path")
            try:
                if isinstance(p.spec, str):
                    spec = parse_spec(p.spec, source=p.spec_name, overrides=p.set,
                                      tether_home=str(d.layout.root), base_dir=p.base_dir)
                else:  # the spec as an object: errors name spec.<key path>
                    spec = parse_spec_object(p.spec, overrides=p.set,
                                             tether_home=str(d.layout.root),
                                             base_dir=p.base_dir)
            except SpecError as e:
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_SPEC", e.message,
                                  {"path": e.path, "line": e.line}) from None
        else:
            # An unknown runtime is refused by the registry, with the list of known ones.
            spec = SandboxSpec(runtime=cast(RuntimeName, p.runtime), workspace=p.workspace,
                               env=p.env,
                               labels=p.labels, network=p.network,
                               idle_timeout=p.idle_timeout, ttl=p.ttl)
        spec.ephemeral = p.ephemeral
        return to_builtins(await owned(sandboxes.create(p.name, spec)))

    async def sandbox_get(p: m.SandboxRef, c: Connection) -> Any:
        return to_builtins(sandboxes.resolve(p.sandbox))

    async def sandbox_list(p: m.SandboxList, c: Connection) -> Any:
        return {"sandboxes": to_builtins(store.list_sandboxes(include_deleted=p.all))}

    owned = d.tasks.owned  # a client that goes away must not leave a change half done

    async def sandbox_stop(p: m.SandboxStop, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.stop(sandboxes.resolve(p.sandbox), p.grace)))

    async def sandbox_start(p: m.SandboxRef, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.start(sandboxes.resolve(p.sandbox))))

    async def sandbox_delete(p: m.SandboxStop, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.delete(sandboxes.resolve(p.sandbox),
                                                        p.grace, p.force)))

    async def sandbox_copy(p: m.SandboxCopy, c: Connection) -> Any:
        return await owned(sandboxes.copy(sandboxes.resolve(p.sandbox), p.direction,
                                          p.src, p.dst))

    async def exec_start(p: m.ExecStart, c: Connection) -> Any:
        sb = sandboxes.resolve(p.sandbox)
        spec = msgspec.convert(p, ExecSpec, from_attributes=True)  # the params are one
        spec.env = without_tether_secrets(spec.env)
        spec.stdin = p.stdin or p.tty
        return xview(await execs.start(sb, spec, p.request_key,
                                       unconfined_ok=p.unconfined_ok))

    async def exec_get(p: m.ExecRef, c: Connection) -> Any:
        return xview(execs.resolve(p.exec))

    async def exec_list(p: m.ExecList, c: Connection) -> Any:
        sb = sandboxes.resolve(p.sandbox).id if p.sandbox else None
        states = tuple(p.states) if p.states else None if p.all else ("PENDING", "RUNNING")
        rows, total = store.page_execs(
            Page(p.limit, p.offset, p.newest_first, p.query), sandbox=sb, states=states)
        return {"execs": [xview(x) for x in rows], "total": total}

    async def exec_wait(p: m.ExecWait, c: Connection) -> Any:
        return xview(await execs.wait(execs.resolve(p.exec), p.timeout))

    async def exec_cancel(p: m.ExecCancel, c: Connection) -> Any:
        sig = parse_signal(p.signal)
        rec = execs.resolve(p.exec)
        return xview(await execs.cancel(rec, sig, p.grace, p.reason or "cancelled"))

    async def exec_logs(p: m.ExecLogs, c: Connection) -> Any:
        rec = execs.resolve(p.exec)
        d.retention.logs_gone(rec)
        return await execs.logs(rec, p.stream, p.offset, p.limit, p.wait)

    async def exec_remove(p: m.ExecRemove, c: Connection) -> Any:
        recs = list({r.id: r for r in (execs.resolve(ref) for ref in p.execs)}.values())
        return {"removed": await d.retention.remove_execs(recs)}

    async def retention_prune(p: m.RetentionPrune, c: Connection) -> Any:
        return await owned(d.retention.prune_reply(p.older_than, p.dry_run))

    async def retention_df(p: m.Empty, c: Connection) -> Any:
        return await d.retention.df()

    def _same_epoch(epoch: str | None, since: int) -> None:
        """A cursor from another journal (a store rebuilt by --recover-store) would
        silently skip or repeat events: refuse it."""
        if epoch is not None and epoch != store.epoch:
            raise TetherError(RpcCode.INVALID_STATE, "EPOCH_CHANGED",
                              f"the journal was reset (epoch {epoch} is gone, it is now "
                              f"{store.epoch}): cursor {since} means nothing in it; events "
                              "may have been lost, so re-read the state you need, then "
                              f"resume with since=0 and epoch={store.epoch}",
                              {"epoch": store.epoch, "yours": epoch})

    def _not_purged(sb: str | None, per_sandbox: bool, since: int) -> None:
        """A nonzero cursor below what compaction kept would skip events silently.
        (``since=0`` means "from the oldest event kept".)"""
        if since == 0:
            return
        floor = d.retention.rs.floor_of(sb if per_sandbox else None)
        if since < floor:
            raise events_purged(since, floor, store.epoch)

    async def events_list(p: m.EventsList, c: Connection) -> Any:
        _same_epoch(p.epoch, p.since)
        sb = _stream(p.sandbox)
        _not_purged(sb, p.sandbox is not None, p.since)
        since = p.since
        if p.last:
            if p.sandbox is not None:
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                                  "last reads the whole journal's newest events; it does not "
                                  "combine with sandbox")
            # gseq has no gaps above the floor: the newest `limit` are the last numbers.
            since = max(since, store.last_gseq() - p.limit, d.retention.rs.floor_of(None))
        evs = store.events_since(since=since, sandbox=sb, per_sandbox=p.sandbox is not None,
                                 limit=p.limit)
        nxt = (evs[-1].seq if p.sandbox is not None else evs[-1].gseq) if evs else since
        return {"events": to_builtins(evs), "next": nxt, "epoch": store.epoch}

    def _stream(ref: str | None) -> str | None:
        """A sandbox's event stream: its exact id (even once deleted), name or prefix."""
        if ref is None:
            return None
        exact = store.get_sandbox(ref)
        return exact.id if exact is not None else sandboxes.resolve(ref).id

    async def events_subscribe(p: m.EventsSubscribe, c: Connection) -> Any:
        _same_epoch(p.epoch, p.since)
        sb = _stream(p.sandbox)
        _not_purged(sb, p.sandbox is not None, p.since)
        if sum(1 for s in bus.subs.values() if s.conn is c) >= MAX_SUBSCRIPTIONS:
            raise TetherError(RpcCode.CONFLICT, "TOO_MANY_SUBSCRIPTIONS",
                              f"this connection already has {MAX_SUBSCRIPTIONS} "
                              "subscriptions; unsubscribe or open another connection",
                              {"limit": MAX_SUBSCRIPTIONS, "scope": "connection"})
        if len(bus.subs) >= MAX_TOTAL_SUBSCRIPTIONS:
            raise TetherError(RpcCode.CONFLICT, "TOO_MANY_SUBSCRIPTIONS",
                              f"the daemon already holds {MAX_TOTAL_SUBSCRIPTIONS} "
                              "subscriptions (its limit, all clients together); close "
                              "subscribers you no longer need and retry",
                              {"limit": MAX_TOTAL_SUBSCRIPTIONS, "scope": "daemon"})
        sub = bus.subscribe(c, sb, p.since)
        return {"subscription": sub.id, "since": p.since, "epoch": store.epoch}

    async def events_unsubscribe(p: m.EventsUnsubscribe, c: Connection) -> Any:
        return {"ok": bus.unsubscribe(p.subscription, c)}

    # ------------------------------------------------------------------ agents
    async def agent_start(p: m.AgentStart, c: Connection) -> Any:
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
        out["exec_view"] = xview(x) if x is not None else None
        return out

    async def agent_turn(p: m.AgentTurn, c: Connection) -> Any:
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

    async def agent_heartbeat(p: m.AgentHeartbeat, c: Connection) -> Any:
        return agents.heartbeat(session(p, "agent.heartbeat"))

    async def agent_authorize(p: m.AgentAuthorize, c: Connection) -> Any:
        return agents.authorize_tool(session(p, "agent.authorize_tool"), p.tool)

    async def agent_handoff(p: m.AgentHandoff, c: Connection) -> Any:
        return agents.handoff(session(p, "agent.handoff"), p.text)

    async def agent_hook(p: m.AgentHook, c: Connection) -> Any:
        rec = session(p, "agent.hook")
        try:
            return await agents.hook(rec, p.provider, p.event, p.payload)
        except KeyError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "UNKNOWN_PROVIDER",
                              str(e.args[0])) from None

    async def agent_reap(p: m.Empty, c: Connection) -> Any:
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

    handlers: dict[str, Handler] = {
        "daemon.health": health,
        "daemon.status": status,
        "sandbox.create": sandbox_create,
        "sandbox.get": sandbox_get,
        "sandbox.list": sandbox_list,
        "sandbox.stop": sandbox_stop,
        "sandbox.start": sandbox_start,
        "sandbox.delete": sandbox_delete,
        "sandbox.copy": sandbox_copy,
        "exec.start": exec_start,
        "exec.get": exec_get,
        "exec.list": exec_list,
        "exec.wait": exec_wait,
        "exec.cancel": exec_cancel,
        "exec.logs": exec_logs,
        "exec.remove": exec_remove,
        "retention.prune": retention_prune,
        "retention.df": retention_df,
        "events.list": events_list,
        "events.subscribe": events_subscribe,
        "events.unsubscribe": events_unsubscribe,
        "agent.start": agent_start,
        "agent.turn": agent_turn,
        "agent.heartbeat": agent_heartbeat,
        "agent.authorize_tool": agent_authorize,
        "agent.handoff": agent_handoff,
        "agent.hook": agent_hook,
        "agent.reap": agent_reap,
        "lineage.list": lineage_list,
        "lineage.get": lineage_get,
        "lineage.resolve": lineage_resolve,
        **digest_api.handlers(d),
        **lineage_api.handlers(d),
        **cost_api.handlers(d),
        **hook_handlers(d.hooks),
        **metrics_api.handlers(d),
        **schedule_handlers(d.scheduler),
    }
    for name, params in METHODS.items():
        if only is None or name in only:
            r.add(name, params, handlers[name], long=name in LONG_POLL_METHODS)
    return r
