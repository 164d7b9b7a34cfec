"""The SDK's method table, written once for both clients.

Each method of :class:`_Api` builds a :class:`~tether.client.core.Request` (the params,
and the type its result decodes into); the ``rpc`` descriptor hands it to the client's
``_invoke``. Its overloaded ``__get__`` gives each client its own signature for mypy:
``Client.exec_get`` returns an ``ExecView``, ``AsyncClient.exec_get`` an awaitable of
one, with the same parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from tether.client import replies as r
from tether.client.core import Awaiting, Blocking, Request
from tether.model import records as rec
from tether.model.digest import DigestNode
from tether.model.schedule import RunRecord

P = ParamSpec("P")
T = TypeVar("T")


def _request_key() -> str:
    """A fresh idempotency key; ``uuid`` is imported here, not by every command."""
    import uuid

    return uuid.uuid4().hex


class rpc(Generic[P, T]):
    """A table method: ``build`` returns the request; the client sends it."""

    def __init__(self, build: Callable[Concatenate[Any, P], Request[T]]) -> None:
        self.build = build
        functools.update_wrapper(self, build)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type) -> rpc[P, T]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def call(*args: Any, **kwargs: Any) -> Any:
            return obj._invoke(build(obj, *args, **kwargs))
        return call

    def request(self, client: Any, *args: P.args, **kwargs: P.kwargs) -> Request[T]:
        """The request a call would send (for the clients' own conveniences)."""
        return self.build(client, *args, **kwargs)


class _Api:
    # daemon
    @rpc
    def health(self) -> Request[r.Health]:
        return Request("daemon.health", {}, r.Health)

    @rpc
    def status(self) -> Request[r.Status]:
        return Request("daemon.status", {}, r.Status)

    @rpc
    def metrics(self) -> Request[r.Metrics]:
        """The daemon's Prometheus metrics (text exposition format)."""
        return Request("daemon.metrics", {}, r.Metrics)

    # sandboxes
    @rpc
    def sandbox_create(self, name: str, *, runtime: str = "process",
                       workspace: str | None = None, env: dict[str, str] | None = None,
                       labels: dict[str, str] | None = None, network: str | None = None,
                       idle_timeout: float | None = None, ttl: float | None = None,
                       spec: str | dict[str, Any] | None = None,
                       set: Sequence[str] | None = None,
                       spec_name: str | None = None, base_dir: str | None = None,
                       ephemeral: bool = False) -> Request[rec.SandboxRecord]:
        """From flags, or from a ``spec``: a YAML text, or the spec as an object (with
        ``set`` overrides, relative paths against ``base_dir``); ``ephemeral``: deleted
        once its execs have ended."""
        return Request("sandbox.create", {
            "name": name, "runtime": runtime, "workspace": workspace, "env": env,
            "labels": labels, "network": network, "idle_timeout": idle_timeout, "ttl": ttl,
            "spec": spec, "set": list(set) if set else None, "spec_name": spec_name,
            "base_dir": base_dir, "ephemeral": ephemeral or None}, rec.SandboxRecord)

    @rpc
    def sandbox_get(self, sandbox: str) -> Request[rec.SandboxRecord]:
        return Request("sandbox.get", {"sandbox": sandbox}, rec.SandboxRecord)

    @rpc
    def sandbox_list(self, *, all: bool = False) -> Request[list[rec.SandboxRecord]]:
        return Request("sandbox.list", {"all": all}, r.SandboxList, lambda x: x.sandboxes)

    @rpc
    def sandbox_stop(self, sandbox: str, *, grace: float = 5.0) -> Request[rec.SandboxRecord]:
        return Request("sandbox.stop", {"sandbox": sandbox, "grace": grace},
                       rec.SandboxRecord)

    @rpc
    def sandbox_start(self, sandbox: str) -> Request[rec.SandboxRecord]:
        return Request("sandbox.start", {"sandbox": sandbox}, rec.SandboxRecord)

    @rpc
    def sandbox_delete(self, sandbox: str, *, grace: float = 5.0,
                       force: bool = False) -> Request[rec.SandboxRecord]:
        """``force`` records it DELETED even when dockerd cannot remove its containers now."""
        return Request("sandbox.delete", {"sandbox": sandbox, "grace": grace,
                                          "force": force or None}, rec.SandboxRecord)

    @rpc
    def sandbox_copy(self, sandbox: str, direction: Literal["in", "out"], src: str,
                     dst: str) -> Request[r.CopyReport]:
        """Copy between the host and a sandbox (``tether cp``); host paths are absolute."""
        return Request("sandbox.copy", {"sandbox": sandbox, "direction": direction,
                                        "src": src, "dst": dst}, r.CopyReport)

    # execs
    @rpc
    def exec_start(self, argv: Sequence[str], *, sandbox: str = "default",
                   env: dict[str, str] | None = None, cwd: str | None = None,
                   timeout: float | None = None, name: str | None = None,
                   kill_grace: float | None = None, request_key: str | None = None,
                   tty: bool = False, stdin: bool = False, rows: int | None = None,
                   cols: int | None = None, unconfined_ok: bool = False,
                   ) -> Request[r.ExecView]:
        """Start ``argv``. A request key makes retries (after a reconnect) start it once.

        ``tty`` gives it a terminal (attach with ``Client.attach``); ``stdin`` keeps
        its input open for attached clients. In the default sandbox, ``cwd`` should be a
        project directory (the sandbox's writable place): where the sandbox cannot confine
        the command the daemon refuses (``CANNOT_SANDBOX_HERE``), unless
        ``unconfined_ok`` asks it to run unsandboxed with a notice, as ``tether run`` does.
        """
        return Request("exec.start", {
            "argv": list(argv), "sandbox": sandbox, "env": env, "cwd": cwd,
            "timeout": timeout, "name": name, "kill_grace": kill_grace,
            "request_key": request_key or _request_key(),
            "tty": tty or None, "stdin": stdin or None, "rows": rows, "cols": cols,
            "unconfined_ok": unconfined_ok or None}, r.ExecView)

    @rpc
    def exec_get(self, exec: str) -> Request[r.ExecView]:
        return Request("exec.get", {"exec": exec}, r.ExecView)

    @rpc
    def exec_list(self, *, sandbox: str | None = None,
                  all: bool = False) -> Request[list[r.ExecView]]:
        return Request("exec.list", {"sandbox": sandbox, "all": all}, r.ExecList,
                       lambda x: x.execs)

    @rpc
    def exec_page(self, *, sandbox: str | None = None, states: Sequence[str] | None = None,
                  query: str | None = None, limit: int = 50, offset: int = 0,
                  newest_first: bool = True) -> Request[r.ExecList]:
        """One page of execs (``execs``) and how many match (``total``): by sandbox,
        states (default: every state), and a text in the id, name or command line."""
        return Request("exec.list", {
            "sandbox": sandbox, "all": True, "states": list(states) if states else None,
            "query": query or None, "limit": limit, "offset": offset,
            "newest_first": newest_first}, r.ExecList)

    @rpc
    def exec_wait(self, exec: str, *, timeout: float | None = None) -> Request[r.ExecView]:
        """The exec once it has ended, or as it is after ``timeout`` seconds."""
        return Request("exec.wait", {"exec": exec, "timeout": timeout}, r.ExecView)

    @rpc
    def exec_cancel(self, exec: str, *, signal: int | str = "TERM", grace: float = 5.0,
                    reason: str | None = None) -> Request[r.ExecView]:
        return Request("exec.cancel", {"exec": exec, "signal": signal, "grace": grace,
                                       "reason": reason}, r.ExecView)

    @rpc
    def exec_logs(self, exec: str, *, stream: str = "stdout", offset: int = 0,
                  limit: int | None = None, wait: float | None = None) -> Request[r.LogChunk]:
        """One chunk of a log from ``offset`` (``read_logs`` iterates over them)."""
        return Request("exec.logs", {"exec": exec, "stream": stream, "offset": offset,
                                     "limit": limit, "wait": wait}, r.LogChunk)

    @rpc
    def exec_remove(self, execs: Sequence[str]) -> Request[r.RemoveReport]:
        """Remove settled execs: their record, logs and run files (never a live one)."""
        return Request("exec.remove", {"execs": list(execs)}, r.RemoveReport)

    # retention
    @rpc
    def prune(self, *, older_than: float | None = None,
              dry_run: bool = False) -> Request[r.PruneReport]:
        """Run a retention pass now: the daemon's policy, or everything ended more than
        ``older_than`` seconds ago; ``dry_run`` only says what would go."""
        return Request("retention.prune", {"older_than": older_than, "dry_run": dry_run},
                       r.PruneReport)

    @rpc
    def df(self) -> Request[r.DiskUsage]:
        return Request("retention.df", {}, r.DiskUsage)

    # events (events.subscribe and events.unsubscribe: ``subscribe()``)
    @rpc
    def events_list(self, *, since: int = 0, sandbox: str | None = None,
                    limit: int | None = None, epoch: str | None = None,
                    last: bool = False) -> Request[r.EventPage]:
        """Events after ``since``, oldest first; ``last``: the newest ``limit`` of them
        (still oldest first), e.g. to show recent events and follow from ``next``."""
        return Request("events.list", {"since": since, "sandbox": sandbox, "limit": limit,
                                       "epoch": epoch, "last": last or None}, r.EventPage)

    # agents: supervising them
    @rpc
    def agent_start(self, argv: Sequence[str], *, provider: str | None = None,
                    name: str | None = None, sandbox: str = "default",
                    env: dict[str, str] | None = None, cwd: str | None = None,
                    tty: bool = False, revival: str | None = None,
                    max_revivals: int | None = None, crash_loop_seconds: float | None = None,
                    successor: str | None = None, aging_pct: float | None = None,
                    dying_pct: float | None = None, stale_after: float | None = None,
                    crashed_after: float | None = None, worktree: str | None = None,
                    issue: str | None = None, issue_id: str | None = None,
                    force: bool = False, request_key: str | None = None,
                    commit_on_finish: bool = False, budget_usd: float | None = None,
                    budget_policy: Literal["pause", "stop"] | None = None,
                    allow_domains: Sequence[str] | None = None,
                    ) -> Request[r.AgentStarted]:
        """Start an agent lineage; unset options take the daemon's defaults
        (``tether.model.records.AgentConfig``). A request key makes retries start it once.
        ``allow_domains``: hosts its egress proxy lets it reach besides its provider's API
        hosts (``api.example.com``, ``*.example.com``, ``host:PORT``)."""
        return Request("agent.start", {
            "argv": list(argv), "provider": provider, "name": name, "sandbox": sandbox,
            "env": env, "cwd": cwd, "tty": tty or None, "revival": revival,
            "max_revivals": max_revivals, "crash_loop_seconds": crash_loop_seconds,
            "successor": successor, "aging_pct": aging_pct, "dying_pct": dying_pct,
            "stale_after": stale_after, "crashed_after": crashed_after,
            "worktree": worktree, "issue": issue, "issue_id": issue_id,
            "commit_on_finish": commit_on_finish or None,
            "force": force or None, "budget_usd": budget_usd, "budget_policy": budget_policy,
            "allow_domains": list(allow_domains) if allow_domains else None,
            "request_key": request_key or _request_key()}, r.AgentStarted)

    @rpc
    def agent_reap(self) -> Request[r.ReapReport]:
        """Settle dead sessions and drop stale heartbeat files, without signalling."""
        return Request("agent.reap", {}, r.ReapReport)

    @rpc
    def lineage_list(self, *, all: bool = False) -> Request[list[r.LineageView]]:
        return Request("lineage.list", {"all": all}, r.LineageList, lambda x: x.lineages)

    @rpc
    def lineage_page(self, *, statuses: Sequence[str] | None = None,
                     query: str | None = None, limit: int = 50, offset: int = 0,
                     newest_first: bool = True) -> Request[r.LineageList]:
        """One page of lineages (``lineages``) and how many match (``total``): by status
        (default: every status) and a text in the id, name, provider or worktree."""
        return Request("lineage.list", {
            "all": True, "statuses": list(statuses) if statuses else None,
            "query": query or None, "limit": limit, "offset": offset,
            "newest_first": newest_first}, r.LineageList)

    @rpc
    def lineage_get(self, lineage: str) -> Request[r.LineageView]:
        return Request("lineage.get", {"lineage": lineage}, r.LineageView)

    @rpc
    def lineage_resolve(self, lineage: str,
                        action: Literal["revive", "reap"]) -> Request[r.LineageView]:
        """Decide for a lineage waiting under the ``ask`` revival policy."""
        return Request("lineage.resolve", {"lineage": lineage, "action": action},
                       r.LineageView)

    @rpc
    def lineage_finish(self, lineage: str, *, commit: bool = False,
                       ) -> Request[r.LineageFinished]:
        """Stop a lineage (it finishes) and hand its branch off: commit (if asked or
        configured), push to the repository's ``handoff.remote``, run its command."""
        return Request("lineage.finish", {"lineage": lineage, "commit": commit},
                       r.LineageFinished)

    # activity digests
    @rpc
    def digest_build(self, *, summarizer: str | None = None) -> Request[r.DigestBuilt]:
        """Run a rollup pass now (with ``summarizer``, a command, for its prose)."""
        return Request("digest.build", {"summarizer": summarizer}, r.DigestBuilt)

    @rpc
    def digest_show(self, level: Literal["hour", "day", "week", "month"] = "day",
                    label: str | None = None, *, versions: bool = False
                    ) -> Request[r.DigestTree]:
        return Request("digest.show", {"level": level, "label": label, "versions": versions},
                       r.DigestTree)

    @rpc
    def digest_recent(self, level: Literal["hour", "day", "week", "month"] = "day",
                      count: int = 7) -> Request[list[DigestNode]]:
        return Request("digest.recent", {"level": level, "count": count}, r.DigestRecent,
                       lambda x: x.nodes)

    @rpc
    def digest_lineage(self, lineage: str) -> Request[r.LineageStory]:
        return Request("digest.lineage", {"lineage": lineage}, r.LineageStory)

    # cost and budgets
    @rpc
    def cost_report(self, by: Literal["attempt", "lineage", "sandbox", "day", "model"]
                    = "lineage", *, since: float | None = None) -> Request[r.CostReport]:
        """What agents' turns cost, grouped ``by``, from ``since`` (epoch seconds) on."""
        return Request("cost.report", {"by": by, "since": since}, r.CostReport)

    @rpc
    def budget_show(self) -> Request[r.Budgets]:
        return Request("budget.show", {}, r.Budgets)

    @rpc
    def budget_set(self, usd: float | None, *, policy: Literal["pause", "stop"] = "pause",
                   lineage: str | None = None) -> Request[r.Budgets]:
        """Set (``usd`` None: clear) the daily budget, or one lineage's."""
        return Request("budget.set", {"usd": usd, "clear": usd is None or None,
                                      "policy": policy, "lineage": lineage}, r.Budgets)
    # hooks (webhooks): deliveries of journal events to a URL or a command
    @rpc
    def hook_add(self, name: str, on: Sequence[str], *, url: str | None = None,
                 exec: Sequence[str] | None = None, cwd: str | None = None,
                 secret_file: str | None = None, sandbox: str | None = None,
                 match_name: str | None = None, nonzero: bool = False,
                 max_tries: int = 8) -> Request[r.WebhookView]:
        """Deliver every event matching ``on`` (globs; ``exec.finished`` means an
        exec.state event whose state is FINISHED) to ``url`` or to ``exec`` (on stdin).
        ``secret_file`` is read by the daemon, now: bodies are then HMAC-signed."""
        return Request("hook.add", {
            "name": name, "on": list(on), "url": url,
            "exec": list(exec) if exec is not None else None, "cwd": cwd,
            "secret_file": secret_file, "sandbox": sandbox, "match_name": match_name,
            "nonzero": nonzero, "max_tries": max_tries}, r.WebhookView)

    @rpc
    def hook_list(self) -> Request[list[r.WebhookView]]:
        return Request("hook.list", {}, r.WebhookList, lambda x: x.hooks)

    @rpc
    def hook_show(self, name: str, *, limit: int = 20) -> Request[r.WebhookDetail]:
        return Request("hook.show", {"name": name, "limit": limit}, r.WebhookDetail)

    @rpc
    def hook_retry(self, name: str, *, delivery: int | None = None,
                   ) -> Request[r.WebhookRetried]:
        """Try DEAD and FAILED deliveries (or the one given) again, from try 1, now."""
        return Request("hook.retry", {"name": name, "delivery": delivery}, r.WebhookRetried)

    @rpc
    def hook_remove(self, name: str) -> Request[r.WebhookRemoved]:
        return Request("hook.remove", {"name": name}, r.WebhookRemoved)

    # agents: the agent's own reports, authenticated by its session and token
    @rpc
    def agent_turn(self, session: str, token: str, *, context_pct: float | None = None,
                   usage: dict[str, int] | None = None, model: str | None = None,
                   messages: list[dict[str, Any]] | None = None,
                   config: dict[str, Any] | None = None) -> Request[r.TurnReply]:
        return Request("agent.turn", {
            "session": session, "token": token, "context_pct": context_pct, "usage": usage,
            "model": model, "messages": messages or [], "config": config}, r.TurnReply)

    @rpc
    def agent_heartbeat(self, session: str, token: str, *,
                        activity: str | None = None) -> Request[r.Heartbeat]:
        return Request("agent.heartbeat", {"session": session, "token": token,
                                           "activity": activity}, r.Heartbeat)

    @rpc
    def agent_authorize_tool(self, session: str, token: str, tool: str,
                             input: Any = None) -> Request[r.ToolDecision]:
        return Request("agent.authorize_tool", {"session": session, "token": token,
                                                "tool": tool, "input": input},
                       r.ToolDecision)

    @rpc
    def agent_handoff(self, session: str, token: str, text: str) -> Request[r.Handoff]:
        return Request("agent.handoff", {"session": session, "token": token, "text": text},
                       r.Handoff)

    @rpc
    def agent_hook(self, session: str, token: str, provider: str, event: str,
                   payload: dict[str, Any] | None = None) -> Request[r.HookReply]:
        """A provider hook's event; the reply is what the hook program prints and exits."""
        return Request("agent.hook", {"session": session, "token": token,
                                      "provider": provider, "event": event,
                                      "payload": payload or {}}, r.HookReply)

    # scheduled jobs
    @rpc
    def schedule_add(self, name: str, argv: Sequence[str], *, cron: str | None = None,
                     every: float | None = None, tz: str | None = None,
                     sandbox: str | None = None, env: dict[str, str] | None = None,
                     cwd: str | None = None, timeout: float | None = None,
                     overlap: Literal["skip", "concurrent", "queue"] | None = None,
                     queue: int | None = None, max_concurrent: int | None = None,
                     jitter: float | None = None,
                     missed: Literal["skip", "run-once"] | None = None,
                     unconfined_ok: bool = False) -> Request[r.JobView]:
        """A job whose runs are execs of ``argv``: at each ``cron`` time (in ``tz``), or
        every ``every`` seconds. Each fire time runs once, across daemon crashes.
        ``unconfined_ok``: as for :meth:`exec_start`, for each run."""
        return Request("schedule.add", {
            "name": name, "argv": list(argv), "cron": cron, "every": every, "tz": tz,
            "sandbox": sandbox, "env": env, "cwd": cwd, "timeout": timeout,
            "overlap": overlap, "queue": queue, "max_concurrent": max_concurrent,
            "jitter": jitter, "missed": missed, "unconfined_ok": unconfined_ok or None},
            r.JobView)

    @rpc
    def schedule_list(self, *, all: bool = False) -> Request[list[r.JobView]]:
        return Request("schedule.list", {"all": all}, r.JobList, lambda x: x.jobs)

    @rpc
    def schedule_show(self, job: str, *, limit: int = 20) -> Request[r.JobDetail]:
        return Request("schedule.show", {"job": job, "limit": limit}, r.JobDetail)

    @rpc
    def schedule_pause(self, job: str) -> Request[r.JobView]:
        return Request("schedule.pause", {"job": job}, r.JobView)

    @rpc
    def schedule_resume(self, job: str) -> Request[r.JobView]:
        return Request("schedule.resume", {"job": job}, r.JobView)

    @rpc
    def schedule_run_now(self, job: str) -> Request[RunRecord | None]:
        """One run now, under the job's overlap policy (SKIPPED says why)."""
        return Request("schedule.run_now", {"job": job}, RunRecord | None)

    @rpc
    def schedule_remove(self, job: str) -> Request[r.JobView]:
        return Request("schedule.remove", {"job": job}, r.JobView)

    @rpc
    def scheduler_status(self, *, limit: int | None = None,
                         after: str | None = None) -> Request[r.SchedulerStatus]:
        """One page of jobs (the daemon's default size without ``limit``); ``after``: the
        ``next`` of the page before. Params left out are not sent (a daemon from before
        paging refuses them, and answers every job at once)."""
        params: dict[str, Any] = {}
        if limit is not None:
            params["limit"] = limit
        if after is not None:
            params["after"] = after
        return Request("scheduler.status", params, r.SchedulerStatus)

