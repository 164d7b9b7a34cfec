"""Scheduled jobs with the real daemon: a moved wall clock (TETHER_TEST_CLOCK), real
execs, real SIGKILLs (issue 12, Scheduler)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tests.rawrpc import RawConn, RpcFailed, raw_call
from tether.daemon.scheduler.service import STARTS_AT_ONCE

HOUR = 3600.0


class Sched:
    """A home, its daemon, and the test clock they share."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.clock = home / "test-clock"
        self.clock.write_text("0")
        self.d = DaemonProc(home, env={"TETHER_TEST_CLOCK": str(self.clock)})

    def now(self) -> float:
        return time.time() + float(self.clock.read_text())

    def set_now(self, when: float) -> None:
        """Move the daemon's wall clock to ``when`` (while it runs, or not)."""
        tmp = self.clock.with_suffix(".tmp")
        tmp.write_text(repr(when - time.time()))
        tmp.replace(self.clock)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with RawConn(self.d.socket, 10.0) as c:
            return c.result(method, params)

    def add(self, name: str, argv: list[str], **kw: Any) -> dict[str, Any]:
        job: dict[str, Any] = self.call("schedule.add", {"name": name, "argv": argv, **kw})
        return job

    def show(self, name: str) -> dict[str, Any]:
        job: dict[str, Any] = self.call("schedule.show", {"job": name, "limit": 100})
        return job

    def runs(self, name: str, state: str | None = None) -> list[dict[str, Any]]:
        rs = list(reversed(self.show(name)["recent"]))
        return [r for r in rs if state is None or r["state"] == state]

    def wait_runs(self, name: str, state: str, n: int = 1,
                  timeout: float = 20.0) -> list[dict[str, Any]]:
        return wait_for(lambda: (lambda rs: rs if len(rs) >= n else None)(
            self.runs(name, state)), timeout, what=f"{n} {state} run(s) of {name}")


@pytest.fixture
def s() -> Iterator[Sched]:
    h = new_home()
    sch = Sched(h)
    yield sch
    sch.d.cleanup()
    remove_home(h)


def appender(path: Path, extra: str = "") -> list[str]:
    """A command that appends a line to ``path`` (so runs are counted by what ran)."""
    return ["sh", "-c", f"{extra}echo ran >> {path}"]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_every_fires_once_per_period_when_the_clock_moves(s: Sched) -> None:
    s.d.start()
    out = s.home / "out"
    job = s.add("tick", appender(out), every=HOUR)
    assert job["state"] == "ACTIVE" and job["next_fire"] > s.now() + HOUR - 60
    time.sleep(0.5)
    assert s.runs("tick") == []  # nothing before its time
    s.set_now(job["next_fire"] + 1)
    [run] = s.wait_runs("tick", "SUCCESS")
    assert run["exit_code"] == 0 and run["fire_at"] == job["next_fire"] and run["exec_id"]
    assert lines(out) == 1
    again = s.show("tick")
    assert again["next_fire"] == job["next_fire"] + HOUR and again["runs"] == 1
    s.set_now(again["next_fire"] + 1)
    s.wait_runs("tick", "SUCCESS", 2)
    assert lines(out) == 2
    types = {(e["type"], e["state"]) for e in s.call("events.list", {"limit": 10000})["events"]}
    assert {("schedule.job", "ACTIVE"), ("schedule.run", "PENDING"),
            ("schedule.run", "RUNNING"), ("schedule.run", "SUCCESS")} <= types


def test_cron_in_a_zone_fires_at_its_wall_time(s: Sched) -> None:
    s.d.start()
    out = s.home / "out"
    job = s.add("nightly", appender(out), cron="0 2 * * *", tz="Europe/Paris")
    from datetime import datetime
    from zoneinfo import ZoneInfo

    at = datetime.fromtimestamp(job["next_fire"], ZoneInfo("Europe/Paris"))
    assert (at.hour, at.minute) == (2, 0)
    s.set_now(job["next_fire"] + 1)
    s.wait_runs("nightly", "SUCCESS")
    assert lines(out) == 1


def test_invalid_cron_and_zone_are_named_and_the_daemon_keeps_serving(s: Sched) -> None:
    s.d.start()
    for params, code, word in (({"cron": "61 * * * *"}, "INVALID_CRON", "61 * * * *"),
                               ({"cron": "0 2 * *"}, "INVALID_CRON", "0 2 * *"),
                               ({"cron": "0 2 * * *", "tz": "Mars/Olympus"},
                                "INVALID_TIMEZONE", "Mars/Olympus")):
        reply = raw_call(s.d.socket, "schedule.add",
                         {"name": "bad", "argv": ["true"], **params})
        assert reply["error"]["data"]["code"] == code, reply
        assert word in reply["error"]["message"]
    reply = raw_call(s.d.socket, "schedule.add", {"name": "bad", "argv": ["true"],
                                                  "every": 60, "cwd": "/nonexistent"})
    assert reply["error"]["data"]["code"] == "INVALID_PARAMS" and "cwd" in reply["error"][
        "message"]
    r = s.d.cli("schedule", "add", "bad", "--cron", "0 25 * * *", "--", "true")
    assert r.returncode == 1 and b"invalid cron expression" in r.stderr, r
    r = s.d.cli("schedule", "add", "bad", "--every", "1h", "--tz", "Nowhere/X", "--", "true")
    assert r.returncode == 1 and b"unknown time zone 'Nowhere/X'" in r.stderr, r
    assert s.call("schedule.list")["jobs"] == []
    assert raw_call(s.d.socket, "daemon.health")["result"]["status"] == "SERVING"


@pytest.mark.parametrize("fault", ["schedule.after_fire_commit", "exec.after_commit",
                                   "exec.after_handoff"])
def test_a_fire_time_runs_exactly_once_across_a_sigkill(s: Sched, fault: str) -> None:
    """Killed between committing the fire time and its exec (or inside the exec's own
    start): the next daemon starts that fire time once, never twice, never zero times."""
    out = s.home / "out"
    s.d.start()
    job = s.add("once", appender(out), every=HOUR)
    s.d.term()
    s.d.start(env={"TETHER_FAULT": fault})
    s.set_now(job["next_fire"] + 1)
    wait_for(lambda: s.d.proc is not None and s.d.proc.poll() is not None, 20,
             what=f"the daemon killing itself at {fault}")
    assert s.d.proc is not None and s.d.proc.returncode == -9
    s.d.start()
    [run] = s.wait_runs("once", "SUCCESS")
    time.sleep(1.0)  # a second start would have happened by now
    assert lines(out) == 1
    runs = s.runs("once")
    assert [r["fire_at"] for r in runs] == [job["next_fire"]], runs
    assert run["attempt"] == (1 if fault == "exec.after_commit" else 0)
    execs = s.call("exec.list", {"all": True})["execs"]
    assert sum(1 for x in execs if x["exit_code"] == 0) == 1
    # The next fire time is the next one, not the one the crash interrupted.
    assert s.show("once")["next_fire"] == job["next_fire"] + HOUR


@pytest.mark.parametrize("seed", [1, 2])
def test_random_sigkills_neither_double_nor_lose_a_fire_time(s: Sched, seed: int) -> None:
    """Six fire times, the daemon SIGKILLed at a random moment after each: every fire
    time ends with exactly one run and its command ran exactly once."""
    rng = random.Random(seed)
    out = s.home / "out"
    s.d.start()
    job = s.add("k", ["sh", "-c", f"sleep 0.2; echo $TETHER_EXEC_ID >> {out}"], every=HOUR,
                overlap="concurrent")  # no fire time skipped for a run still running
    fires = [job["next_fire"] + i * HOUR for i in range(6)]
    for at in fires:
        s.set_now(at + 1)
        time.sleep(rng.uniform(0.0, 0.5))
        s.d.kill9()
        s.d.start()
    try:
        done = wait_for(lambda: (lambda rs: rs if len(rs) == 6 else None)(
            [r for r in s.runs("k") if r["state"] in ("SUCCESS", "FAILED")]), 30,
            what="six settled runs")
    except AssertionError:
        raise AssertionError(f"{s.runs('k')}\n{s.call('exec.list', {'all': True})}"
                             f"\n{s.d.log_text()[-3000:]}") from None
    time.sleep(1.0)
    assert sorted(r["fire_at"] for r in s.runs("k")) == fires, s.runs("k")
    assert [r["state"] for r in done] == ["SUCCESS"] * 6, done
    ran = out.read_text().split()
    assert len(ran) == 6 and sorted(ran) == sorted(r["exec_id"] for r in done)


@pytest.mark.parametrize("seed", [1, 2])
def test_many_fire_times_due_at_once_each_run_once_across_a_sigkill(s: Sched,
                                                                    seed: int) -> None:
    """More jobs due at one instant than start at once (the rest wait, PENDING, in
    fire-time order): the daemon SIGKILLed at a random moment of that leaves every fire
    time run exactly once — by it, or by the next daemon."""
    rng = random.Random(seed)
    out = s.home / "out"
    s.d.start()
    jobs = [s.add(f"b{i}", ["sh", "-c", f'echo "$TETHER_EXEC_ID b{i}" >> {out}'],
                  every=HOUR) for i in range(STARTS_AT_ONCE + 16)]
    s.set_now(max(j["next_fire"] for j in jobs) + 1)
    time.sleep(rng.uniform(0.05, 0.6))
    s.d.kill9()
    s.d.start()

    def settled() -> list[dict[str, Any]] | None:
        runs = [r for j in jobs for r in s.runs(j["name"])]
        done = [r for r in runs if r["state"] in ("SUCCESS", "FAILED")]
        return runs if len(done) == len(jobs) == len(runs) else None

    runs = wait_for(settled, 90, what=f"{len(jobs)} settled runs")
    time.sleep(1.0)  # a second start would have happened by now
    assert [r["state"] for r in runs] == ["SUCCESS"] * len(jobs), runs
    ran = [line.split() for line in out.read_text().splitlines()]
    assert sorted(name for _, name in ran) == sorted(j["name"] for j in jobs)
    assert sorted(x for x, _ in ran) == sorted(r["exec_id"] for r in runs)


@pytest.mark.parametrize("policy", ["skip", "run-once"])
def test_missed_fire_times_follow_the_policy(s: Sched, policy: str) -> None:
    out = s.home / "out"
    s.d.start()
    job = s.add("m", appender(out), every=HOUR, missed=policy)
    s.d.term()
    # Three fire times pass while no daemon runs, the last more than a minute ago.
    s.set_now(job["next_fire"] + 2 * HOUR + 600)
    s.d.start()
    if policy == "skip":
        [run] = s.wait_runs("m", "SKIPPED")
        time.sleep(0.5)
        assert lines(out) == 0
    else:
        [run] = s.wait_runs("m", "SUCCESS")
        assert lines(out) == 1
    assert run["missed"] == 3 and run["fire_at"] == job["next_fire"]
    assert len(s.runs("m")) == 1
    assert s.show("m")["next_fire"] == job["next_fire"] + 3 * HOUR


def test_pause_and_resume(s: Sched) -> None:
    out = s.home / "out"
    s.d.start()
    job = s.add("p", appender(out), every=HOUR)
    assert s.call("schedule.pause", {"job": "p"})["state"] == "PAUSED"
    s.set_now(job["next_fire"] + 1)
    time.sleep(0.5)
    assert s.runs("p") == [] and lines(out) == 0
    r = raw_call(s.d.socket, "schedule.run_now", {"job": "p"})
    assert r["error"]["data"]["code"] == "JOB_PAUSED"
    # Paused across a restart too: the state is in the store.
    s.d.term()
    s.d.start()
    assert s.show("p")["state"] == "PAUSED"
    resumed = s.call("schedule.resume", {"job": "p"})
    assert resumed["state"] == "ACTIVE" and resumed["next_fire"] == job["next_fire"] + HOUR
    time.sleep(0.3)
    assert s.runs("p") == []  # the fire time passed while paused is not run
    s.set_now(resumed["next_fire"] + 1)
    s.wait_runs("p", "SUCCESS")
    assert lines(out) == 1


def test_overlap_skip_queue_concurrent_with_slow_jobs(s: Sched) -> None:
    s.d.start()
    gate = s.home / "go"
    slow = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]
    t0 = s.now()
    for name, overlap in (("sk", "skip"), ("qu", "queue"), ("co", "concurrent")):
        s.add(name, slow, every=HOUR, overlap=overlap)
    s.add("c2", slow, every=HOUR, overlap="concurrent", max_concurrent=2)
    first = s.show("sk")["next_fire"]
    s.set_now(first + 1)
    for name in ("sk", "qu", "co"):
        s.wait_runs(name, "RUNNING")
    s.set_now(first + HOUR + 1)  # the second fire time, the first runs still running
    [skipped] = s.wait_runs("sk", "SKIPPED")
    assert "overlap" in skipped["reason"]
    wait_for(lambda: len(s.runs("co", "RUNNING")) == 2, 20, what="two concurrent runs")
    [queued] = wait_for(lambda: s.runs("qu", "PENDING"), 20, what="a queued run")
    assert queued["queued"] and len(s.runs("qu", "RUNNING")) == 1
    s.set_now(first + 2 * HOUR + 1)  # a third: the queue (1) is full
    [full] = s.wait_runs("qu", "SKIPPED")
    assert "queue full" in full["reason"]
    [capped] = s.wait_runs("c2", "SKIPPED")  # its third: two already run
    assert "2 run(s) still running" in capped["reason"]
    # (its second may still be starting on a loaded machine: PENDING holds its slot too)
    wait_for(lambda: len(s.runs("c2", "RUNNING")) == 2, 20, what="c2's two runs")
    gate.touch()  # the slow runs end: the queued one starts, then ends
    s.wait_runs("qu", "SUCCESS", 2)
    s.wait_runs("co", "SUCCESS", 3)
    s.wait_runs("c2", "SUCCESS", 2)
    wait_for(lambda: len(s.runs("sk", "SUCCESS")) == 1, 20, what="the skip job's run")
    assert len(s.runs("sk", "SKIPPED")) == 2  # its second and third fire times
    assert t0 < first


def test_a_run_whose_exec_ends_while_the_daemon_is_down_settles_at_restart(s: Sched) -> None:
    gate = s.home / "go"
    s.d.start()
    job = s.add("g", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 3"],
                every=HOUR)
    s.set_now(job["next_fire"] + 1)
    [run] = s.wait_runs("g", "RUNNING")
    s.d.kill9()
    gate.touch()
    time.sleep(0.3)
    s.d.start()
    [failed] = s.wait_runs("g", "FAILED")
    assert failed["exit_code"] == 3 and failed["exec_id"] == run["exec_id"]
    after = s.show("g")
    assert (after["runs"], after["errors"], after["next_fire"]) == (1, 1,
                                                                   job["next_fire"] + HOUR)


def test_a_run_times_out_and_fails(s: Sched) -> None:
    s.d.start()
    job = s.add("slow", ["sleep", "30"], every=HOUR, timeout=0.5)
    s.set_now(job["next_fire"] + 1)
    [run] = s.wait_runs("slow", "FAILED")
    assert run["exec_id"] and s.show("slow")["errors"] == 1


def test_run_now_and_remove(s: Sched) -> None:
    out = s.home / "out"
    s.d.start()
    s.add("r", appender(out), every=HOUR)
    run = s.call("schedule.run_now", {"job": "r"})
    assert run["manual"] and run["state"] == "PENDING"
    s.wait_runs("r", "SUCCESS")
    assert lines(out) == 1
    assert s.call("schedule.remove", {"job": "r"})["state"] == "REMOVED"
    assert s.call("schedule.list")["jobs"] == []
    with pytest.raises(RpcFailed) as e:
        s.call("schedule.show", {"job": "r"})
    assert e.value.error["data"]["code"] == "JOB_NOT_FOUND"


def test_the_sdk_and_the_cli_show_jobs_and_runs(s: Sched) -> None:
    out = s.home / "out"
    s.d.start()
    c = s.d.client()
    job = c.schedule_add("sdk", appender(out), every=HOUR, env={"SECRET": "hunter2"},
                         overlap="queue", queue=2, jitter=5.0)
    assert job.spec.exec.env == {"SECRET": ""}  # names only, the value is kept to run it
    assert job.next_fire <= job.due_at < job.next_fire + 5.0
    run = c.schedule_run_now("sdk")
    assert run is not None and run.manual
    wait_for(lambda: c.schedule_show("sdk").recent[0].state == "SUCCESS", 20, what="the run")
    st = c.scheduler_status()
    assert [j.name for j in st.jobs] == ["sdk"] and st.jobs[0].runs == 1
    assert st.next_due == job.due_at
    r = s.d.cli("scheduler", "status")
    assert r.returncode == 0
    header, row = r.stdout.decode().splitlines()[:2]
    assert header.split() == ["JOB", "STATUS", "SCHEDULE", "LAST", "RUN", "NEXT", "RUN",
                              "RUNS", "ERRORS"]
    assert row.split()[:2] == ["sdk", "ACTIVE"] and "SUCCESS" in row
    r = s.d.cli("schedule", "show", "sdk")
    assert r.returncode == 0 and run.exec_id is None and b"exited with code 0" in r.stdout
    assert [j.name for j in c.schedule_list()] == ["sdk"]
    assert c.schedule_remove("sdk").state == "REMOVED"
    assert c.schedule_list() == [] and [j.name for j in c.schedule_list(all=True)] == ["sdk"]


def test_scheduler_status_pages_its_jobs_and_old_callers_get_a_bounded_first_page(
        s: Sched) -> None:
    """Issue 22 #7: ``scheduler.status`` returned every job at once (35-51 MB and seconds
    of the daemon's loop for 100,000; the dashboard asks on every refresh). Now a page at
    a time: ``limit`` and ``after`` (the ``next`` of the page before), ``total``; a caller
    without them gets the first 1,000 jobs; ``tether scheduler status`` follows the pages."""
    s.d.start()
    n = 1005
    with RawConn(s.d.socket, 60.0) as conn:  # two JSON-RPC batches of schedule.add
        for lo in range(0, n, 1000):
            conn.send_obj([{"jsonrpc": "2.0", "id": i, "method": "schedule.add",
                            "params": {"name": f"j{i:04d}", "argv": ["true"], "every": HOUR}}
                           for i in range(lo, min(n, lo + 1000))])
            replies = conn.recv_obj()
            assert all("result" in r for r in replies), [r for r in replies if "error" in r][:1]
    s.call("schedule.remove", {"job": "j0003"})  # removed: on no page, not counted
    names = [f"j{i:04d}" for i in range(n) if i != 3]
    old = s.call("scheduler.status")  # a caller from before paging
    assert [j["name"] for j in old["jobs"]] == names[:1000]
    assert old["total"] == n - 1 and old["next"] is not None and old["next_due"] is not None
    c = s.d.client()
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        page = c.scheduler_status(limit=400, after=after)
        seen += [j.name for j in page.jobs]
        pages += 1
        assert page.total == n - 1
        if page.next is None:
            break
        after = page.next
    assert seen == names and pages == 3
    with pytest.raises(RpcFailed) as bad:
        s.call("scheduler.status", {"after": "not-a-cursor"})
    assert bad.value.error["code"] == -32602 and "next" in bad.value.error["message"]
    with pytest.raises(RpcFailed):
        s.call("scheduler.status", {"limit": 5001})
    r = s.d.cli("scheduler", "status")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.decode().splitlines()[1:]
    assert [row.split()[0] for row in rows] == names


def test_the_cli_shows_periods_in_the_users_unit_and_times_with_their_zone(s: Sched) -> None:
    """`--every 15m` read back as `every 900s`, and times without a zone (a cron job has a
    zone of its own: 02:00 in which?)."""
    s.d.start()
    tz = {"TZ": "Europe/Berlin"}
    r = s.d.cli("schedule", "add", "q", "--every", "15m", "--", "true", env=tz)
    assert r.returncode == 0, r.stderr
    assert b": every 15m, next run " in r.stdout, r.stdout
    assert re.search(rb"next run \d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T\n", r.stdout), r.stdout
    r = s.d.cli("scheduler", "status", env=tz)
    row = r.stdout.decode().splitlines()[1]
    assert "every 15m" in row and re.search(r"\d\d:\d\d:\d\d CES?T", row), row
    assert s.d.cli("schedule", "add", "d", "--every", "2d", "--", "true").stdout.split(
        b": ")[1].startswith(b"every 2d, ")
