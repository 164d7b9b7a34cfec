"""The scheduler's tables (migration 7): jobs, and one row per fire time run.

Every write journals its event in the same transaction (``schedule.job``,
``schedule.run``), like the rest of the store. Committing a fire time inserts its
run and moves the job's next fire time in one transaction, and ``(job, fire_at)``
is unique, so a fire time can be committed once only.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from tether.model.errors import RpcCode, TetherError
from tether.model.records import Event
from tether.model.schedule import (
    RUN_TERMINAL,
    JobRecord,
    RunRecord,
    RunState,
    check_run_transition,
)

if TYPE_CHECKING:
    from tether.store.sqlite import Store

_enc = msgspec.json.Encoder()
_dec_job = msgspec.json.Decoder(JobRecord)
_dec_run = msgspec.json.Decoder(RunRecord)


@dataclass(frozen=True)
class JobsPage:
    jobs: list[JobRecord]
    live: dict[str, int]  # job id -> its runs PENDING, PAUSED or RUNNING (absent: none)
    total: int  # jobs in the listing (all pages)
    next: int | None  # the cursor of the next page, None after the last
    next_due: float | None


class ScheduleStore:
    """Jobs and runs; reached as ``Store.schedules`` (one connection, one writer)."""

    def __init__(self, store: Store) -> None:
        self._s = store

    # ------------------------------------------------------------------ jobs
    def _job_event(self, db: sqlite3.Connection, job: JobRecord, reason: str) -> Event:
        return self._s._append(db, None, "schedule.job", state=job.state, reason=reason,
                               data={"job": job.id, "name": job.name,
                                     "next_fire": job.next_fire})

    def _put_job(self, db: sqlite3.Connection, job: JobRecord) -> None:
        db.execute("UPDATE schedule_jobs SET state = ?, due_at = ?, record = ? WHERE id = ?",
                   (job.state, job.due_at, _enc.encode(job), job.id))

    def create_job(self, job: JobRecord) -> tuple[JobRecord, Event]:
        with self._s._tx() as db:
            try:
                db.execute("INSERT INTO schedule_jobs VALUES (?, ?, ?, ?, ?)",
                           (job.id, job.name, job.state, job.due_at, _enc.encode(job)))
            except sqlite3.IntegrityError:
                raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                                  f"a scheduled job named {job.name!r} already exists; pick "
                                  f"another name or remove it with `tether schedule rm "
                                  f"{job.name}`", {"name": job.name}) from None
            ev = self._job_event(db, job, job.reason or "added")
        return job, ev

    def get_job(self, ident: str) -> JobRecord | None:
        row = self._s._db.execute("SELECT record FROM schedule_jobs WHERE id = ?",
                                  (ident,)).fetchone()
        return _dec_job.decode(row[0]) if row else None

    def find_jobs(self, ref: str) -> list[JobRecord]:
        """Live jobs whose id or name is ``ref``, else whose id starts with it."""
        rows = self._s._db.execute(
            "SELECT record FROM schedule_jobs WHERE (id = ? OR name = ?) "
            "AND state != 'REMOVED'", (ref, ref)).fetchall()
        if not rows:
            rows = self._s._db.execute(
                "SELECT record FROM schedule_jobs WHERE substr(id, 1, ?) = ? "
                "AND state != 'REMOVED' LIMIT 10", (len(ref), ref)).fetchall()
        return [_dec_job.decode(r[0]) for r in rows]

    def list_jobs(self, include_removed: bool = False) -> list[JobRecord]:
        sql = "SELECT record FROM schedule_jobs"
        if not include_removed:
            sql += " WHERE state != 'REMOVED'"
        return [_dec_job.decode(r[0]) for r in self._s._db.execute(sql + " ORDER BY rowid")]

    def jobs_page(self, db: sqlite3.Connection, *, after: int, limit: int,
                  include_removed: bool = False) -> JobsPage:
        """Up to ``limit`` jobs after cursor ``after`` (a row id; 0: from the first), in
        the order of :meth:`list_jobs`, with their live runs counted in one query: what
        ``scheduler.status`` serves a page of. ``db``: a read connection
        (``Store.reads``), for the scan of a large table runs off the loop."""
        where = "" if include_removed else " AND state != 'REMOVED'"
        rows = db.execute(f"SELECT rowid, record FROM schedule_jobs WHERE rowid > ?{where} "
                          "ORDER BY rowid LIMIT ?", (after, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        jobs = [_dec_job.decode(r[1]) for r in rows]
        live: dict[str, int] = {}
        if jobs:
            marks = ",".join("?" * len(jobs))
            live = dict(db.execute(
                "SELECT job_id, COUNT(*) FROM schedule_runs WHERE state IN "
                f"('PENDING', 'PAUSED', 'RUNNING') AND job_id IN ({marks}) GROUP BY job_id",
                [j.id for j in jobs]).fetchall())
        total = int(db.execute(f"SELECT COUNT(*) FROM schedule_jobs WHERE 1{where}"
                               ).fetchone()[0])
        due = db.execute("SELECT MIN(due_at) FROM schedule_jobs WHERE state = 'ACTIVE'"
                         ).fetchone()[0]
        return JobsPage(jobs=jobs, live=live, total=total,
                        next=int(rows[-1][0]) if more else None,
                        next_due=None if due is None else float(due))

    def update_job(self, ident: str, reason: str, **fields: Any) -> tuple[JobRecord, Event]:
        """Change a job (pause, resume, remove, a new next fire) and journal it."""
        with self._s._tx() as db:
            row = db.execute("SELECT record FROM schedule_jobs WHERE id = ?",
                             (ident,)).fetchone()
            if row is None:
                raise KeyError(ident)
            job = msgspec.structs.replace(_dec_job.decode(row[0]), updated_at=time.time(),
                                          reason=reason, **fields)
            self._put_job(db, job)
            if fields.get("state") in ("PAUSED", "REMOVED"):  # queued runs wait or go
                to = RunState.PAUSED if fields["state"] == "PAUSED" else RunState.SKIPPED
                for r in db.execute("SELECT record FROM schedule_runs WHERE job_id = ? AND "
                                    "state IN ('PENDING', 'PAUSED') AND exec_id IS NULL",
                                    (ident,)).fetchall():
                    run = _dec_run.decode(r[0])
                    if run.state != to and run.queued:  # not one being started now
                        self._set_run(db, run, to, f"job {fields['state'].lower()}")
            elif fields.get("state") == "ACTIVE":
                for r in db.execute("SELECT record FROM schedule_runs WHERE job_id = ? AND "
                                    "state = 'PAUSED'", (ident,)).fetchall():
                    self._set_run(db, _dec_run.decode(r[0]), RunState.PENDING, "job resumed")
            ev = self._job_event(db, job, reason)
        return job, ev

    def next_due(self) -> float | None:
        row = self._s._db.execute(
            "SELECT MIN(due_at) FROM schedule_jobs WHERE state = 'ACTIVE'").fetchone()
        return None if row[0] is None else float(row[0])

    def due_jobs(self, now: float, limit: int = 500) -> list[JobRecord]:
        rows = self._s._db.execute(
            "SELECT record FROM schedule_jobs WHERE state = 'ACTIVE' AND due_at <= ? "
            "ORDER BY due_at LIMIT ?", (now, limit)).fetchall()
        return [_dec_job.decode(r[0]) for r in rows]

    # ------------------------------------------------------------------ runs
    def _run_event(self, db: sqlite3.Connection, run: RunRecord, job: JobRecord) -> Event:
        return self._s._append(db, None, "schedule.run", exec_id=run.exec_id,
                               state=run.state, reason=run.reason,
                               data={"job": job.id, "name": job.name, "run": run.id,
                                     "fire_at": run.fire_at, "manual": run.manual,
                                     "attempt": run.attempt, "exit_code": run.exit_code,
                                     "missed": run.missed})

    def _set_run(self, db: sqlite3.Connection, run: RunRecord, to: RunState, reason: str,
                 **fields: Any) -> tuple[RunRecord, JobRecord, Event]:
        check_run_transition(str(run.id), run.state, to)
        run = msgspec.structs.replace(run, state=str(to), reason=reason, **fields)
        db.execute("UPDATE schedule_runs SET state = ?, exec_id = ?, record = ? WHERE id = ?",
                   (run.state, run.exec_id, _enc.encode(run), run.id))
        row = db.execute("SELECT record FROM schedule_jobs WHERE id = ?",
                         (run.job,)).fetchone()
        job = _dec_job.decode(row[0])
        counts: dict[str, Any] = {}
        if to == RunState.RUNNING:
            counts = {"runs": job.runs + 1, "last_run_at": run.started_at or time.time()}
        elif to == RunState.FAILED:
            counts = {"errors": job.errors + 1}
        elif to == RunState.SKIPPED:
            counts = {"skipped": job.skipped + 1}
        if to in RUN_TERMINAL or to == RunState.RUNNING:
            counts["last_state"] = str(to)
        if counts:
            job = msgspec.structs.replace(job, **counts)
            self._put_job(db, job)
        return run, job, self._run_event(db, run, job)

    def fire(self, job: JobRecord, fire_at: float, *, state: RunState, reason: str,
             next_fire: float, due_at: float, manual: bool = False, missed: int = 0,
             queued: bool = False) -> tuple[RunRecord | None, list[Event]]:
        """Commit a fire time: its run (PENDING, or SKIPPED with the reason) and the job's
        next fire time, in one transaction. None when this fire time already has a run
        (a second commit of the same (job, fire_at) is refused by the unique key)."""
        now = time.time()
        with self._s._tx() as db:
            row = db.execute("SELECT record FROM schedule_jobs WHERE id = ?",
                             (job.id,)).fetchone()
            current = _dec_job.decode(row[0])
            try:
                cur = db.execute("INSERT INTO schedule_runs (job_id, fire_at, state, record) "
                                 "VALUES (?, ?, ?, '{}')", (job.id, fire_at, "PENDING"))
            except sqlite3.IntegrityError:
                return None, []
            # A job from before run numbers counts on from the runs it has.
            number = 1 + (current.fired or db.execute(
                "SELECT count(*) - 1 FROM schedule_runs WHERE job_id = ?",
                (job.id,)).fetchone()[0])
            changes: dict[str, Any] = {"fired": number}
            if not manual:
                changes.update(next_fire=next_fire, due_at=due_at, updated_at=now)
            current = msgspec.structs.replace(current, **changes)
            self._put_job(db, current)
            run = RunRecord(id=int(cur.lastrowid or 0), job=job.id, fire_at=fire_at,
                            state=RunState.PENDING, manual=manual, created_at=now,
                            reason=reason if state == RunState.PENDING else "fire time",
                            missed=missed, queued=queued, number=number)
            db.execute("UPDATE schedule_runs SET record = ? WHERE id = ?",
                       (_enc.encode(run), run.id))
            events = [self._run_event(db, run, current)]
            if state != RunState.PENDING:
                run, _, ev = self._set_run(db, run, state, reason)
                events.append(ev)
        return run, events

    def transition_run(self, run_id: int, to: RunState, reason: str, **fields: Any,
                       ) -> tuple[RunRecord, Event]:
        with self._s._tx() as db:
            run = self._get_run(db, run_id)
            run, _, ev = self._set_run(db, run, to, reason, **fields)
        return run, ev

    def update_run(self, run_id: int, **fields: Any) -> RunRecord:
        """Change a run's fields without a state change (its exec, its attempt)."""
        with self._s._tx() as db:
            run = msgspec.structs.replace(self._get_run(db, run_id), **fields)
            db.execute("UPDATE schedule_runs SET exec_id = ?, record = ? WHERE id = ?",
                       (run.exec_id, _enc.encode(run), run.id))
        return run

    def _get_run(self, db: sqlite3.Connection, run_id: int) -> RunRecord:
        row = db.execute("SELECT record FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(run_id)
        return _dec_run.decode(row[0])

    def get_run(self, run_id: int) -> RunRecord | None:
        try:
            return self._get_run(self._s._db, run_id)
        except KeyError:
            return None

    def run_of_exec(self, exec_id: str) -> RunRecord | None:
        row = self._s._db.execute("SELECT record FROM schedule_runs WHERE exec_id = ?",
                                  (exec_id,)).fetchone()
        return _dec_run.decode(row[0]) if row else None

    def runs(self, *, job: str | None = None, states: tuple[str, ...] | None = None,
             limit: int = 1_000_000, newest_first: bool = False) -> list[RunRecord]:
        sql = "SELECT record FROM schedule_runs WHERE 1=1"
        args: list[Any] = []
        if job is not None:
            sql += " AND job_id = ?"
            args.append(job)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        rows = self._s._db.execute(sql, (*args, limit)).fetchall()
        return [_dec_run.decode(r[0]) for r in rows]

    def count_runs(self, job: str, states: tuple[str, ...]) -> int:
        row = self._s._db.execute(
            f"SELECT COUNT(*) FROM schedule_runs WHERE job_id = ? AND state IN "
            f"({','.join('?' * len(states))})", (job, *states)).fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ retention
    #: Settled runs that ended before a cutoff, each job's newest run excepted (so `schedule
    #: show` keeps its last result); a run's end is in its record, its fire time a bound.
    _OLD = (f"state IN ({','.join(repr(str(s)) for s in sorted(RUN_TERMINAL))}) "
            "AND COALESCE(json_extract(record, '$.ended_at'), fire_at) < ? "
            "AND id NOT IN (SELECT MAX(id) FROM schedule_runs GROUP BY job_id)")

    def count_runs_before(self, cutoff: float, db: sqlite3.Connection | None = None) -> int:
        """How many runs :meth:`runs_before` lists (``retention.prune --dry-run``)."""
        row = (db or self._s._db).execute(
            f"SELECT COUNT(*) FROM schedule_runs WHERE {self._OLD}", (cutoff,)).fetchone()
        return int(row[0])

    def runs_before(self, cutoff: float, db: sqlite3.Connection | None = None) -> list[int]:
        """Settled runs that ended before ``cutoff`` (the journal's retention age), each
        job's newest excepted, for :meth:`delete_runs` in batches (a run that is settled
        and not its job's newest stays so: the list stays true). A job's next fire time is
        in its own record, so no deleted run's fire time is ever committed again."""
        return [int(r[0]) for r in (db or self._s._db).execute(
            f"SELECT id FROM schedule_runs WHERE {self._OLD} ORDER BY id", (cutoff,))]

    def delete_runs(self, ids: list[int], cutoff: float) -> tuple[int, Event | None]:
        """Delete these runs (from :meth:`runs_before`), journaling ``schedule.pruned``
        (how many) in the same transaction."""
        with self._s._tx() as db:
            n = int(db.execute(f"DELETE FROM schedule_runs WHERE id IN "
                               f"({','.join('?' * len(ids))})", ids).rowcount)
            if not n:
                return 0, None
            ev = self._s._append(db, None, "schedule.pruned", reason=(
                f"{n} scheduled runs that ended before {cutoff:.0f} removed"),
                data={"runs": n, "before": cutoff})
        return n, ev

    def count_all_runs(self, db: sqlite3.Connection | None = None) -> int:
        return int((db or self._s._db).execute("SELECT COUNT(*) FROM schedule_runs"
                                               ).fetchone()[0])
