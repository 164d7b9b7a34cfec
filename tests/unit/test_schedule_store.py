"""The scheduler's tables on their own (store/schedules.py): a fire time is committed
once, a job's next fire time moves with it, run transitions are guarded, pause and remove
reach the queued runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.model.errors import TetherError
from tether.model.records import ExecSpec
from tether.model.schedule import IllegalRunTransition, JobRecord, JobSpec, RunState
from tether.store import Store
from tether.store.schedules import ScheduleStore


def _job(s: Store, name: str = "j") -> JobRecord:
    job = JobRecord(id=s.reserve_id("job"), name=name, state="ACTIVE",
                    spec=JobSpec(every=60.0, exec=ExecSpec(argv=["true"])),
                    next_fire=60.0, due_at=60.0)
    return ScheduleStore(s).create_job(job)[0]


def test_a_fire_time_is_committed_once_with_the_next_one(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    job = _job(s)
    run, events = ScheduleStore(s).fire(job, 60.0, state=RunState.PENDING, reason="fire time",
                                   next_fire=120.0, due_at=121.0)
    assert run is not None and run.state == "PENDING" and [e.type for e in events] == [
        "schedule.run"]
    again, none = ScheduleStore(s).fire(job, 60.0, state=RunState.PENDING, reason="fire time",
                                   next_fire=120.0, due_at=121.0)
    assert again is None and none == []
    assert [r.fire_at for r in ScheduleStore(s).runs(job=job.id)] == [60.0]
    stored = ScheduleStore(s).get_job(job.id)
    assert stored is not None and (stored.next_fire, stored.due_at) == (120.0, 121.0)
    assert ScheduleStore(s).due_jobs(120.5) == [] and ScheduleStore(s).next_due() == 121.0
    s.close()
    # Across a reopen (a restart): the same fire time still cannot be committed twice.
    s = Store(tmp_path / "t.db")
    assert ScheduleStore(s).fire(job, 60.0, state=RunState.PENDING, reason="x", next_fire=120.0,
                            due_at=121.0)[0] is None


def test_run_transitions_are_guarded_and_counted(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    job = _job(s)
    run, _ = ScheduleStore(s).fire(job, 60.0, state=RunState.PENDING, reason="f", next_fire=120.0,
                              due_at=120.0)
    assert run is not None
    ScheduleStore(s).transition_run(run.id, RunState.RUNNING, "started", exec_id="e1")
    with pytest.raises(IllegalRunTransition):
        ScheduleStore(s).transition_run(run.id, RunState.SKIPPED, "no")
    ScheduleStore(s).transition_run(run.id, RunState.FAILED, "exit 3", exit_code=3)
    skipped, events = ScheduleStore(s).fire(job, 120.0, state=RunState.SKIPPED, reason="overlap",
                                       next_fire=180.0, due_at=180.0)
    assert skipped is not None and skipped.state == "SKIPPED"
    assert [e.state for e in events] == ["PENDING", "SKIPPED"]
    counted = ScheduleStore(s).get_job(job.id)
    assert counted is not None
    assert (counted.runs, counted.errors, counted.skipped) == (1, 1, 1)
    assert ScheduleStore(s).run_of_exec("e1") is not None


def test_pause_and_remove_reach_queued_runs_only(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    job = _job(s)
    starting, _ = ScheduleStore(s).fire(job, 60.0, state=RunState.PENDING, reason="f",
                                   next_fire=120.0, due_at=120.0)
    queued, _ = ScheduleStore(s).fire(job, 120.0, state=RunState.PENDING, reason="q",
                                 next_fire=180.0, due_at=180.0, queued=True)
    assert starting is not None and queued is not None
    ScheduleStore(s).update_job(job.id, "paused", state="PAUSED")
    assert ScheduleStore(s).get_run(queued.id).state == "PAUSED"  # type: ignore[union-attr]
    assert ScheduleStore(s).get_run(starting.id).state == "PENDING"  # type: ignore[union-attr]
    ScheduleStore(s).update_job(job.id, "resumed", state="ACTIVE")
    assert ScheduleStore(s).get_run(queued.id).state == "PENDING"  # type: ignore[union-attr]
    ScheduleStore(s).update_job(job.id, "removed", state="REMOVED")
    assert ScheduleStore(s).get_run(queued.id).state == "SKIPPED"  # type: ignore[union-attr]
    assert ScheduleStore(s).find_jobs("j") == []
    _job(s, "j")  # the name is free again
    with pytest.raises(TetherError) as e:
        _job(s, "j")
    assert e.value.code == "NAME_IN_USE"
