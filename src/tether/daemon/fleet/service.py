"""Fleet mode, the host's side: hold this host's lease, start the work placed on it,
report how it ends, and revive the work of hosts that lost theirs.

Two loops in the daemon's TaskGroup. The lease loop renews every third of the lease
period; once the period less :data:`FENCE_MARGIN` of it has passed since the last
renewal that was *sent* and acknowledged (by this host's monotonic clock, so before
PostgreSQL can consider the lease expired), the host is fenced: it starts nothing
more, writes no fleet intent and withdraws its agents (they are revived elsewhere),
then takes a new lease with a new token when it can, without resuming the old work
(a placement that new lease carries over, its lineage withdrawn, is revived once, on
another host if one has room, else here as its next generation: never reported ended).
The same deadline goes into the lease file (:mod:`tether.daemon.fleet.lease`) that
the monitors of fleet agents watch, so they stop their agents at that point even when
this daemon is dead. The work loop wakes on a ``NOTIFY`` or every ``interval``: start
what is placed here, report what ended, sweep orphans. PostgreSQL is reached from
worker threads (psycopg's blocking API); while it is unreachable the host keeps
supervising what it has, locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import __version__
from tether.daemon.faults import Faults
from tether.daemon.fleet.keys import REQUEST_PREFIX
from tether.daemon.fleet.keys import request_key as _key
from tether.daemon.fleet.lease import LeaseFile
from tether.daemon.fleet.relay import Relay, exit_status
from tether.daemon.journal import Journal
from tether.model.records import LineageRecord
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE
from tether.runtime.base import MonitorFence
from tether.store import Store

if TYPE_CHECKING:
    from tether.daemon.agents import AgentService

log = logging.getLogger("tether.fleet")

#: Local starts go through the daemon's own method table: the same checks as a client's.
Dispatch = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
#: The reason a lineage stopped here to be handed over begins with this (a drain).
HANDOVER = "handed over to another host: "
#: The reason a lineage was withdrawn because this host's lease does not own it (at a
#: fence, or a stray found by a work pass) begins with this. If a later lease of this
#: host carries its placement over (it stalled just past its fence point, PostgreSQL's
#: lease still live), the work pass revives the placement instead of reporting it ended.
WITHDRAWN = "withdrawn from this host: "
#: The fence point comes this share of the lease before its expiry in PostgreSQL: room
#: for the clocks' and the kill's delays (renewals, every third, never come near it).
FENCE_MARGIN = 1 / 6


@dataclass(frozen=True)
class FleetConfig:
    url: str
    host: str
    capacity: int = 4
    labels: dict[str, str] = field(default_factory=dict)
    lease: float = 10.0  # seconds a lease lasts; renewed every third of it
    interval: float = 1.0  # seconds between work passes without a NOTIFY
    listen: str = "127.0.0.1:0"  # the host-to-host API's ADDR:PORT (0: a free port)
    advertise: str | None = None  # its URL as other hosts reach it (default: from listen)
    tls_cert: str | None = None  # both set: the API speaks HTTPS
    tls_key: str | None = None
    relay_batch: int = 200  # local events relayed to the fleet journal per transaction


class FleetService:
    def __init__(self, cfg: FleetConfig, home: Path, store: Store, journal: Journal,
                 agents: AgentService, dispatch: Dispatch, faults: Faults) -> None:
        self.cfg = cfg
        self.home = home
        self.store = store
        self.journal = journal
        self.agents = agents
        self.dispatch = dispatch
        self.faults = faults
        self.token: int | None = None
        self.state: str | None = None
        self.deadline = 0.0  # monotonic: the lease is surely still ours before this
        self.lease_file = LeaseFile(home, cfg.host)  # the deadline, for the monitors
        self.fenced_count = 0
        self.owned: frozenset[str] = frozenset()  # local request keys this lease owns
        self.wake = asyncio.Event()
        self._conns: dict[str, Any] = {}
        #: one thread per connection role: a renewal never queues behind the daemon's
        #: other blocking work (the shared default executor), and a connection is never
        #: used by two threads at once (a listen that timed out still running)
        self._threads: dict[str, ThreadPoolExecutor] = {}
        self.api_url: str | None = None
        self._used_grants: dict[str, None] = {}  # attach grants used (their digests), oldest first
        self._api: Any = None  # fleet_http.HostApi once run() started it
        self._sock: Any = None  # the API's listening socket, bound by check_schema
        #: per placement generation: (monotonic time of the last HEAD check, HEAD pushed)
        self._pushed: dict[str, tuple[float, str | None]] = {}
        #: per placement generation: its lineage's turn count when the drain was seen
        self._drain_turns: dict[str, int] = {}
        #: per placement generation: the exec a `kill` of it was sent to (sent once)
        self._killing: dict[str, str] = {}
        self.relay = Relay(store, cfg.host, faults, cfg.relay_batch)
        from tether.daemon.fleet.clones import Clones

        self._clones = Clones(home / "fleet" / "worktrees", store, journal, REQUEST_PREFIX)

    def check_schema(self) -> str | None:
        """At start: why this host cannot join (a malformed URL or host name, the
        database is not initialised, is older or newer than this tether, another daemon
        holds this host name's live lease, or the API's address cannot be bound), else
        None. An unreachable database is no reason: the host starts, supervises locally
        and joins when PostgreSQL answers."""
        import psycopg

        from tether.daemon.fleet import http as fleet_http
        from tether.fleet import identity, names, schema
        from tether.fleet import store as fs

        for bad in (names.url_error(self.cfg.url), names.host_name_error(self.cfg.host)):
            if bad:
                return bad
        try:
            self._sock = fleet_http.bind(self.cfg.listen)
        except ValueError as e:
            return str(e)
        try:
            with fs.connect(self.cfg.url) as conn:
                have = schema.version(conn)
        except psycopg.Error as e:
            log.warning("fleet: PostgreSQL unreachable at start (%s); joining when it "
                        "answers", str(e).strip())
            return None
        if have == 0:
            return ("the fleet database is not initialised: run `tether fleet init URL` "
                    "once, then start this host again")
        if have < schema.LATEST:
            return (f"the fleet database is at schema {have}, older than this tether's "
                    f"{schema.LATEST}: run `tether fleet init URL` with this tether to "
                    "upgrade it (hosts of the older tether keep working), then start "
                    "this host again")
        if have > schema.LATEST:
            return (f"the fleet database is at schema {have}, newer than this tether's "
                    f"{schema.LATEST}: upgrade tether on this host")
        try:  # a race past this check is refused by the acquisition itself
            with fs.connect(self.cfg.url) as conn:
                return identity.holder(conn, self.cfg.host, self.store.epoch)
        except psycopg.Error:
            return None

    # ------------------------------------------------------------------ plumbing
    def partitioned(self) -> bool:
        """The ``fleet.partition`` fault: while ``<home>/fleet.partition`` exists this
        host reaches no PostgreSQL (a network partition, for tests)."""
        return "fleet.partition" in self.faults.armed and (self.home / "fleet.partition").exists()

    def _db(self, role: str) -> Any:
        from tether.fleet import store as fs

        conn = self._conns.get(role)
        if conn is None or conn.closed:
            conn = self._conns[role] = fs.connect(self.cfg.url)
            if role == "listen":
                conn.execute(f"LISTEN {fs.CHANNEL}")
        return conn

    def _drop(self, role: str) -> None:
        conn = self._conns.pop(role, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _thread(self, role: str) -> ThreadPoolExecutor:
        pool = self._threads.get(role)
        if pool is None:
            pool = self._threads[role] = ThreadPoolExecutor(1, f"fleet-{role}")
        return pool

    async def _call(self, role: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn(conn, *args)`` in the role's own thread; a broken connection is dropped
        (the next call reconnects) and the error raised."""
        def run() -> Any:
            return fn(self._db(role), *args, **kw)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread(role), run)
        except Exception as e:
            import psycopg

            if isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
                self._drop(role)
            raise

    def close(self) -> None:
        for pool in self._threads.values():
            pool.shutdown(wait=False, cancel_futures=True)
        for role in list(self._conns):
            self._drop(role)

    def may_revive(self, rec: LineageRecord) -> bool:
        """The agent service's revival gate: a fleet lineage is revived here only while
        this host's live lease owns its placement (else it is revived elsewhere)."""
        key = rec.request_key or ""
        return not key.startswith(REQUEST_PREFIX) or (self.live() and key in self.owned)

    def fence_for(self, rec: LineageRecord) -> MonitorFence | None:
        """The fence of an attempt's monitor: fleet-placed lineages only (they are
        revived elsewhere; a plain fleet exec becomes LOST, so it may run on)."""
        key = rec.request_key or ""
        return self.lease_file.fence_for_monitor() if key.startswith(REQUEST_PREFIX) else None

    def live(self) -> bool:
        return self.token is not None and time.monotonic() < self.deadline

    # ------------------------------------------------------------------ lease
    async def run(self) -> None:
        from tether.daemon.fleet import http as fleet_http

        cfg = self.cfg
        sock = self._sock or fleet_http.bind(cfg.listen)
        addr, port = sock.getsockname()[:2]
        scheme = "https" if cfg.tls_cert and cfg.tls_key else "http"
        self.api_url = cfg.advertise or f"{scheme}://{addr}:{port}"
        self._api = fleet_http.HostApi(self.dispatch, self._granted)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(fleet_http.serve(self._api, sock, certfile=cfg.tls_cert,
                                            keyfile=cfg.tls_key), name="fleet-api")
            tg.create_task(self._lease_loop(), name="fleet-lease")
            tg.create_task(self._work_loop(), name="fleet-work")

    async def _granted(self, nonce: str, target: dict[str, str]) -> bool:
        """Whether ``nonce`` is a fresh, unused ``attach.grant`` for ``target`` on this host
        (``fleet_http``): its writer may write to the fleet database."""
        import hashlib

        from tether.fleet import store as fs

        digest = hashlib.sha256(nonce.encode()).hexdigest()
        if digest in self._used_grants:
            return False
        try:
            grant = await self._call("api", fs.attach_grant, self.cfg.host, digest)
        except Exception as e:  # PostgreSQL away: no proof, no writing
            log.warning("fleet api: cannot check an attach grant: %s", e)
            return False
        if grant is None or grant["target"] != target:
            return False
        self._used_grants[digest] = None  # once
        while len(self._used_grants) > 10_000:
            self._used_grants.pop(next(iter(self._used_grants)))
        return True

    async def _lease_loop(self) -> None:
        from tether.fleet import admin
        from tether.fleet import store as fs

        cfg = self.cfg
        while True:
            try:
                if self.token is not None and time.monotonic() >= self.deadline:
                    await self._fence("its lease expired before it could renew it")
                if self.partitioned():
                    pass
                elif self.token is None:
                    t0 = time.monotonic()
                    lease = await self._call("lease", fs.acquire, cfg.host,
                                             capacity=cfg.capacity, labels=cfg.labels,
                                             version=__version__, home=str(self.home),
                                             ttl=cfg.lease, api=self.api_url,
                                             instance=self.store.epoch)
                    if self._api is not None:
                        self._api.set_tokens(*await self._call("lease", admin.api_tokens))
                    self.token, self.state = lease.token, lease.state
                    self.deadline = t0 + cfg.lease * (1 - FENCE_MARGIN)
                    self.lease_file.acquired(lease.token, t0, self.deadline, lease.carried)
                    self.journal.record(None, "fleet.lease", reason=(
                        f"host {cfg.host} holds the fleet lease {lease.token} "
                        f"({lease.carried} placements carried over)"),
                        data={"token": lease.token, "carried": lease.carried})
                    self.wake.set()
                else:
                    t0 = time.monotonic()
                    state, tokens = await self._call("lease", admin.renew_reading_tokens,
                                                     cfg.host, self.token, cfg.lease)
                    if state is None:
                        await self._fence("its lease was taken (expired or fenced)")
                    else:
                        self.state = state
                        self.deadline = t0 + cfg.lease * (1 - FENCE_MARGIN)
                        self.lease_file.renewed(self.deadline)
                        if self._api is not None:  # a rotation reaches the API this way
                            self._api.set_tokens(*tokens)
            except Exception as e:  # PostgreSQL away: keep supervising, retry
                log.warning("fleet lease: %s", e)
            left = self.deadline - time.monotonic() if self.token is not None else cfg.lease
            await asyncio.sleep(min(cfg.lease / 3, max(0.05, left)))  # fence on time

    async def _fence(self, why: str) -> None:
        """Stop acting for the fleet: this host's work is being revived elsewhere."""
        token, self.token = self.token, None
        self.lease_file.fenced()
        self.owned = frozenset()
        self.fenced_count += 1
        log.error("fleet: host %s is fenced (lease %s): %s", self.cfg.host, token, why)
        self.journal.record(None, "fleet.fenced", reason=f"host {self.cfg.host} fenced: {why}",
                            data={"token": token})
        await self._withdraw_strays()

    async def _withdraw_strays(self, keep: frozenset[str] = frozenset()) -> None:
        """Withdraw every live fleet lineage here whose request key (its placement and
        generation) is not one this lease owns."""
        for rec in self.store.list_lineages(tuple(LINEAGE_LIVE)):
            key = rec.request_key or ""
            if key.startswith(REQUEST_PREFIX) and key not in keep:
                await self.agents.withdraw(rec.id, f"{WITHDRAWN}host {self.cfg.host} lost "
                                           "its fleet lease: the lineage runs elsewhere")

    # ------------------------------------------------------------------ work
    async def _work_loop(self) -> None:
        notified = False
        while True:
            self.wake.clear()
            try:
                if self.live() and not self.partitioned():
                    if notified:  # a placement, a drain or an undrain: read the state now
                        from tether.fleet import admin

                        self.state = await self._call("work", admin.host_state,
                                                      self.cfg.host) or self.state
                    await self.pass_once()
            except Exception as e:
                log.warning("fleet work pass: %s", e)
            notified = await self._wait()

    async def _wait(self) -> bool:
        """Until a NOTIFY names this host (True), a lease change, or ``interval``."""
        def listen() -> bool:
            conn = self._db("listen")
            return any(n.payload == self.cfg.host
                       for n in conn.notifies(timeout=self.cfg.interval, stop_after=1))
        if not self.live() or self.partitioned():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.cfg.interval)
            return False
        try:
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
                self._thread("listen"), listen), self.cfg.interval + 5)
        except Exception:
            self._drop("listen")
            await asyncio.sleep(self.cfg.interval)
            return False

    async def pass_once(self) -> None:
        from tether.fleet import store as fs

        host, token = self.cfg.host, self.token
        assert token is not None
        await self.relay.step(self._call, token)
        placed = await self._call("work", fs.placed_for, host, token)
        for w in placed:
            if not self.live():
                return
            if w.get("kill"):  # `tether --fleet URL kill` before it started: never start it
                await self._call("work", fs.mark_ended, w["id"], host, token,
                                 exit_code=None, reason=f"killed before it started on {host}")
                continue
            from tether.daemon.fleet import git as fleet_git

            try:
                local = await self._start(w)
            except fleet_git.GitError as e:  # the branch cannot reach this host: say so
                await self._call("work", fs.mark_ended, w["id"], host, token,
                                 exit_code=None, reason=f"not started on {host}: {e}")
                continue
            await self._call("work", fs.mark_running, w["id"], host, token, local)
        running = await self._call("work", fs.running_on, host, token)
        owned = self.owned = frozenset(_key(w) for w in [*placed, *running])
        self._pushed = {k: v for k, v in self._pushed.items() if k in owned}
        self._drain_turns = {k: v for k, v in self._drain_turns.items() if k in owned}
        for w in running:
            if self._withdrawn(w):  # a fence stopped it, and this lease carried its row
                await self._revive_withdrawn(w, token)
                continue
            ended = self._ended(w)
            if ended is not None and not self._handing(w):
                await self._sync_branch(w, force=True)  # its last commits
                await self._call("work", fs.mark_ended, w["id"], host, token,
                                 exit_code=ended[0], reason=ended[1])
            elif ended is None and self.live():
                if w.get("kill"):
                    await self._kill(w)
                await self._sync_branch(w)
        agents = [w for w in running if w["kind"] == "agent"]
        if self.state != "DRAINING":  # never drained, or undrained: a stopped copy still moves
            self._drain_turns.clear()
            agents = [w for w in agents if self._handing(w)]
        if agents:
            await self._drain(agents, token)
        for w in await self._call("work", fs.lost_here, host):
            x = self.store.get_exec(w["local_id"])  # swept LOST while this host was away
            if x is not None and x.state not in EXEC_TERMINAL and self.live():
                await self._call("work", fs.reclaim, w["id"], host, token, x.id)
        self._killing = {k: v for k, v in self._killing.items() if k in owned}
        await self._withdraw_strays(keep=owned)
        await self._clones.sweep(owned)
        await self._call("work", fs.sweep_orphans, host, token, self.cfg.lease)

    async def _start(self, w: dict[str, Any]) -> str:
        """Start placed work here, once: the request key makes a retry (a crash between
        the start and ``mark_running``) return the same exec or lineage."""
        params = dict(w["spec"])
        params["request_key"] = _key(w)
        git = params.pop("git", None)
        if git and w["kind"] == "agent":
            from tether.daemon.fleet import git as fleet_git

            tree = self._tree(w)
            fetched = await fleet_git.checkout(git["remote"], git["branch"], tree)
            params["cwd"] = params["worktree"] = str(tree)
            if fetched is not None:
                self.journal.record(None, "fleet.worktree", reason=(
                    f"placement {w['id']} generation {w['generation']}: branch "
                    f"{git['branch']} " + ("fetched from " if fetched else
                                           "created from the default branch of ")
                    + git["remote"]), data={"work": w["id"], "path": str(tree), **git,
                                            "fetched": fetched})
        method = "agent.start" if w["kind"] == "agent" else "exec.start"
        reply = await self.dispatch(method, params)
        self.faults.hit("fleet.after_start")
        return str(reply["id"])

    def _withdrawn(self, w: dict[str, Any]) -> bool:
        """Whether ``w``'s local lineage was withdrawn because a lease of this host did
        not own it (``WITHDRAWN``): it did not end, it was stopped to run elsewhere."""
        rec = self.store.get_lineage(w["local_id"]) if w["kind"] == "agent" else None
        return (rec is not None and rec.status not in LINEAGE_LIVE
                and (rec.reason or "").startswith(WITHDRAWN))

    async def _revive_withdrawn(self, w: dict[str, Any], token: int) -> None:
        """Revive a placement whose local copy a fence withdrew, though this lease
        carried its row over (the host stalled just past its fence point while
        PostgreSQL's lease still ran): once, on another host if one has room, else here
        as its next generation, never reported ENDED (``fleet.store.revive_withdrawn``).
        A crash before the commit leaves the row for the next pass."""
        from tether.fleet import store as fs

        host = self.cfg.host
        await self._sync_branch(w, force=True)  # its last commits, for whoever revives it
        got = await self._call("work", fs.revive_withdrawn, w["id"], host, token,
                               f"host {host} was fenced and withdrew lineage {w['local_id']}")
        if got is not None:
            self.journal.record(None, "fleet.revived", reason=(
                f"placement {w['id']} withdrawn at a fence: "
                + (f"revived on host {got['host']} (generation {got['generation']})"
                   if got["state"] == "PLACED" else f"now {got['state']}")),
                data={"work": w["id"], "lineage": w["local_id"], "state": got["state"],
                      "host": got.get("host"), "generation": got.get("generation")})

    async def _kill(self, w: dict[str, Any]) -> None:
        """Carry out ``tether --fleet URL kill`` on placement ``w``'s local exec (an
        agent's: its current attempt's, so the lineage ends "stopped", not revived),
        once per exec: the exec's end then ends the placement as any end does."""
        kill = w["kill"]
        target = w["local_id"]
        if w["kind"] == "agent":
            rec = self.store.get_lineage(w["local_id"])
            if rec is None or rec.status not in LINEAGE_LIVE or rec.exec_id is None:
                return
            target = rec.exec_id
        x = self.store.get_exec(target)
        if x is None or x.state in EXEC_TERMINAL or self._killing.get(_key(w)) == target:
            return
        self._killing[_key(w)] = target
        try:
            await self.dispatch("exec.cancel", {
                "exec": target, "signal": kill.get("signal", "TERM"),
                "grace": float(kill.get("grace", 5.0)),
                "reason": f"tether kill (fleet placement {w['id']})"})
        except Exception as e:  # a bad signal name, or it ended meanwhile: say so, go on
            log.warning("fleet: kill of placement %s: %s", w["id"], e)

    def _handing(self, w: dict[str, Any]) -> bool:
        """Whether ``w``'s local lineage was stopped to be handed over (a drain)."""
        rec = self.store.get_lineage(w["local_id"]) if w["kind"] == "agent" else None
        return rec is not None and (rec.reason or "").startswith(HANDOVER)

    async def _drain(self, agents: list[dict[str, Any]], token: int) -> None:
        """This host is DRAINING: hand each agent over to another host after its current
        turn (a turn ended since the drain was seen, or it waits at its prompt), or at
        once with ``drain --now``. The local copy stops first, then the placement moves
        (fenced): never two copies. A crash in between leaves a stopped copy whose
        placement the next pass moves (``_handing``)."""
        from tether.fleet import store as fs

        host = self.cfg.host
        now = await self._call("work", fs.drain_now, host)
        for w in agents:
            rec = self.store.get_lineage(w["local_id"])
            if rec is None or not self.live():
                continue
            if not self._handing(w):
                if rec.status not in LINEAGE_LIVE:
                    continue  # it ended by itself: reported as ENDED
                base = self._drain_turns.setdefault(_key(w), rec.turns)
                due = now or rec.turns > base or self.agents.at_prompt(rec.id)
                if not due or not await self._call("work", fs.room, w["labels"], host):
                    continue
                await self.agents.withdraw(rec.id, f"{HANDOVER}host {host} is draining")
                await self._sync_branch(w, force=True)
                self.faults.hit("fleet.after_handover_stop")
            moved = await self._call("work", fs.hand_over, w["id"], host, token)
            if moved is not None:
                self.journal.record(None, "fleet.handed_over", reason=(
                    f"placement {w['id']} handed over to host {moved['host']} "
                    f"(generation {moved['generation']}): host {host} is draining"),
                    data={"work": w["id"], "lineage": rec.id, **moved})

    def _tree(self, w: dict[str, Any]) -> Path:
        """This host's clone for a placement's generation (one per generation, so a
        revival back to a host that ran an earlier one never reuses its stale clone)."""
        return self.home / "fleet" / "worktrees" / f"{w['id']}-{w['generation']}"

    async def _sync_branch(self, w: dict[str, Any], *, force: bool = False) -> None:
        """Push a running agent's branch when its clone's HEAD moved (at most every
        ``SYNC_EVERY`` s): what a host reviving it after a failover fetches."""
        from tether.daemon.fleet import git as fleet_git

        git = (w.get("spec") or {}).get("git")
        tree = self._tree(w)
        if not git or w["kind"] != "agent" or not tree.is_dir():
            return
        key = _key(w)
        now = time.monotonic()
        last_at, last_head = self._pushed.get(key, (0.0, None))
        if now - last_at < fleet_git.SYNC_EVERY and not force:
            return
        head = await fleet_git.head(tree)
        self._pushed[key] = (now, last_head)
        if head is None or head == last_head:
            return
        try:
            await fleet_git.push(tree, git["remote"], git["branch"])
        except fleet_git.GitError as e:
            log.warning("fleet: %s", e)
            self.journal.record(None, "fleet.push_failed", reason=str(e),
                                data={"work": w["id"], **git})
            return
        self._pushed[key] = (now, head)

    def _ended(self, w: dict[str, Any]) -> tuple[int | None, str] | None:
        """(exit status, reason) once placement ``w``'s local exec or lineage ended: an
        agent's status is its last attempt's (``tether --fleet URL wait`` exits with it)."""
        if w["kind"] == "agent":
            rec = self.store.get_lineage(w["local_id"])
            if rec is None or rec.status in LINEAGE_LIVE:
                return None
            last = self.store.get_exec(rec.exec_id) if rec.exec_id else None
            return (exit_status(last) if last is not None and last.state in EXEC_TERMINAL
                    else None), f"lineage {rec.id} {rec.status}"
        x = self.store.get_exec(w["local_id"])
        if x is None or x.state not in EXEC_TERMINAL:
            return None
        return exit_status(x), f"exec {x.id} {x.state}"

    def view(self) -> dict[str, Any]:
        return {"host": self.cfg.host, "token": self.token, "live": self.live(),
                "api": self.api_url,
                "state": self.state, "fenced": self.fenced_count,
                "lease_left": max(0.0, self.deadline - time.monotonic()) if self.token else 0.0}
