"""The ``schedule.*`` and ``scheduler.status`` handlers, for ``daemon/api.py``'s table
(kept here so that the method table stays a table)."""

from __future__ import annotations

from typing import Any

from tether.daemon.scheduler.service import Scheduler
from tether.model.errors import RpcCode, TetherError
from tether.model.records import ExecSpec, to_builtins
from tether.model.schedule import JobSpec, JobState
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler


def schedule_handlers(sched: Scheduler) -> dict[str, Handler]:
    db = sched.db

    async def add(p: m.ScheduleAdd, c: Connection) -> Any:
        spec = JobSpec(cron=p.cron, every=p.every, tz=p.tz, sandbox=p.sandbox,
                       exec=ExecSpec(argv=p.argv, env=p.env, cwd=p.cwd, timeout=p.timeout,
                                     kill_grace=p.kill_grace),
                       overlap=p.overlap, queue=p.queue, max_concurrent=p.max_concurrent,
                       jitter=p.jitter, missed=p.missed, unconfined_ok=p.unconfined_ok)
        return sched.view(sched.add(p.name, spec))

    async def list_(p: m.ScheduleList, c: Connection) -> Any:
        return await sched.list_jobs(p.all)

    async def show(p: m.ScheduleShow, c: Connection) -> Any:
        job = sched.resolve(p.job)
        runs = db.runs(job=job.id, limit=p.limit, newest_first=True)
        return {**sched.view(job), "recent": to_builtins(runs)}

    async def pause(p: m.ScheduleRef, c: Connection) -> Any:
        return sched.view(sched.pause(sched.resolve(p.job)))

    async def resume(p: m.ScheduleRef, c: Connection) -> Any:
        return sched.view(sched.resume(sched.resolve(p.job)))

    async def run_now(p: m.ScheduleRef, c: Connection) -> Any:
        job = sched.resolve(p.job)
        if job.state != JobState.ACTIVE:
            raise TetherError(RpcCode.INVALID_STATE, "JOB_PAUSED",
                              f"job {job.name!r} is paused; resume it with `tether schedule "
                              f"resume {job.name}` first", {"job": job.id})
        return to_builtins(sched.run_now(job))

    async def remove(p: m.ScheduleRef, c: Connection) -> Any:
        return sched.view(sched.remove(sched.resolve(p.job)))

    async def status(p: m.SchedulerStatus, c: Connection) -> Any:
        return await sched.status(after=p.after, limit=p.limit)

    return {"schedule.add": add, "schedule.list": list_, "schedule.show": show,
            "schedule.pause": pause, "schedule.resume": resume, "schedule.run_now": run_now,
            "schedule.remove": remove, "scheduler.status": status}
