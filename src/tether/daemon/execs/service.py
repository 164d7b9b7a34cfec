"""Execs: accept (intent first), hand to a monitor, watch, cancel, wait, read logs,
and re-adopt after a crash.

In-memory state here is category C only — pidfd watches, wait events,
pending cancels and execs whose settlement the store refused (a full disk;
the sweep retries them) — and :meth:`ExecService.recover` rebuilds it from the store
(A), the monitor files (D) and the process table (B).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether.daemon.execs.latency import Histogram
from tether.daemon.execs.terminal_events import catch_up, watch_terminal
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.logfmt import ids
from tether.daemon.signals import describe_exit
from tether.daemon.tasks import Tasks
from tether.hostio.pidfd import signal_verified_group
from tether.hostio.proc import is_same_process
from tether.model.errors import (
    RpcCode,
    TetherError,
    ambiguous,
    as_disk_full,
    disk_full,
    invalid_params,
    not_found,
)
from tether.model.layout import ExecPaths, HomeLayout
from tether.model.records import (
    DEFAULT_SANDBOX,
    Event,
    ExecRecord,
    ExecSpec,
    LineageRecord,
    SandboxRecord,
    to_builtins,
)
from tether.model.states import EXEC_TERMINAL, ExecState, SandboxState
from tether.runtime.base import CANNOT_CONFINE, AgentView, ExecRequest, MonitorFence
from tether.runtime.monitors import Inspection, MonitorPool, StartError
from tether.runtime.registry import Runtimes
from tether.store import Store

log = logging.getLogger("tether.execs")

LOG_POLL_INTERVAL = 0.02
MAX_LOG_CHUNK = 1024 * 1024


def unsandboxed(problem: str) -> str:
    """The one line ``tether run`` prints when the default sandbox ran a command
    unconfined: why, and how to have it sandboxed or refused (README, Sandboxes, says how
    to have it unconfined without a notice), short enough to be read."""
    why = problem.split("; ", 1)[0]  # the fact; how to fix it is said just after
    same = re.match(r"(\S+) is or contains (the home directory )?\1(?: \(.*\))?$", why)
    if same is not None:  # "/tmp is or contains /tmp": say it once
        why = f"{same[1]} is a {'home' if same[2] else 'system'} directory"
    return (f"ran unsandboxed: {why}; run from a project directory to be sandboxed "
            "(--runtime bwrap refuses instead)")


def not_confinable(problem: str, cwd: str | None) -> TetherError:
    """Why an exec the default sandbox cannot confine is refused: only a caller that asked
    for the fallback (``unconfined_ok``: ``tether run`` at its user's terminal) gets one.
    The dashboard, MCP tools, the SDK and raw callers never run a command unsandboxed."""
    hint = ("give cwd: a project directory, which becomes the sandbox's writable workspace"
            if cwd is None else "start it from a project directory instead")
    return TetherError(RpcCode.INVALID_PARAMS, CANNOT_CONFINE,
                       f"the default sandbox cannot confine this command: {problem}; {hint} "
                       "(or use a sandbox with a workspace); it is not run unsandboxed",
                       {"problem": problem, "cwd": cwd})


@dataclass
class _Watch:
    pidfd: int | None  # None: no usable handles; the sweep loop polls it instead
    handles: dict[str, Any] | None


class ExecService:
    def __init__(self, store: Store, layout: HomeLayout, monitors: MonitorPool,
                 runtimes: Runtimes, journal: Journal, tasks: Tasks, faults: Faults) -> None:
        self.store = store
        self.layout = layout
        self.monitors = monitors
        self.runtimes = runtimes
        self.journal = journal
        self.faults = faults
        self._watches: dict[str, _Watch] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._pending_cancel: dict[str, tuple[int, float, str]] = {}
        self._pids: dict[str, int] = {}
        # Execs whose monitor is gone (or state unknown) but whose new state could not be
        # committed (e.g. the disk is full): the sweep settles them again.
        self._unsettled: set[str] = set()
        self._terminal_watchers: dict[str, asyncio.Task[None]] = {}
        # exec id -> the number of its next terminal event the journal lacks, as far as
        # its watcher knows (so the end's catch-up need not ask the journal)
        self._terminal_next: dict[str, int] = {}
        # The daemon's group: owner of the long-lived per-exec tasks.
        self.tasks = tasks
        # The default sandbox's runtime is ``auto``: where it cannot confine an exec (its
        # cwd is a system or home directory) the exec runs unconfined, with a notice.
        self.default_falls_back = False
        # Called (synchronously) with every exec that reaches a terminal state.
        self.on_terminal: list[Callable[[ExecRecord], None]] = []
        #: exec.start → RUNNING, for ``daemon.metrics`` (C: since this daemon started)
        self.start_latency = Histogram()

    # ------------------------------------------------------------------ helpers
    def paths(self, rec: ExecRecord) -> ExecPaths:
        return self.layout.exec_paths(rec.sandbox, rec.id)

    def _commit(self, result: tuple[ExecRecord, Event]) -> ExecRecord:
        rec = self.journal.commit(result)
        if rec.state in EXEC_TERMINAL:
            log.info("exec %s %s%s", rec.id, rec.state,
                     "" if rec.exit_code is None else f" (exit {rec.exit_code})",
                     extra=ids(exec=rec.id, sandbox=rec.sandbox, lineage=rec.lineage))
            done = self._done.pop(rec.id, None)  # later waiters read the store
            if done is not None:
                done.set()
            for callback in self.on_terminal:
                try:
                    callback(rec)
                except Exception:
                    log.exception("exec-end callback failed for %s", rec.id,
                                  extra=ids(exec=rec.id, sandbox=rec.sandbox))
        return rec

    def resolve(self, ref: str) -> ExecRecord:
        """An exec by id, name or id prefix — or an agent lineage's (by id, name or id
        prefix) current attempt: after a revival the lineage's exec is a new one, and
        ``tether attach|logs|kill|wait LINEAGE`` reach it."""
        found = self.store.find_execs(ref)
        if not (found and (found[0].id == ref or found[0].name == ref)):
            lineages = self.store.find_lineages(ref)
            exact = [r for r in lineages if r.id == ref or r.name == ref]
            pick = exact[:1] or (lineages if not found and len(lineages) == 1 else [])
            attempt = self._attempt_of(pick[0]) if pick else None
            if attempt is not None:
                return attempt
        if not found:
            raise not_found("exec", ref)
        if len(found) > 1:
            raise ambiguous("execs", ref, [r.id for r in found])
        return found[0]

    def _attempt_of(self, lineage: LineageRecord) -> ExecRecord | None:
        """A lineage's current attempt's exec (or, between attempts, its last one)."""
        x = self.store.get_exec(lineage.exec_id) if lineage.exec_id else None
        if x is None:
            execs = self.store.list_execs_of_lineage(lineage.id)
            x = execs[-1] if execs else None
        return x

    def view(self, rec: ExecRecord) -> dict[str, Any]:
        out: dict[str, Any] = to_builtins(rec)
        paths = self.paths(rec)
        out["pid"] = self._pids.get(rec.id) if rec.state == ExecState.RUNNING else None
        out["stdout_path"] = str(paths.stdout)
        out["stderr_path"] = str(paths.stderr)
        out["pty_path"] = str(paths.pty) if rec.spec.tty else None
        out["socket"] = str(paths.socket)
        return out

    def live_count(self) -> int:
        return len(self._watches)

    def pid_of(self, exec_id: str) -> int | None:
        return self._pids.get(exec_id)

    # ------------------------------------------------------------------ start
    async def start(self, sandbox: SandboxRecord, spec: ExecSpec, request_key: str | None,
                    *, lineage: str | None = None, agent_view: AgentView | None = None,
                    fence: MonitorFence | None = None,
                    unconfined_ok: bool = False) -> ExecRecord:
        """Start ``spec`` in ``sandbox``. ``unconfined_ok``: where the ``auto`` default
        sandbox cannot confine it (a system or home cwd), run it with the process runtime
        and a notice instead of refusing — for ``tether run`` only; never without a cwd."""
        t0 = time.monotonic()
        if request_key:
            existing = self.store.exec_by_request_key(request_key)
            if existing is not None:
                return existing
        if sandbox.state != SandboxState.READY:
            raise TetherError(RpcCode.INVALID_STATE, "SANDBOX_NOT_READY",
                              f"sandbox {sandbox.name!r} is {sandbox.state}; start it with "
                              f"`tether sandbox start {sandbox.name}`",
                              {"sandbox": sandbox.id, "state": sandbox.state})
        if spec.name and self.store.live_exec_named(spec.name) is not None:
            raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                              f"an exec named {spec.name!r} is still running; pick another "
                              f"name or stop it with `tether kill {spec.name}`",
                              {"name": spec.name})
        cwd = spec.cwd or sandbox.spec.workspace
        if cwd is not None:
            if not os.path.isabs(cwd):
                raise invalid_params(f"cwd must be an absolute path, got {cwd!r}")
            if not os.path.isdir(cwd):
                raise invalid_params(f"cwd {cwd!r} is not an existing directory")
        # Everything that can refuse the exec is checked before its intent is committed.
        req = ExecRequest(sandbox=sandbox, spec=spec, cwd=cwd, agent=agent_view,
                          tether_home=os.path.realpath(self.layout.root))
        notice = None
        runtime = self.runtimes.get(sandbox.spec.runtime)
        if (sandbox.id == DEFAULT_SANDBOX and self.default_falls_back and agent_view is None
                and not unconfined_ok and runtime is self.runtimes.unconfined()):
            # ``auto`` found no confining runtime on this host: every default exec would
            # run unsandboxed, which only ``tether run`` accepts (on purpose, with
            # ``--default-runtime process``, it is the user's choice and not refused).
            _ok, why = self.runtimes.get("bwrap").available()
            raise not_confinable(f"runtime auto found no sandbox on this host ({why})", cwd)
        try:
            plan = runtime.prepare_exec(req)
        except TetherError as e:
            if not (e.code == CANNOT_CONFINE and sandbox.id == DEFAULT_SANDBOX
                    and self.default_falls_back and agent_view is None):
                raise
            problem = str(e.data.get("problem", e.message))
            if not unconfined_ok or cwd is None:
                raise not_confinable(problem, cwd) from None
            plan = self.runtimes.unconfined().prepare_exec(req)
            notice = unsandboxed(problem)
        exec_id = self.store.reserve_id("exec")
        rec = ExecRecord(id=exec_id, sandbox=sandbox.id, state=ExecState.PENDING,
                         spec=spec.without_env_values(), name=spec.name,
                         created_at=time.time(), request_key=request_key, lineage=lineage,
                         notice=notice, reason=notice)
        self._commit(self.store.create_exec(rec))
        self.faults.hit("exec.after_commit")

        paths = self.paths(rec)
        try:
            try:
                started = await self.monitors.start(rec, paths, plan(exec_id), fence)
            except (StartError, asyncio.CancelledError):
                raise
            except Exception as e:  # never leave a committed exec PENDING and unwatched
                log.exception("starting exec %s failed", exec_id,
                              extra=ids(exec=exec_id, sandbox=sandbox.id, lineage=lineage))
                raise StartError(f"starting the monitor failed: {e!r}",
                                 "MONITOR_FAILED") from e
        except StartError as e:
            self._pending_cancel.pop(exec_id, None)
            unstarted = self.monitors.never_started(paths)
            try:
                failed = self._commit(self.store.transition_exec(
                    exec_id, ExecState.FAILED, reason=str(e), ended_at=time.time(),
                    exit_code=127 if e.code == "START_FAILED" else None,
                    never_started=unstarted,
                    data={"never_started": True} if unstarted else None))
            except Exception:
                self._unsettled.add(exec_id)  # its claim stops any monitor: fail it later
                raise
            if e.code == "DISK_FULL":
                full = disk_full(str(paths.exit), str(e))
                full.data["exec"] = failed.id
                raise full from None
            raise TetherError(RpcCode.START_FAILED, e.code, str(e),
                              {"exec": failed.id}) from None
        finally:
            self.monitors.wanted.set()
        self.faults.hit("exec.after_handoff")
        try:
            rec = self._commit(self.store.transition_exec(
                exec_id, ExecState.RUNNING, reason=f"started as pid {started.pid}",
                started_at=started.started_at))
        except Exception:
            self._unsettled.add(exec_id)  # it runs: the sweep adopts it once it can
            raise
        self.start_latency.observe(time.monotonic() - t0)
        handles = {"monitor": {"pid": started.monitor_pid,
                               "start_time": started.monitor_start_time},
                   "child": {"pid": started.pid, "start_time": started.start_time}}
        self._pids[exec_id] = started.pid
        pidfd = self.monitors.watch_fd(handles)
        if pidfd is None and not is_same_process(started.monitor_pid,
                                                 started.monitor_start_time):
            self._settle(exec_id)  # it already ended
        else:
            self._watch(rec, handles, pidfd)
        pending = self._pending_cancel.pop(exec_id, None)
        if pending is not None:
            await self._send_cancel(rec, *pending)
        return self.store.get_exec(exec_id) or rec

    # ------------------------------------------------------------------ watching
    def _watch(self, rec: ExecRecord, handles: dict[str, Any] | None,
               pidfd: int | None) -> None:
        """Learn when the monitor ends: its pidfd turns readable. Without a pidfd
        (unreadable handles, no descriptors left, a monitor still starting) the
        sweep loop polls it instead."""
        self._watches[rec.id] = _Watch(pidfd, handles)
        if pidfd is not None:
            asyncio.get_running_loop().add_reader(pidfd, self._on_monitor_exit, rec.id)
        if (rec.spec.tty or rec.spec.stdin) and self.tasks.open:
            self._terminal_watchers[rec.id] = self.tasks.spawn(
                watch_terminal(self.store, self.journal, rec, self.paths(rec).socket,
                               self._terminal_next),
                name=f"terminal-{rec.id}")

    def _unwatch(self, exec_id: str) -> None:
        task = self._terminal_watchers.pop(exec_id, None)
        if task is not None:
            task.cancel()
        w = self._watches.pop(exec_id, None)
        if w is not None and w.pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(w.pidfd)
            os.close(w.pidfd)

    def _on_monitor_exit(self, exec_id: str) -> None:
        self._unwatch(exec_id)
        self.monitors.reap_children()
        self._settle(exec_id)

    def _settle(self, exec_id: str) -> None:
        """The monitor is gone (or never came): record what really happened."""
        try:
            rec = self.store.get_exec(exec_id)
        except Exception as e:
            self._retry_later(exec_id, e)
            return
        if rec is None or rec.state in EXEC_TERMINAL:
            self._unsettled.discard(exec_id)
            return
        self._apply_or_retry(rec, self.monitors.inspect(self.paths(rec)))

    def _apply_or_retry(self, rec: ExecRecord, insp: Inspection) -> str:
        """:meth:`_apply`; if the store refuses (a full disk), the sweep tries again."""
        try:
            done = self._apply(rec, insp)
        except Exception as e:
            w = self._watches.get(rec.id)
            if insp.pidfd is not None and (w is None or w.pidfd != insp.pidfd):
                os.close(insp.pidfd)  # not handed to a watch: ours to close
            self._retry_later(rec.id, e)
            return "retry"
        self._unsettled.discard(rec.id)
        return done

    def _retry_later(self, exec_id: str, e: Exception) -> None:
        first = exec_id not in self._unsettled
        self._unsettled.add(exec_id)
        full = as_disk_full(e, str(self.store.path))
        if full is not None:
            if first:
                log.warning("exec %s: %s; settling it again at every sweep", exec_id,
                            full.message)
        elif first:
            log.exception("settling exec %s failed; trying again at every sweep", exec_id)
        else:
            log.debug("settling exec %s failed again: %r", exec_id, e)

    def _apply(self, rec: ExecRecord, insp: Inspection) -> str:
        """Bring the record in line with an inspection. Returns what was done."""
        if insp.kind in ("exited", "lost") and (rec.spec.tty or rec.spec.stdin):
            # Attaches and detaches no daemon journaled (none was watching), before the end.
            catch_up(self.store, self.journal, rec, self.paths(rec).events,
                     self._terminal_next.pop(rec.id, None))
        if insp.kind == "exited":
            assert insp.exit is not None
            st = insp.exit
            if rec.state == ExecState.PENDING and st.get("outcome") != "start_failed":
                rec = self._commit(self.store.transition_exec(
                    rec.id, ExecState.RUNNING, started_at=st.get("started_at"),
                    reason="started while the daemon was down"))
            outcome = st.get("outcome", "exited")
            to = {"cancelled": ExecState.CANCELLED, "timeout": ExecState.CANCELLED,
                  "fenced": ExecState.CANCELLED,
                  "start_failed": ExecState.FAILED}.get(outcome, ExecState.FINISHED)
            reason = st.get("reason") or describe_exit(outcome, st)
            self._commit(self.store.transition_exec(
                rec.id, to, reason=reason, exit_code=st.get("exit_code"),
                signal=st.get("signal"), ended_at=st.get("ended_at"),
                data={"outcome": outcome}))
            self._pids.pop(rec.id, None)
            self.monitors.remove_scratch(self.paths(rec))
            return "finished"
        if insp.kind == "alive":
            if rec.state == ExecState.PENDING:
                started_at = (insp.handles or {}).get("started_at")
                rec = self._commit(self.store.transition_exec(
                    rec.id, ExecState.RUNNING, started_at=started_at,
                    reason="started while the daemon was down"))
                pending = self._pending_cancel.pop(rec.id, None)
                if pending is not None and self.tasks.open:
                    self.tasks.spawn(self._cancel_quietly(rec, *pending))
            if insp.handles is not None:
                self._pids[rec.id] = insp.handles["child"]["pid"]
            if rec.id not in self._watches:
                self._watch(rec, insp.handles, insp.pidfd)
            elif insp.pidfd is not None:
                os.close(insp.pidfd)
            return "adopted"
        if insp.kind == "unstarted" and rec.state == ExecState.RUNNING:
            insp = Inspection("lost", reason="RUNNING in the store but its handles file is "
                              "missing and no monitor holds it")
        if insp.kind == "unstarted" and not self.monitors.claim_for_failure(self.paths(rec)):
            return "starting"  # a monitor claimed it this instant; look again
        if insp.kind == "starting":
            return "starting"
        if insp.kind == "lost" and insp.handles is not None:
            self._end_orphan(rec)
        reason = insp.reason or ("INTERRUPTED: the daemon stopped after accepting this exec "
                                 "and before starting it; it was never started")
        unstarted = rec.state == ExecState.PENDING and self.monitors.never_started(
            self.paths(rec))
        self._commit(self.store.transition_exec(
            rec.id, ExecState.FAILED, reason=reason, ended_at=time.time(),
            never_started=unstarted, data={"never_started": True} if unstarted else None))
        self._pids.pop(rec.id, None)
        self.monitors.remove_scratch(self.paths(rec))
        return "failed"

    def _end_orphan(self, rec: ExecRecord) -> None:
        """Its monitor died while the command may still run: ``inspect`` killed the
        child's process group; what the command runs out of its reach (a docker exec's,
        in the container) is ended by its runtime, in the background."""
        sb = self.store.get_sandbox(rec.sandbox)
        if sb is None or not self.tasks.open:
            return
        try:
            rt = self.runtimes.get(sb.spec.runtime)
        except TetherError:
            return
        self.tasks.spawn(rt.end_orphan(sb, rec.id), name=f"orphan-{rec.id}")

    async def recover(self) -> dict[str, int]:
        """Re-adopt, finish or fail every exec the store says is live."""
        summary = {"adopted": 0, "finished": 0, "failed": 0}
        todo = self.store.list_execs(states=(ExecState.PENDING, ExecState.RUNNING))
        for _attempt in range(100):
            later: list[ExecRecord] = []
            for rec in todo:
                done = self._apply(rec, self.monitors.inspect(self.paths(rec)))
                if done == "starting":
                    later.append(rec)
                else:
                    summary[done] += 1
            if not later:
                break
            todo = [r for r in (self.store.get_exec(x.id) for x in later) if r is not None]
            await asyncio.sleep(0.02)
        else:
            # A monitor holds the claim but is slow to start the command: failing it
            # now could leave a command running untracked, so the sweep keeps looking.
            for rec in todo:
                self._watch(rec, None, None)
                summary["adopted"] += 1
        return summary

    def sweep(self) -> None:
        """Settle again what the store refused; poll the execs watched without a pidfd;
        reap exited monitors."""
        self.monitors.reap_children()
        for exec_id in sorted(self._unsettled):
            if exec_id not in self._watches:
                self._settle(exec_id)
        for exec_id, w in list(self._watches.items()):
            rec = self.store.get_exec(exec_id)
            if w.pidfd is not None or rec is None:
                continue
            insp = self.monitors.inspect(self.paths(rec))
            if insp.kind == "alive" and insp.pidfd is None:
                continue  # still alive, still no pidfd: keep polling
            self._unwatch(exec_id)
            if self._apply_or_retry(rec, insp) == "starting":
                self._watch(rec, None, None)

    def detach_all(self) -> None:
        """Stop watching (daemon shutdown). The execs keep running under their monitors."""
        for exec_id in list(self._watches):
            self._unwatch(exec_id)

    # ------------------------------------------------------------------ cancel / wait
    async def cancel(self, rec: ExecRecord, sig: int, grace: float, reason: str) -> ExecRecord:
        if rec.state in EXEC_TERMINAL:
            return rec
        if rec.state == ExecState.PENDING:
            self._pending_cancel[rec.id] = (sig, grace, reason)
            return rec
        await self._send_cancel(rec, sig, grace, reason)
        return self.store.get_exec(rec.id) or rec

    async def _cancel_quietly(self, rec: ExecRecord, sig: int, grace: float,
                              reason: str) -> None:
        try:
            await self._send_cancel(rec, sig, grace, reason)
        except Exception:  # never into the daemon's TaskGroup
            log.exception("queued cancel of %s failed", rec.id)

    async def _send_cancel(self, rec: ExecRecord, sig: int, grace: float, reason: str) -> None:
        paths = self.paths(rec)
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(None, self.monitors.control, paths, {
                "op": "cancel", "signal": sig, "grace": grace, "reason": reason})
            if reply.get("ok"):
                return
            log.warning("monitor of %s refused cancel: %s", rec.id, reply)
        except OSError as e:
            log.warning("monitor of %s unreachable for cancel: %s", rec.id, e)
        self._settle(rec.id)
        # Still live with a monitor we cannot talk to: signal the verified group
        # ourselves, and SIGKILL it after the grace.
        current = self.store.get_exec(rec.id)
        handles = self._watches[rec.id].handles if rec.id in self._watches else None
        if current is not None and current.state == ExecState.RUNNING and handles:
            child = handles["child"]
            signal_verified_group(child["pid"], child["start_time"], sig)
            loop.call_later(grace, signal_verified_group, child["pid"], child["start_time"],
                            signal.SIGKILL)

    async def wait(self, rec: ExecRecord, timeout: float | None) -> ExecRecord:
        if rec.state in EXEC_TERMINAL:
            return rec
        ev = self._done.setdefault(rec.id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)
        return self.store.get_exec(rec.id) or rec

    # ------------------------------------------------------------------ logs
    async def logs(self, rec: ExecRecord, stream: str, offset: int, limit: int,
                   wait: float) -> dict[str, Any]:
        """Bytes of one log from ``offset``; ``all``: stdout and stderr interleaved in the
        order written (a terminal exec's one log), ``runs`` saying which bytes are which."""
        if stream == "all":
            if not rec.spec.tty:
                return await self._interleaved(rec, offset, limit, wait)
            stream = "pty"
            got = await self.logs(rec, stream, offset, limit, wait)
            return {**got, "runs": [["pty", len(got["data"])]] if got["data"] else []}
        path = self.paths(rec).log(stream)
        deadline = time.monotonic() + wait
        while True:
            # State first, size second: once terminal is seen, the size is final.
            rec = self.store.get_exec(rec.id) or rec
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                size = 0
            if offset < size:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read(min(limit, MAX_LOG_CHUNK))
                return {"data": data, "offset": offset + len(data), "size": size,
                        "eof": False, "state": rec.state}
            terminal = rec.state in EXEC_TERMINAL
            if terminal or time.monotonic() >= deadline:
                return {"data": b"", "offset": offset, "size": size, "eof": terminal,
                        "state": rec.state}
            await asyncio.sleep(LOG_POLL_INTERVAL)

    async def _interleaved(self, rec: ExecRecord, offset: int, limit: int, wait: float
                           ) -> dict[str, Any]:
        """``exec.logs`` of ``all``: ``offset`` counts bytes of the interleaved output
        (:func:`tether.monitor.order.runs`), so a follow resumes where it was."""
        from tether.monitor.order import STREAMS, runs

        paths = self.paths(rec)
        logs = (str(paths.stdout), str(paths.stderr))
        deadline = time.monotonic() + wait
        while True:
            rec = self.store.get_exec(rec.id) or rec  # state first: once terminal, final
            terminal = rec.state in EXEC_TERMINAL
            pieces, sizes = runs(str(paths.order), logs, terminal, offset,
                                 min(limit, MAX_LOG_CHUNK))
            data = bytearray()
            shown: list[list[Any]] = []
            for stream, start, end in pieces:
                with open(logs[stream], "rb") as f:
                    chunk = os.pread(f.fileno(), end - start, start)
                data += chunk
                if shown and shown[-1][0] == STREAMS[stream]:
                    shown[-1][1] += len(chunk)
                elif chunk:
                    shown.append([STREAMS[stream], len(chunk)])
            if data or terminal or time.monotonic() >= deadline:
                return {"data": bytes(data), "offset": offset + len(data),
                        "size": sum(sizes), "eof": terminal and not data,
                        "state": rec.state, "runs": shown}
            await asyncio.sleep(LOG_POLL_INTERVAL)
