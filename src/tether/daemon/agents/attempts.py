"""Attempts: start a lineage, run each attempt as an exec, decide what an exec's end
means (FINISHED or ORPHANED, then the revival policy), successors, and the sweep.

Exactly once: an attempt's intent (its number and token) is committed before its
exec is started, and the exec carries the request key ``lineage-<id>-<attempt>``,
which the exec store turns into a no-op if an earlier try got through. An exec that
never started (the daemon or its monitor failed first) is not a death: the same
attempt is started again under the next key, ``lineage-<id>-<attempt>-r<restarts>``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import time
from pathlib import Path

import msgspec

from tether.agent import lifecycle as lc
from tether.agent import snapshot
from tether.agent.confinement import agent_view, egress_allow
from tether.agent.exits import DEFAULT_LIMIT_WAIT, Exit, ExitReason
from tether.agent.providers import get as get_provider
from tether.agent.providers.base import SessionContext
from tether.daemon.agents import ending
from tether.daemon.agents.core import AgentCore, token_digest
from tether.daemon.agents.scripts import WorktreeScripts
from tether.daemon.agents.turns import OutputTurns
from tether.daemon.agents.worktree import WorktreeFiles
from tether.egress.policy import BadEntry, network_mode
from tether.hostio.untrusted import replace_at
from tether.model.errors import RpcCode, TetherError, invalid_params
from tether.model.records import AgentConfig, ExecRecord, ExecSpec, LineageRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE, LineageStatus
from tether.runtime.base import FENCED

log = logging.getLogger("tether.agents")

CRASH_LOOP_LIMIT = 3  # consecutive attempts that die within crash_loop_seconds
# An attempt whose exec never started is started again at most this many times: a
# monitor that can never start anything must not make the lineage spin forever.
MAX_RESTARTS = 3


def attempt_key(rec: LineageRecord) -> str:
    """The request key of the current attempt's current try."""
    key = f"lineage-{rec.id}-{rec.attempt}"
    return f"{key}-r{rec.restarts}" if rec.restarts else key


def revivals(rec: LineageRecord) -> int:
    """Revivals spent from the budget: attempts after the first, less those that
    followed a usage limit or a fleet fence (the provider's or the host's lease's
    doing, not the agent's failure)."""
    return max(0, rec.attempt - 1 - rec.limit_waits - rec.fenced_exits)


def backoff(attempt: int) -> float:
    """Seconds before revival attempt ``attempt + 1``: 0.5, 1, 2, … capped at 30."""
    return float(min(30.0, 0.5 * 2 ** max(0, attempt - 1)))


def _write_private(directory: Path, path: str, content: bytes) -> None:
    """Write a file the daemon made for an agent into its state dir, which the agent may
    write too: never through a symlink it planted (a new file, then a rename)."""
    if Path(path).parent != directory:
        raise TetherError(RpcCode.INTERNAL_ERROR, "INTERNAL_ERROR",
                          f"a provider file outside the session's state dir: {path}")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        replace_at(dfd, os.path.basename(path), content, durable=False)
    finally:
        os.close(dfd)


class Attempts:
    def __init__(self, core: AgentCore, worktree: WorktreeFiles,
                 scripts: WorktreeScripts) -> None:
        self.core = core
        self.worktree = worktree
        self.scripts = scripts
        # Turns inferred from output (set by the service): an ended attempt's last one.
        self.output_turns: OutputTurns | None = None

    # ------------------------------------------------------------------ start
    async def start(self, cfg: AgentConfig, name: str | None,
                    request_key: str | None = None) -> LineageRecord:
        core = self.core
        if request_key:
            existing = core.store.lineage_by_request_key(request_key)
            if existing is not None:
                return existing  # a retry after a lost reply
        get_provider(cfg.provider)  # raises for an unknown provider before any intent
        lc.Thresholds(cfg.aging_pct, cfg.dying_pct)
        if cfg.revival not in ("revive", "reap", "ask"):
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              f"revival policy must be revive, reap or ask, not {cfg.revival!r}")
        sandbox = core.sandboxes.resolve(cfg.sandbox)
        refusal = core.sandboxes.runtime_of(sandbox).refuses_agents
        if refusal is not None:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS", refusal)
        cfg = msgspec.structs.replace(cfg, sandbox=sandbox.id)  # its event stream
        # The user's start, the one time the repository's config is read (a successor
        # and every revival use this copy: docs/SECURITY.md, "Repository config").
        cfg = await self.scripts.freeze(cfg, sandbox.spec)
        return await self.create(cfg, name, request_key=request_key)

    async def create(self, cfg: AgentConfig, name: str | None, *,
                     request_key: str | None = None,
                     predecessor: str | None = None) -> LineageRecord:
        """A new lineage, then its first attempt."""
        ident = self.core.store.reserve_id("lineage", nbytes=5)
        cfg = await self.scripts.prepare(cfg, ident, predecessor)  # copy, ports, setup
        now = time.time()
        rec = LineageRecord(id=ident, name=name, config=cfg, created_at=now, updated_at=now,
                            request_key=request_key, predecessor=predecessor,
                            conversation=False)
        rec = self.core.commit(self.core.store.create_lineage(rec))
        return await self.begin(rec, resume=False)

    async def begin(self, rec: LineageRecord, *, resume: bool) -> LineageRecord:
        """Commit the next attempt's intent, then run it."""
        rec = self.core.commit(self.core.store.update_lineage(
            rec.id, status=LineageStatus.REVIVING if resume else None,
            attempt=rec.attempt + 1, token_sha256=self.core.new_token(rec.id), token="",
            revive_at=None, restarts=0, exit_reason=None,
            # A terminal agent starts at its prompt, waiting for its user, until a turn
            # starts (committed before its exec exists: its first hook comes after).
            waiting_since=time.time() if rec.config.tty else None,
            event="lineage.attempt" if not resume else None,
            reason=f"reviving (attempt {rec.attempt + 1})" if resume else None))
        if resume:
            self.core.faults.hit("agent.after_attempt_commit")
        return await self.run(rec, resume=resume)

    def _context(self, rec: LineageRecord, *, confined: bool, egress: bool) -> SessionContext:
        layout = self.core.layout
        state_dir = layout.root / "agents" / rec.id
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return SessionContext(
            home=str(layout.root), socket=str(layout.socket), session=rec.id,
            lineage=rec.id, state_dir=str(state_dir),
            hook_command=(sys.executable, "-m", "tether.agent.hook", "--home",
                          str(layout.root)),
            confined=confined, tty=rec.config.tty, egress=egress)

    async def _start_exec(self, rec: LineageRecord, *, resume: bool) -> ExecRecord:
        core, layout, cfg = self.core, self.core.layout, rec.config
        provider = get_provider(cfg.provider)
        sandbox = core.sandboxes.resolve(cfg.sandbox)
        confined = core.sandboxes.runtime_of(sandbox).confines_agents
        # Its network is the egress proxy (else the host's, or none).
        egress = confined and core.egress is not None and \
            network_mode(sandbox.spec.network, agent=True) == "proxy"
        ctx = self._context(rec, confined=confined, egress=egress)
        snap_path = snapshot.path_for(layout.root, rec.id)
        if resume:  # the agent may read the base file alone: fold the appended turns in
            await asyncio.get_running_loop().run_in_executor(
                None, snapshot.compact, layout.root, rec.id)
        # A session without a conversation yet (never prompted, or cleared since) has
        # nothing to resume: it starts afresh ("No conversation found with session ID").
        if resume:
            ctx = dataclasses.replace(ctx, interrupted=rec.interrupted is not None,
                                      continuation=continuation(rec, snap_path))
        # Only a CLI whose hooks show a turn's start can be known to have none; one whose
        # turns are read from its output (Aider: its request is not seen, nor a one-shot's
        # prompt) is resumed, which with an empty history is a fresh start anyway.
        unknown = provider.turn_idle_seconds is not None
        resume = resume and (rec.conversation is not False or unknown) and \
            await asyncio.to_thread(provider.can_resume, rec.provider_session_id,
                                    rec.usage_cursor)
        plan = (provider.resume(cfg.argv, rec.provider_session_id, str(snap_path), ctx)
                if resume else provider.launch(cfg.argv, ctx))
        for path, content in plan.files.items():
            _write_private(Path(ctx.state_dir), path, content)
        path_env = cfg.env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
        view = (agent_view(state_dir=layout.root / "agents" / rec.id,
                           socket_dir=layout.agent_dir, config=cfg, snapshot=snap_path,
                           handoff=(core.handoff_path(rec.predecessor)
                                    if rec.predecessor else None),
                           argv0=plan.argv[0], path_env=path_env, views=plan.views)
                if confined else None)
        if view is not None and core.egress is not None and egress:
            try:
                allow = egress_allow(cfg.provider, sandbox.spec.network, cfg.allow_domains)
            except BadEntry as e:
                raise invalid_params(f"allow_domains: {e}") from None
            view = dataclasses.replace(view, egress=await core.egress.serve(rec.id, allow))
        sock = layout.agent_socket if view is not None else layout.socket
        token = self._token(rec)
        # The CLI's telemetry and update checks off behind the proxy, unless the user's
        # environment (the lineage's or its sandbox's) says otherwise (Provider.quiet_env).
        quiet = {k: v for k, v in provider.quiet_env.items()
                 if k not in sandbox.spec.env} if egress else {}
        given = {k: v for k, v in cfg.env.items()
                 if not (cfg.tty and k in provider.headless_env)}
        env = {**quiet, **given, **plan.env,
               "TETHER_HOME": str(layout.root), "TETHER_SOCKET": str(sock),
               "TETHER_SESSION": rec.id, "TETHER_TOKEN": token, "TETHER_LINEAGE": rec.id,
               "TETHER_ATTEMPT": str(rec.attempt)}
        if snap_path.exists():
            env["TETHER_DRAIN_SNAPSHOT"] = str(snap_path)
        if rec.predecessor:
            handoff = core.handoff_path(rec.predecessor)
            if handoff.exists():
                env["TETHER_HANDOFF"] = str(handoff)
        spec = ExecSpec(argv=plan.argv, env=env, cwd=cfg.cwd, name=rec.name, tty=cfg.tty,
                        stdin=cfg.tty)
        return await core.execs.start(sandbox, spec, attempt_key(rec), lineage=rec.id,
                                      agent_view=view, fence=core.fence(rec))

    def _token(self, rec: LineageRecord) -> str:
        """The token for this start of ``rec``'s current attempt. Only this daemon's memory
        holds it: after a restart, if no exec of the attempt's request key exists (no process
        ever received the old token), a new one is committed first, as its intent."""
        core = self.core
        token = core.tokens.get(rec.id)
        if token is not None and token_digest(token) == rec.token_sha256:
            return token
        if core.store.exec_by_request_key(attempt_key(rec)) is not None:
            return ""  # exec.start returns that exec as it is: this env is never used
        core.commit(core.store.update_lineage(
            rec.id, token_sha256=core.new_token(rec.id), token=""))
        return core.tokens[rec.id]

    async def run(self, rec: LineageRecord, *, resume: bool) -> LineageRecord:
        """Start attempt ``rec.attempt``; idempotent thanks to its request key. An exec
        that never started is tried again (``restart``), as the same attempt."""
        core = self.core
        while True:
            try:
                # Everything that can refuse (its sandbox gone, say) fails the lineage,
                # never the daemon (this also runs inside recovery).
                x = await self._start_exec(rec, resume=resume)
            except Exception as e:  # TetherError, or the agent broke its state dir (OSError)
                unstarted = self._unstarted(e)
                if unstarted is None:
                    why = e.message if isinstance(e, TetherError) else f"{type(e).__name__}: {e}"
                    if not isinstance(e, TetherError):
                        log.warning("lineage %s attempt %s: %s", rec.id, rec.attempt, why)
                    # A program that cannot be started is not a crash: nothing to revive.
                    missing = isinstance(e, TetherError) and e.code == "START_FAILED"
                    rec = core.commit(core.store.update_lineage(
                        rec.id, status=LineageStatus.FAILED, reason=f"could not start attempt "
                        f"{rec.attempt}: {why}",
                        exit_reason=str(ExitReason.START_FAILED) if missing else None))
                    core.forget(rec.id)
                    return rec
                x = unstarted
            if not x.never_started:
                break
            rec = self.restart(rec, x)
            if rec.status != LineageStatus.REVIVING:
                return rec  # gave up
        core.touch(rec)
        core.output_marks[rec.id] = (x.id, 0)  # its output is all unread (CLIs without hooks)
        starts = [*rec.recent_starts, x.started_at or time.time()][-5:]
        rec = core.commit(core.store.update_lineage(
            rec.id, status=LineageStatus.ACTIVE if rec.status != LineageStatus.ACTIVE else None,
            exec_id=x.id, recent_starts=starts,
            reason=f"attempt {rec.attempt} running as exec {x.id}"))
        self.worktree.update(rec, pid=core.execs.pid_of(x.id))
        await self.scripts.start_companion(rec)
        if x.state in EXEC_TERMINAL:  # it ended before we looked (e.g. instantly)
            self.on_exec_terminal(x)
        return core.store.get_lineage(rec.id) or rec

    def _unstarted(self, e: Exception) -> ExecRecord | None:
        """The exec a failed start left behind, if it never started (not the agent's
        fault); ``None`` for every other failure."""
        exec_id = e.data.get("exec") if isinstance(e, TetherError) else None
        x = self.core.store.get_exec(exec_id) if isinstance(exec_id, str) else None
        return x if x is not None and x.never_started else None

    def restart(self, rec: LineageRecord, x: ExecRecord) -> LineageRecord:
        """The current attempt's exec ``x`` never started: not a death, so no revival
        policy, budget or crash-loop start. Commit the intent to start the same attempt
        again (REVIVING, same number and token, ``restarts`` + 1: the next request key),
        or give up after ``MAX_RESTARTS``. The caller then runs it."""
        core = self.core
        if rec.restarts >= MAX_RESTARTS:
            rec = core.commit(core.store.update_lineage(
                rec.id, status=LineageStatus.FAILED,
                reason=f"could not start attempt {rec.attempt}: its exec never started "
                       f"{rec.restarts + 1} times; last: {x.reason}"))
            core.forget(rec.id)
            return rec
        return core.commit(core.store.update_lineage(
            rec.id, status=LineageStatus.REVIVING, restarts=rec.restarts + 1,
            event="lineage.state",  # journaled even when it was REVIVING already
            reason=f"starting attempt {rec.attempt} again: exec {x.id} never started "
                   f"({x.reason})"))

    async def run_restart(self, lineage: str) -> None:
        """Carry out a restart committed outside ``run`` (an exec end): in the daemon's
        group, under the lineage's lock, only if the lineage is still REVIVING."""
        try:
            async with self.core.lock(lineage):
                fresh = self.core.store.get_lineage(lineage)
                if fresh is not None and fresh.status == LineageStatus.REVIVING:
                    await self.run(fresh, resume=fresh.attempt > 1)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("restarting lineage %s failed", lineage)

    # ------------------------------------------------------------------ exec ends
    def on_exec_terminal(self, x: ExecRecord) -> None:
        """``ExecService.on_terminal``: called synchronously with every exec that ends."""
        if not x.lineage:
            return
        rec = self.core.store.get_lineage(x.lineage)
        if rec is None or rec.exec_id != x.id or rec.status != LineageStatus.ACTIVE:
            return
        if x.never_started:
            rec = self.restart(rec, x)
            if rec.status == LineageStatus.REVIVING and self.core.tasks.open:
                self.core.tasks.spawn(self.run_restart(rec.id), name=f"restart-{rec.id}")
            return  # (before the group opens, recovery runs it: it is REVIVING)
        fenced = (x.reason or "").startswith(FENCED)
        turns = self.output_turns
        text = (turns.final(rec, x) if not fenced and turns is not None and self.core.tasks.open
                else None)
        if text is not None:  # a last turn in its output (``aider --message`` exits after it)
            self.core.tasks.spawn(self._final_turn(rec, x, text), name=f"final-turn-{rec.id}")
            return
        # A hung kill from before a restart is recognised by its recorded reason.
        hung = x.id in self.core.hung_kills or (x.reason or "").startswith("hung:")
        self.core.hung_kills.discard(x.id)
        end = (Exit(ExitReason.FENCED, x.reason or "fenced") if fenced else
               ending.classify(self.core, rec, x, get_provider(rec.config.provider), hung=hung))
        # Ended in the middle of a turn? Then its revival is asked to carry the turn on.
        interrupted = (f"{end.reason.replace('_', ' ')}: {end.detail}"
                       if rec.conversation is not False and rec.waiting_since is None
                       else None)
        if interrupted != rec.interrupted:
            rec = self.core.commit(self.core.store.update_lineage(
                rec.id, interrupted=interrupted))
        if fenced:
            self.fenced(rec, x)
            return
        why = end.reason
        if why == ExitReason.OUT_OF_CONTEXT:
            if rec.lifecycle == lc.Lifecycle.DEAD:
                self._finish(rec, "context exhausted (DEAD); the session was reaped", end)
            else:
                self._finish(rec, f"out of context: {end.detail}", end,
                             lifecycle=str(lc.Lifecycle.DEAD))
        elif why == ExitReason.KILLED and (x.reason or "").startswith("budget: "):
            self._finish(rec, x.reason or "budget", Exit(ExitReason.BUDGET, x.reason or ""))
        elif why == ExitReason.KILLED:
            self._finish(rec, f"stopped: {x.reason or 'cancelled'}", end)  # `tether kill`
        elif why == ExitReason.FINISHED:
            self._finish(rec, "the agent exited on its own (code 0)", end)
        elif why == ExitReason.USAGE_LIMITED:
            self.wait_for_limit(rec, end)
        elif why == ExitReason.WAITING_FOR_USER:
            rec = self.core.commit(self.core.store.update_lineage(
                rec.id, status=LineageStatus.ORPHANED, exit_reason=str(why),
                reason=f"waiting for its user: {end.detail}", data=_exit_data(end)))
            self._ask(rec, "it stopped on a question for its user")
        else:
            what = ("hung (no heartbeat or output), killed" if hung else
                    f"died: {x.reason or x.state}" + (f" (exit {x.exit_code})"
                                                      if x.exit_code is not None else ""))
            self.orphan(rec, what, x, end)

    async def _final_turn(self, rec: LineageRecord, x: ExecRecord, text: str) -> None:
        """Report the turn an ended attempt's output held, then settle its end."""
        try:
            if self.output_turns is not None:
                await self.output_turns.report_final(rec, text)
        except Exception:  # never into the daemon's TaskGroup; the end is settled anyway
            log.exception("lineage %s: the last turn of exec %s was not reported", rec.id, x.id)
        self.on_exec_terminal(x)

    def fenced(self, rec: LineageRecord, x: ExecRecord) -> None:
        """Its monitor killed it: this host's fleet lease ran out (``MonitorFence``).
        Not the agent's failure: no revival policy check, and like a usage limit it
        spends no revival (``fenced_exits`` + 1) and starts the crash-loop window over.
        ORPHANED and due at once, so the revival gate decides: revived here only if this
        host's lease owns its placement again (taken back before it expired), else
        withdrawn by fleet mode (it runs on another host)."""
        self.core.commit(self.core.store.update_lineage(
            rec.id, status=LineageStatus.ORPHANED, reason=x.reason or "fenced",
            exit_reason=str(ExitReason.FENCED), revive_at=time.time(),
            fenced_exits=rec.fenced_exits + 1, recent_starts=[],
            data={"exit_reason": str(ExitReason.FENCED)}))
        self.core.wake.set()

    def wait_for_limit(self, rec: LineageRecord, end: Exit) -> None:
        """The provider's usage limit: wait (WAITING_LIMIT, visible) until the reset time
        it gave, or :data:`DEFAULT_LIMIT_WAIT`, then revive. No revival is spent and the
        crash-loop window starts over: a limit says nothing about the agent's health."""
        core = self.core
        now = core.clock.now()
        due = end.reset_at if end.reset_at is not None else now + DEFAULT_LIMIT_WAIT
        given = "its reset time" if end.reset_at is not None else (
            f"no reset time given; trying again in {DEFAULT_LIMIT_WAIT / 60:g} min")
        core.commit(core.store.update_lineage(
            rec.id, status=LineageStatus.WAITING_LIMIT, exit_reason=str(end.reason),
            revive_at=due, limit_waits=rec.limit_waits + 1, recent_starts=[],
            reason=f"usage limit: {end.detail} (waiting until {_when(due)}, {given})",
            data=_exit_data(end)))
        core.heartbeat.pop(rec.id, None)
        core.wake.set()

    def _finish(self, rec: LineageRecord, reason: str, end: Exit | None = None,
                lifecycle: str | None = None) -> None:
        core = self.core
        extra = {"lifecycle": lifecycle} if lifecycle else {}
        rec = core.commit(core.store.update_lineage(
            rec.id, status=LineageStatus.FINISHED, reason=reason,
            exit_reason=str(end.reason) if end else None,
            data=_exit_data(end) if end else None, **extra))
        self.worktree.update(rec, step="finished")
        core.forget(rec.id)
        if rec.config.successor == "auto" and rec.lifecycle == lc.Lifecycle.DEAD:
            core.successor_wanted.append(rec.id)
            core.wake.set()

    def orphan(self, rec: LineageRecord, reason: str, x: ExecRecord | None,
               end: Exit | None = None) -> None:
        why = end.reason if end else ExitReason.CRASHED
        rec = self.core.commit(self.core.store.update_lineage(
            rec.id, status=LineageStatus.ORPHANED, reason=reason, exit_reason=str(why),
            data=_exit_data(end) if end else {"exit_reason": str(why)}))
        self.apply_policy(rec, x)

    def _ask(self, rec: LineageRecord, why: str) -> None:
        """ASK_PENDING, and ``agent.waiting`` so that a hook can tell a person."""
        rec = self.core.commit(self.core.store.update_lineage(
            rec.id, status=LineageStatus.ASK_PENDING,
            reason=f"{why}: resolve with `tether lineage resolve {rec.id} --revive|--reap`"))
        self.core.waiting(rec, "ask", f"agent {rec.name or rec.id} died; revive or reap it: "
                          f"`tether lineage resolve {rec.id} --revive|--reap`")

    def apply_policy(self, rec: LineageRecord, x: ExecRecord | None) -> None:
        """The revival policy of an ORPHANED lineage: reap, ask, give up, or revive later."""
        core, cfg = self.core, rec.config
        if cfg.revival == "reap":
            core.commit(core.store.update_lineage(
                rec.id, status=LineageStatus.REAPED, reason="revival policy reap: discarded"))
            core.forget(rec.id)
            return
        if cfg.revival == "ask":
            self._ask(rec, "revival policy ask")
            return
        if revivals(rec) >= cfg.max_revivals:
            core.commit(core.store.update_lineage(
                rec.id, status=LineageStatus.FAILED,
                reason=f"gave up after {cfg.max_revivals} revivals; last: {rec.reason}"))
            core.forget(rec.id)
            return
        if self._crash_looping(rec, x):
            core.commit(core.store.update_lineage(
                rec.id, status=LineageStatus.FAILED,
                reason=f"crash loop: the last {CRASH_LOOP_LIMIT} attempts each died within "
                       f"{cfg.crash_loop_seconds:g}s of starting; last: {rec.reason}"))
            core.forget(rec.id)
            return
        due = time.time() + backoff(rec.attempt)
        core.commit(core.store.update_lineage(rec.id, revive_at=due))
        core.wake.set()

    def _crash_looping(self, rec: LineageRecord, x: ExecRecord | None) -> bool:
        if len(rec.recent_starts) < CRASH_LOOP_LIMIT:
            return False
        ends = [e.ended_at or 0.0 for e in self.core.store.list_execs_of_lineage(rec.id)
                if not e.never_started][-CRASH_LOOP_LIMIT:]
        starts = rec.recent_starts[-CRASH_LOOP_LIMIT:]
        return len(ends) == CRASH_LOOP_LIMIT and all(
            0 <= end - start < rec.config.crash_loop_seconds
            for start, end in zip(starts, ends, strict=True))

    # ------------------------------------------------------------------ revivals
    async def revive_due(self, lineage: str) -> None:
        """A due revival (the tick): only if the lineage is still ORPHANED, or still
        WAITING_LIMIT with its reset time reached on the daemon's clock."""
        async with self.core.lock(lineage):
            fresh = self.core.store.get_lineage(lineage)
            if fresh is not None and (fresh.status == LineageStatus.ORPHANED or (
                    fresh.status == LineageStatus.WAITING_LIMIT
                    and (fresh.revive_at or 0.0) <= self.core.clock.now())):
                await self.begin(fresh, resume=True)

    async def resolve_ask(self, rec: LineageRecord, action: str) -> LineageRecord:
        async with self.core.lock(rec.id):
            fresh = self.core.store.get_lineage(rec.id)  # the caller's copy may be stale
            return await self._resolve_ask(fresh or rec, action)

    async def _resolve_ask(self, rec: LineageRecord, action: str) -> LineageRecord:
        core = self.core
        if rec.status not in (LineageStatus.ASK_PENDING, LineageStatus.WAITING_LIMIT):
            raise TetherError(RpcCode.INVALID_STATE, "INVALID_STATE",
                              f"lineage {rec.id} is {rec.status}, not ASK_PENDING or "
                              "WAITING_LIMIT: there is nothing to resolve",
                              {"status": rec.status})
        if action == "reap":
            rec = core.commit(core.store.update_lineage(
                rec.id, status=LineageStatus.REAPED, reason="reaped by `lineage resolve`"))
            core.forget(rec.id)
            return rec
        return await self.begin(rec, resume=True)

    async def start_successor(self, lineage: str) -> None:
        """A new lineage with a DEAD one's config, started with its handoff: the config
        frozen at the user's start (its repository scripts too), never read again from
        the tree its predecessor's agent wrote."""
        prev = self.core.store.get_lineage(lineage)
        if prev is None:
            return
        handoff = self.core.handoff_path(prev.id)
        handoff.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handoff.write_text(prev.handoff or "")
        await self.create(prev.config, None, predecessor=prev.id)

    # ------------------------------------------------------------------ sweep
    def reap(self) -> dict[str, int]:
        """Sweep without signalling: settle dead sessions, drop stale heartbeat files."""
        store = self.core.store
        swept = removed = 0
        for rec in store.list_lineages((LineageStatus.ACTIVE,)):
            x = store.get_exec(rec.exec_id) if rec.exec_id else None
            if x is None or x.state in EXEC_TERMINAL:
                swept += 1
                if x is not None:
                    self.on_exec_terminal(x)
                else:
                    self.orphan(rec, "reap: no process", None)
        for rec in store.list_lineages():
            if rec.status not in LINEAGE_LIVE and rec.config.worktree:
                removed += int(self.worktree.remove_heartbeat(rec))
        return {"swept": swept, "heartbeat_files_removed": removed}



#: At most this much of the last request and of the handoff go into a continuation.
CONTINUATION_QUOTE = 1500


def continuation(rec: LineageRecord, snap_path: Path) -> str:
    """The prompt that asks a resumed session to carry on, built from the drain snapshot
    (the last request) and the lineage (why the last attempt ended, its handoff)."""
    why = rec.interrupted or "it was stopped"
    text = (f"[tether] This session was interrupted ({why[:200]}) and has been resumed. "
            "Continue the task from where it stopped; do not repeat finished steps.")
    try:
        messages = snapshot.read(snap_path).get("messages") or []
    except (OSError, snapshot.SnapshotError, ValueError):
        messages = []
    last = rec.last_prompt or next(
        (m.get("content") for m in reversed(messages) if isinstance(m, dict)
         and m.get("role") == "user" and isinstance(m.get("content"), str)), None)
    if last:
        text += f" The last request was: «{last[:CONTINUATION_QUOTE]}»."
    if rec.handoff:
        text += f" Your handoff notes: «{rec.handoff[:CONTINUATION_QUOTE]}»."
    return text


def _exit_data(end: Exit) -> dict[str, object]:
    """An exit reason as journaled in the event's data."""
    return {"exit_reason": str(end.reason), "exit_detail": end.detail,
            "reset_at": end.reset_at}


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))
