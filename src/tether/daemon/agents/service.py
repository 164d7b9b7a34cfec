"""``AgentService``: the agent service's one face to the daemon and its API.

It wires the parts around one shared :class:`AgentCore` and delegates; the read
side (``resolve``, ``view``, ``summary_for_exec``) is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

import msgspec

from tether.agent import snapshot
from tether.agent.confinement import egress_allow
from tether.agent.providers import load_user, user_warnings
from tether.daemon.agents import recovery
from tether.daemon.agents.attempts import Attempts, revivals
from tether.daemon.agents.core import AgentCore
from tether.daemon.agents.handoff import hand_off, wanted
from tether.daemon.agents.protocol import Protocol
from tether.daemon.agents.scripts import WorktreeScripts
from tether.daemon.agents.tick import Tick
from tether.daemon.agents.turns import OutputTurns
from tether.daemon.agents.worktree import WorktreeFiles
from tether.daemon.clock import Clock
from tether.daemon.egress import EgressService
from tether.daemon.execs.service import ExecService
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.sandboxes.service import SandboxService
from tether.daemon.tasks import Tasks
from tether.egress.policy import BadEntry, network_mode
from tether.model.errors import RpcCode, TetherError
from tether.model.layout import HomeLayout
from tether.model.records import AgentConfig, EgressLog, LineageRecord
from tether.model.repo import Handoff
from tether.model.states import LINEAGE_LIVE, LineageStatus
from tether.runtime.base import MonitorFence
from tether.store import Store

log = logging.getLogger("tether.agents")


class AgentService:
    def __init__(self, store: Store, layout: HomeLayout, journal: Journal,
                 execs: ExecService, sandboxes: SandboxService, tasks: Tasks, instance: str,
                 faults: Faults, *, tick_interval: float, clock: Clock | None = None,
                 egress: EgressService | None = None) -> None:
        self.store = store  # the read side's; the parts share everything through core
        self.layout = layout
        self.core = AgentCore(store, layout, journal, execs, sandboxes, tasks, instance,
                              faults, clock)
        self.core.egress = egress
        self.worktree = WorktreeFiles(self.core)
        self.scripts = WorktreeScripts(self.core)
        self.attempts = Attempts(self.core, self.worktree, self.scripts)
        self.core.on_end = self._on_end
        # lineage -> its end task (hand-off, companion, ports, archive), while it runs.
        self.ending: dict[str, asyncio.Task[None]] = {}
        self.protocol = Protocol(self.core, self.worktree)
        self.attempts.output_turns = OutputTurns(self.core, self.protocol)
        self.ticker = Tick(self.core, self.attempts, self.worktree, tick_interval,
                           self.attempts.output_turns)
        self.wake = self.core.wake
        execs.on_terminal.append(self.attempts.on_exec_terminal)
        self._warned: set[str] = set()  # provider files' warnings already logged
        self.reload_providers()  # before recovery, which may resume a user provider's agent

    def reload_providers(self) -> list[str]:
        """Load ``<home>/providers/*.toml`` again; returns why any file was refused."""
        errors = load_user(self.layout.root / "providers")
        for e in errors:
            log.warning("provider file refused: %s", e)
        for w in set(user_warnings()) - self._warned:  # once each, not at every start
            log.warning("provider file %s", w)
            self._warned.add(w)
        return errors

    @property
    def tick_interval(self) -> float:
        return self.ticker.interval

    @tick_interval.setter
    def tick_interval(self, value: float) -> None:
        self.ticker.interval = value

    # ------------------------------------------------------------------ read side
    def resolve(self, ref: str) -> LineageRecord:
        found = self.store.find_lineages(ref)
        if not found:
            raise TetherError(RpcCode.NOT_FOUND, "LINEAGE_NOT_FOUND",
                              f"no lineage matches {ref!r}; list them with `tether lineage ls`",
                              {"ref": ref})
        if len(found) > 1 and found[0].id != ref and found[0].name != ref:
            raise TetherError(RpcCode.AMBIGUOUS, "AMBIGUOUS",
                              f"{ref!r} matches {len(found)} lineages; give more of the id",
                              {"ref": ref})
        return found[0]

    def view(self, rec: LineageRecord, *, detail: bool = False) -> dict[str, Any]:
        """The lineage as ``lineage.*`` show it; ``detail`` (``lineage.get``) adds what
        costs a lookup per lineage: its network and allow-list."""
        out: dict[str, Any] = {
            "id": rec.id, "name": rec.name, "provider": rec.config.provider,
            "status": rec.status, "lifecycle": rec.lifecycle, "exec": rec.exec_id,
            "attempt": rec.attempt, "revivals": revivals(rec), "turns": rec.turns,
            "exit_reason": rec.exit_reason, "limit_waits": rec.limit_waits,
            "fenced_exits": rec.fenced_exits,
            "context_pct": rec.context_pct, "model": rec.model, "usage": rec.usage,
            "provider_session_id": rec.provider_session_id, "reason": rec.reason,
            "revival": rec.config.revival, "heartbeat": self.heartbeat_class(rec),
            "waiting_since": rec.waiting_since if rec.status == LineageStatus.ACTIVE else None,
            "revive_at": rec.revive_at, "has_handoff": rec.handoff is not None,
            "snapshot": str(snapshot.path_for(self.layout.root, rec.id)),
            "worktree": rec.config.worktree, "created_at": rec.created_at,
            "predecessor": rec.predecessor, "port_base": rec.config.port_base,
            "handed_off": rec.handed_off, "egress": self.egress_view(rec, detail=detail),
        }
        return out

    def egress_view(self, rec: LineageRecord, *, detail: bool) -> dict[str, Any]:
        """What its egress proxy denied it; with ``detail``, also how it reaches the
        network (``proxy``: its allow-list) — a sandbox lookup and a parse per lineage,
        too much for ``lineage.list`` of thousands."""
        e = rec.egress or EgressLog()
        out: dict[str, Any] = {"denied": e.denied, "denied_hosts": msgspec.to_builtins(e.hosts)}
        if not detail:
            return out
        sb = self.store.get_sandbox(rec.config.sandbox)
        if sb is None:
            return {"network": "unknown", **out}
        confined = self.core.sandboxes.runtime_of(sb).confines_agents
        mode = network_mode(sb.spec.network, agent=True) if confined else "host"
        if mode == "proxy":
            with contextlib.suppress(BadEntry):
                out["allow"] = egress_allow(rec.config.provider, sb.spec.network,
                                            rec.config.allow_domains)
        return {"network": mode, **out}

    def summary_for_exec(self, exec_id: str, lineage_id: str) -> dict[str, Any] | None:
        rec = self.store.get_lineage(lineage_id)
        if rec is None:
            return None
        return {"lineage": rec.id, "status": rec.status, "lifecycle": rec.lifecycle,
                "heartbeat": self.heartbeat_class(rec) if rec.exec_id == exec_id else None,
                "context_pct": rec.context_pct, "turns": rec.turns,
                "revivals": revivals(rec), "exit_reason": rec.exit_reason}

    def heartbeat_class(self, rec: LineageRecord) -> str | None:
        return self.core.heartbeat_class(rec)

    def touch(self, rec: LineageRecord) -> None:
        self.core.touch(rec)

    # ------------------------------------------------------------------ attempts
    async def start(self, cfg: AgentConfig, name: str | None,
                    request_key: str | None = None) -> LineageRecord:
        return await self.attempts.start(cfg, name, request_key)

    async def resolve_ask(self, rec: LineageRecord, action: str) -> LineageRecord:
        return await self.attempts.resolve_ask(rec, action)

    async def withdraw(self, lineage: str, reason: str) -> None:
        """End a live lineage here for good (REAPED, its exec killed): fleet mode calls
        it when this host lost its lease, since the lineage is revived on another host
        and must not run here too (a lineage mid-revival becomes FAILED instead)."""
        async with self.core.lock(lineage):
            rec = self.store.get_lineage(lineage)
            if rec is None or rec.status not in LINEAGE_LIVE:
                return
            # REVIVING may only fail (its attempt is committed, not started).
            status = (LineageStatus.FAILED if rec.status == LineageStatus.REVIVING
                      else LineageStatus.REAPED)
            rec = self.core.commit(self.store.update_lineage(
                rec.id, status=status, reason=reason))
            self.core.forget(rec.id)
        x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
        if x is not None:
            await self.core.execs.cancel(x, signal.SIGKILL, 0.0, reason)

    def at_prompt(self, lineage: str) -> bool:
        """Whether the agent's last turn ended and it waits for its user (a drain moves
        it now rather than mid-turn)."""
        rec = self.store.get_lineage(lineage)
        return rec is not None and rec.waiting_since is not None

    def gate_revivals(self, may_revive: Callable[[LineageRecord], bool]) -> None:
        """Revive a lineage (tick, recovery) only when ``may_revive`` says so."""
        self.core.may_revive = may_revive

    def fence_attempts(self, fence: Callable[[LineageRecord], MonitorFence | None]) -> None:
        """Give each attempt's monitor the fence ``fence`` returns for its lineage."""
        self.core.fence = fence

    def reap(self) -> dict[str, int]:
        """Sweep without signalling: settle dead sessions, drop stale heartbeat files."""
        return self.attempts.reap()

    async def recover(self) -> dict[str, int]:
        """After exec recovery: every live lineage without a live process is ORPHANED."""
        return await recovery.recover(self.core, self.attempts)

    def close(self) -> None:
        self.protocol.close()

    # ------------------------------------------------------------------ agent protocol
    def authenticate(self, session: str, token: str) -> LineageRecord:
        return self.protocol.authenticate(session, token)

    async def turn(self, rec: LineageRecord, *, context_pct: float | None,
                   usage: dict[str, int] | None, model: str | None,
                   messages: list[dict[str, Any]], config: dict[str, Any] | None = None,
                   ) -> dict[str, Any]:
        return await self.protocol.turn(rec, context_pct=context_pct, usage=usage,
                                        model=model, messages=messages, config=config)

    def authorize_tool(self, rec: LineageRecord, tool: str) -> dict[str, Any]:
        return self.protocol.authorize_tool(rec, tool)

    def heartbeat(self, rec: LineageRecord) -> dict[str, Any]:
        return self.protocol.heartbeat(rec)

    def handoff(self, rec: LineageRecord, text: str) -> dict[str, Any]:
        return self.protocol.handoff(rec, text)

    async def hook(self, rec: LineageRecord, provider_name: str, event: str,
                   payload: dict[str, Any]) -> dict[str, Any]:
        return await self.protocol.hook(rec, provider_name, event, payload)

    # ------------------------------------------------------------------ ends
    def _on_end(self, lineage: str) -> None:
        if lineage in self.ending or not self.core.tasks.open:
            return  # (before the group opens, recovery runs what is owed)
        self.ending[lineage] = self.core.tasks.spawn(self._end(lineage),
                                                     name=f"end-{lineage}")

    async def _end(self, lineage: str) -> None:
        """After a lineage's end: its hand-off if it finished and one is owed, then its
        companion stopped, its ports freed and its archive script."""
        try:
            rec = self.store.get_lineage(lineage)
            if rec is None:
                return
            h = wanted(rec)
            await self.scripts.stop_companion(rec)  # no process of the sandbox meanwhile
            if rec.status == LineageStatus.FINISHED and h and rec.handed_off is None:
                rec, _ = await hand_off(self.core, rec, h)
            await self.scripts.on_end(rec)
            if self.core.egress is not None:
                await self.core.egress.drop(lineage)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("ending lineage %s failed", lineage)
        finally:
            self.ending.pop(lineage, None)

    def resume_ends(self) -> int:
        """At start: ports of lineages never created are free again, and every finished
        lineage whose hand-off is owed gets it (a daemon killed mid-way)."""
        self.core.ports.sweep_unborn()
        owed = [r.id for r in self.store.list_lineages((LineageStatus.FINISHED,))
                if r.handed_off is None and wanted(r) is not None]
        for lineage in owed:
            self._on_end(lineage)
        return len(owed)

    async def finish(self, rec: LineageRecord, *, commit: bool,
                     ) -> tuple[LineageRecord, dict[str, Any] | None]:
        """``lineage.finish``: stop a live lineage (it FINISHES), then hand its branch
        off now (again, if a hand-off failed), whether or not its finish would have; the
        outcome is None when it was handed off already."""
        if rec.status in LINEAGE_LIVE:
            x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
            if x is not None and x.ended_at is None:
                await self.core.execs.cancel(x, 15, 5.0, "finished by `tether lineage finish`")
            for _ in range(300):
                fresh = self.store.get_lineage(rec.id)
                if fresh is None or fresh.status not in LINEAGE_LIVE:
                    break
                await asyncio.sleep(0.1)
            else:
                raise TetherError(RpcCode.INVALID_STATE, "STILL_RUNNING",
                                  f"lineage {rec.id} did not end within 30 s of its exec's "
                                  "cancel; try again, or `tether kill` its exec")
        task = self.ending.get(rec.id)
        if task is not None:
            await asyncio.shield(task)
        rec = self.store.get_lineage(rec.id) or rec
        if rec.status != LineageStatus.FINISHED:
            raise TetherError(RpcCode.INVALID_STATE, "NOT_FINISHED",
                              f"lineage {rec.id} is {rec.status}, not FINISHED: only a "
                              "finished lineage's branch is handed off")
        if rec.handed_off == "ok" and not commit:
            return rec, None
        repo_h = rec.config.repo.handoff if rec.config.repo else None
        h = Handoff(commit=commit or bool(repo_h and repo_h.commit) or
                    rec.config.commit_on_finish,
                    remote=repo_h.remote if repo_h else None,
                    command=repo_h.command if repo_h else None)
        return await hand_off(self.core, rec, h)

    # ------------------------------------------------------------------ tick
    async def tick_loop(self) -> None:
        await self.ticker.loop()

    async def tick(self) -> float | None:
        """One pass; returns when the next pending revival is due, if any."""
        return await self.ticker.tick()
