"""The scheduler: commit each fire time, then start its exec; settle runs as execs end.

Exactly once per fire time: the loop commits a run for (job, fire time) together with
the job's next fire time (one transaction, a unique key), and only then starts the
exec, with a request key derived from the run. A daemon killed after the commit
finds the run PENDING on start and starts it again with the same key, so the exec is
created once (``exec.start`` is idempotent by key); one killed before the commit
finds the fire time still due. An exec that was committed but never started (the
daemon died first; recovery failed it) is started again under the next attempt.

A commit can fail while the daemon runs (a full disk). Nothing it leaves behind waits for
a restart: a fire time that could not be committed stays due and is tried again after a
backoff (not at once: that spun and filled the log), and a run left PENDING with no start
under way, RUNNING past its exec's end, or queued behind a freed slot is re-driven from
the store (:meth:`Scheduler.redrive`, what :meth:`Scheduler.recover` does at start),
with the same backoff, until a pass finds nothing left.

In memory: the wake-up event, the runs being started now and the backoff (category C).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from typing import Any

import msgspec

from tether.daemon.clock import TEST_POLL, Clock
from tether.daemon.execs.service import ExecService
from tether.daemon.faults import Faults
from tether.daemon.journal import Journal
from tether.daemon.sandboxes.service import SandboxService
from tether.daemon.scheduler import timing
from tether.daemon.tasks import Tasks
from tether.model.errors import RpcCode, TetherError, ambiguous, invalid_params
from tether.model.records import ExecRecord, to_builtins
from tether.model.schedule import JobRecord, JobSpec, JobState, RunRecord, RunState
from tether.model.states import EXEC_TERMINAL, ExecState
from tether.store import Store
from tether.store.schedules import ScheduleStore

log = logging.getLogger("tether.scheduler")

#: Runs whose exec is being started at one time; the others wait their turn, in fire-time
#: order, PENDING in the store. Many due at once then ask for monitors (and the CPU) a
#: bounded number at a time, and the earlier fire times start first.
STARTS_AT_ONCE = 64

#: A fire time seen this late (past its jitter) is *missed*: the job's missed-run
#: policy decides, not the overlap policy (a daemon that was down, a machine asleep).
MISSED_GRACE = 60.0
MAX_ATTEMPTS = 3  # starts of one fire time whose exec never started (daemon deaths)
IDLE_WAKE = 60.0  # the loop re-reads the store at least this often
RETRY_FIRST, RETRY_MAX = 1.0, 30.0  # backoff after a failed commit, doubling


class Scheduler:
    def __init__(self, store: Store, journal: Journal, execs: ExecService,
                 sandboxes: SandboxService, tasks: Tasks, clock: Clock,
                 faults: Faults) -> None:
        self.store = store
        self.db = ScheduleStore(store)
        self.journal = journal
        self.execs = execs
        self.sandboxes = sandboxes
        self.tasks = tasks
        self.clock = clock
        self.faults = faults
        self._slots = asyncio.Semaphore(STARTS_AT_ONCE)
        self._wake = asyncio.Event()
        self._starting: set[int] = set()
        #: after a failed commit: when to fire and re-drive again (monotonic; None while
        #: nothing waits for it), the next backoff, and when the last one failed
        self._retry_at: float | None = None
        self._backoff = RETRY_FIRST
        self._last_failure = -RETRY_MAX * 10
        execs.on_terminal.append(self._on_exec_end)

    # ------------------------------------------------------------------ jobs
    def resolve(self, ref: str) -> JobRecord:
        found = self.db.find_jobs(ref)
        if not found:
            raise TetherError(RpcCode.NOT_FOUND, "JOB_NOT_FOUND",
                              f"no scheduled job matches {ref!r}; list them with "
                              "`tether schedule ls`", {"ref": ref})
        if len(found) > 1:
            raise ambiguous("jobs", ref, [j.id for j in found])
        return found[0]

    def add(self, name: str, spec: JobSpec) -> JobRecord:
        timing.check(spec)
        self.sandboxes.resolve(spec.sandbox)  # a clear error now rather than at 02:00
        cwd = spec.exec.cwd
        if cwd is not None and not (os.path.isabs(cwd) and os.path.isdir(cwd)):
            raise invalid_params(f"cwd {cwd!r} is not an absolute path to an existing "
                                 "directory", cwd=cwd)
        now = self.clock.now()
        ident = self.store.reserve_id("job")
        nf = timing.next_fire(spec, now, now)
        job = JobRecord(id=ident, name=name, state=JobState.ACTIVE, spec=spec, next_fire=nf,
                        due_at=nf + timing.jitter(ident, nf, spec.jitter), created_at=now,
                        updated_at=now, reason="added")
        job = self.journal.commit(self.db.create_job(job))
        self._wake.set()
        return job

    def pause(self, job: JobRecord) -> JobRecord:
        if job.state == JobState.PAUSED:
            return job
        return self.journal.commit(self.db.update_job(job.id, "paused", state=JobState.PAUSED))

    def resume(self, job: JobRecord) -> JobRecord:
        """Fire times that passed while paused are not run; the next one after now is."""
        if job.state == JobState.ACTIVE:
            return job
        nf = timing.next_fire(job.spec, self.clock.now(), job.created_at)
        job = self.journal.commit(self.db.update_job(
            job.id, "resumed", state=JobState.ACTIVE, next_fire=nf,
            due_at=nf + timing.jitter(job.id, nf, job.spec.jitter)))
        self._wake.set()
        try:
            self._start_queued(job.id)
        except Exception as e:  # resumed; its queued runs are re-driven
            self._failed(f"starting the queued runs of job {job.id}", e)
        return job

    def remove(self, job: JobRecord) -> JobRecord:
        """No more fire times; queued runs are skipped; running ones run to their end."""
        return self.journal.commit(self.db.update_job(job.id, "removed",
                                                      state=JobState.REMOVED))

    def run_now(self, job: JobRecord) -> RunRecord | None:
        """One run outside the schedule, under the job's overlap policy."""
        return self._admit(job, self.clock.now(), manual=True)

    def view(self, job: JobRecord) -> dict[str, Any]:
        """A job as shown: its env's names only (the values are kept to run it)."""
        return _view(job, self.db.count_runs(job.id, ("PENDING", "PAUSED", "RUNNING")))

    async def status(self, *, after: str | None, limit: int) -> msgspec.Raw:
        """``scheduler.status``: one page of jobs, read, shaped and encoded in a worker
        thread with its own read connection (``Store.reads``): with 100,000 jobs the
        whole table is tens of MB, and the dashboard asks on every refresh."""
        cursor = _cursor(after)

        def page(db: Any) -> msgspec.Raw:
            p = self.db.jobs_page(db, after=cursor, limit=limit)
            return msgspec.Raw(msgspec.json.encode({
                "jobs": [_view(j, p.live.get(j.id, 0)) for j in p.jobs],
                "next_due": p.next_due, "total": p.total,
                "next": None if p.next is None else str(p.next)}))
        return await self.store.reads(page)

    async def list_jobs(self, include_removed: bool) -> msgspec.Raw:
        """``schedule.list``: every job, read, shaped and encoded in a worker thread."""
        def everything(db: Any) -> msgspec.Raw:
            p = self.db.jobs_page(db, after=0, limit=1 << 62, include_removed=include_removed)
            return msgspec.Raw(msgspec.json.encode(
                {"jobs": [_view(j, p.live.get(j.id, 0)) for j in p.jobs]}))
        return await self.store.reads(everything)

    # ------------------------------------------------------------------ firing
    def _admit(self, job: JobRecord, fire_at: float, *, manual: bool = False,
               missed: int = 0, next_fire: float = 0.0, reason: str | None = None,
               ) -> RunRecord | None:
        """Commit one fire time as a run: to start now, queued, or skipped (why)."""
        spec = job.spec
        active = [r for r in self.db.runs(job=job.id, states=("PENDING", "RUNNING"))
                  if not r.queued]
        state, queued = RunState.PENDING, False
        why = reason or ("run now" if manual else "fire time")
        if len(active) >= spec.limit():
            if spec.overlap == "queue":
                waiting = self.db.count_runs(job.id, ("PENDING", "PAUSED")) - sum(
                    1 for r in active if r.state == RunState.PENDING)
                if waiting < spec.queue:
                    queued, why = True, f"queued: {len(active)} run(s) still running"
                else:
                    state, why = RunState.SKIPPED, (f"queue full ({spec.queue} waiting, "
                                                    "overlap=queue)")
            else:
                state, why = RunState.SKIPPED, (f"overlap: {len(active)} run(s) still "
                                                f"running (overlap={spec.overlap})")
        due = next_fire + timing.jitter(job.id, next_fire, spec.jitter)
        run, events = self.db.fire(job, fire_at, state=state, reason=why, manual=manual,
                                   next_fire=next_fire, due_at=due, missed=missed,
                                   queued=queued)
        self.journal.commit_all(events)
        self.faults.hit("schedule.after_fire_commit")
        if run is not None and run.state == RunState.PENDING and not queued:
            self._spawn_start(run)
        return run

    def _fire_due(self, job: JobRecord, now: float) -> None:
        spec = job.spec
        n, last = timing.passed(spec, job.next_fire, now, job.created_at)
        last_on_time = now - last <= MISSED_GRACE + spec.jitter
        missed = n - 1 if last_on_time else n
        if missed == 0:
            self._admit(job, job.next_fire,
                        next_fire=timing.next_fire(spec, job.next_fire, job.created_at))
            return
        # Fire times passed unseen: one run stands for them all, keyed by the first.
        nxt = last if last_on_time else timing.next_fire(spec, last, job.created_at)
        what = f"missed {missed}{'+' if missed >= timing.MAX_COUNT else ''} fire time(s)"
        if spec.missed == "run-once":
            self._admit(job, job.next_fire, missed=missed, next_fire=nxt,
                        reason=f"{what}: run once (missed=run-once)")
            return
        _, events = self.db.fire(job, job.next_fire, state=RunState.SKIPPED,
                                 reason=f"{what} (missed=skip)", next_fire=nxt,
                                 due_at=nxt + timing.jitter(job.id, nxt, spec.jitter),
                                 missed=missed)
        self.journal.commit_all(events)

    async def loop(self) -> None:
        """Fire what is due, re-drive what a failed commit left, then sleep until the
        next due time (or a wake-up; after a failure, not before its backoff)."""
        while True:
            self._wake.clear()
            failed = self._retry_at is not None and time.monotonic() < self._retry_at
            if not failed:
                failed = not self._pass()
            left = (self._retry_at or 0.0) - time.monotonic()
            if failed:
                wait = max(0.0, left)  # not before the backoff: the store refuses
            else:
                nxt = self.db.next_due()
                wait = IDLE_WAKE if nxt is None else min(max(0.0, nxt - self.clock.now()),
                                                         IDLE_WAKE)
                if self._retry_at is not None:
                    wait = min(wait, max(0.0, left))
            if self.clock.is_test:
                wait = min(wait, TEST_POLL)  # a moved clock is seen promptly
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def _pass(self) -> bool:
        """Fire every due job, then, if a commit failed earlier, re-drive what it left.
        False if a commit failed in this pass (it is tried again after the backoff)."""
        try:
            if self._retry_at is not None:
                self._retry_at = None
                self.redrive()
            now = self.clock.now()
            seen: set[str] = set()
            while due := [j for j in self.db.due_jobs(now) if j.id not in seen]:
                for job in due:
                    seen.add(job.id)
                    self._fire_due(job, now)
        except Exception as e:
            self._failed("firing scheduled jobs", e)
            return False
        return True

    def _failed(self, what: str, e: Exception) -> None:
        """A commit failed: back off, then fire and re-drive again. Logged once per
        spell of failures (a full disk fails every try; its log must not fill it); a
        spell ends after twice the longest backoff without a failure."""
        now = time.monotonic()
        if now - self._last_failure > 2 * RETRY_MAX:
            self._backoff = RETRY_FIRST
            log.warning("scheduler: %s failed (%s); trying again in %.0f s, then backing "
                        "off up to %.0f s, until it succeeds", what, e, self._backoff,
                        RETRY_MAX,
                        exc_info=not isinstance(e, (TetherError, OSError, sqlite3.Error)))
        else:
            log.debug("scheduler: %s failed again: %r", what, e)
        self._last_failure = now
        if self._retry_at is None or self._retry_at <= now:
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, RETRY_MAX)
        self._wake.set()  # let the loop take the new retry time into account

    # ------------------------------------------------------------------ runs
    def _spawn_start(self, run: RunRecord) -> None:
        if run.id in self._starting:
            return
        self._starting.add(run.id)
        self.tasks.spawn(self._start(run.id), name=f"schedule-run-{run.id}")

    async def _start(self, run_id: int) -> None:
        try:
            await self._start_run(run_id)
        except Exception as e:
            try:  # FAILED, as a refused start is; if the store refuses that too (a full
                # disk), the run stays PENDING and is re-driven (its request key finds
                # its exec if one was made)
                self.journal.commit(self.db.transition_run(
                    run_id, RunState.FAILED, f"could not start: {e}",
                    ended_at=self.clock.now()))
                log.warning("scheduled run %s could not start: %s", run_id, e,
                            exc_info=not isinstance(e, (TetherError, OSError, sqlite3.Error)))
            except Exception as again:
                self._failed(f"starting scheduled run {run_id}", again)
        finally:
            self._starting.discard(run_id)

    async def _start_run(self, run_id: int) -> None:
        run = self.db.get_run(run_id)
        job = self.db.get_job(run.job) if run is not None else None
        if run is None or job is None or run.state != RunState.PENDING:
            return
        try:
            sandbox = self.sandboxes.resolve(job.spec.sandbox)
            spec = job.spec.exec
            if spec.name is None and run.number:  # `tether logs nightly#3`
                spec = msgspec.structs.replace(spec, name=f"{job.name}#{run.number}")
            while True:
                async with self._slots:
                    rec = await self.execs.start(sandbox, spec, run.request_key(),
                                                 unconfined_ok=job.spec.unconfined_ok)
                if not (rec.state == ExecState.FAILED and rec.never_started):
                    break
                if run.attempt + 1 >= MAX_ATTEMPTS:
                    raise TetherError(RpcCode.START_FAILED, "START_FAILED",
                                      f"its exec never started in {MAX_ATTEMPTS} attempts: "
                                      f"{rec.reason}")
                run = self.db.update_run(run.id, attempt=run.attempt + 1)
        except TetherError as e:
            self.journal.commit(self.db.transition_run(
                run.id, RunState.FAILED, f"could not start: {e.message}",
                ended_at=self.clock.now()))
            self._start_queued(job.id)
            return
        run = self.journal.commit(self.db.transition_run(
            run.id, RunState.RUNNING, f"exec {rec.id} started", exec_id=rec.id,
            started_at=rec.started_at or rec.created_at))
        rec = self.store.get_exec(rec.id) or rec
        if rec.state in EXEC_TERMINAL:  # ended before the run knew its exec
            self._settle(run, rec)

    def _on_exec_end(self, rec: ExecRecord) -> None:
        if not (rec.request_key or "").startswith("schedule:"):
            return
        try:
            run = self.db.run_of_exec(rec.id)
            if run is not None and run.state == RunState.RUNNING:
                self._settle(run, rec)
        except Exception as e:  # the run stays RUNNING past its exec's end: re-driven
            self._failed(f"settling the run of exec {rec.id}", e)

    def _settle(self, run: RunRecord, rec: ExecRecord) -> None:
        ok = rec.state == ExecState.FINISHED and rec.exit_code == 0
        self.journal.commit(self.db.transition_run(
            run.id, RunState.SUCCESS if ok else RunState.FAILED,
            f"exec {rec.id}: {rec.reason or rec.state}", exit_code=rec.exit_code,
            ended_at=rec.ended_at or rec.started_at))
        self._start_queued(run.job)

    def _start_queued(self, job_id: str) -> None:
        """A slot opened: start the oldest queued run of the job, if it is active."""
        job = self.db.get_job(job_id)
        if job is None or job.state != JobState.ACTIVE or not self.tasks.open:
            return
        live = self.db.runs(job=job_id, states=("PENDING", "RUNNING"))
        active = sum(1 for r in live if not r.queued)
        for r in live:
            if active >= job.spec.limit():
                break
            if r.queued and r.state == RunState.PENDING:
                self._spawn_start(self.db.update_run(r.id, queued=False))
                active += 1

    async def recover(self) -> dict[str, int]:
        """Start the committed fire times no exec runs for yet; settle runs whose exec
        ended while the daemon was down; fill the slots queued runs wait for."""
        return self.redrive(every_job=True)

    def redrive(self, every_job: bool = False) -> dict[str, int]:
        """Bring the live runs in line with the store: start each PENDING one no task is
        starting, settle each RUNNING one whose exec has ended, fill the slots of the
        jobs with queued runs (``every_job``: of every job). At start, and after a failed
        commit left any of these behind."""
        summary = {"restarted": 0, "settled": 0}
        queued: set[str] = set()
        for run in self.db.runs(states=("PENDING", "RUNNING")):
            if run.state == RunState.PENDING and run.queued:
                queued.add(run.job)
            elif run.state == RunState.PENDING and run.id not in self._starting:
                self._spawn_start(run)
                summary["restarted"] += 1
            elif run.state == RunState.RUNNING and run.exec_id is not None:
                rec = self.store.get_exec(run.exec_id)
                if rec is not None and rec.state in EXEC_TERMINAL:
                    self._settle(run, rec)
                    summary["settled"] += 1
        for job_id in ([j.id for j in self.db.list_jobs()] if every_job else sorted(queued)):
            self._start_queued(job_id)
        return summary


def _view(job: JobRecord, live: int) -> dict[str, Any]:
    """A job as shown: its env's names only (the values are kept to run it), and how many
    of its runs are live."""
    spec = msgspec.structs.replace(job.spec, exec=job.spec.exec.without_env_values())
    out: dict[str, Any] = to_builtins(msgspec.structs.replace(job, spec=spec))
    out["live"] = live
    return out


def _cursor(after: str | None) -> int:
    """A ``scheduler.status`` page cursor (the ``next`` of the page before)."""
    if after is None:
        return 0
    if not after.isdigit() or len(after) > 18:
        raise invalid_params(f"after {after!r} is not a cursor: pass the 'next' of the "
                             "previous page, or leave it out for the first page", after=after)
    return int(after)
