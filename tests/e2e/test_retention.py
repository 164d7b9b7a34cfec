"""Retention through the real daemon: ended execs' logs removed by age and by the
size cap (never a running exec's, whose ``logs --offset`` keeps working), journal
compaction with ``EVENTS_PURGED`` and a gapless resume, ``tether prune --dry-run``,
``tether rm``, ``tether df``, and a SIGKILL between marking and removing.

Time is moved with ``TETHER_TEST_CLOCK`` (a file the daemon adds to wall time)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, RawConn, RpcFailed, raw_call, wait_for
from tether.client.errors import TetherError

DAY = 86400


class Home:
    """A daemon on a fresh home whose clock the test moves."""

    def __init__(self, d: DaemonProc) -> None:
        self.d = d
        self.clock = d.home / "clock"
        self.clock.write_text("0")

    def move(self, seconds: float) -> None:
        self.clock.write_text(str(float(self.clock.read_text()) + seconds))

    def set_now(self, when: float) -> None:
        """Make the daemon's clock read ``when`` now. Monitors and the journal stamp
        real time, so "older than N days" is measured against real stamps: a test
        splits old from fresh by real time (a short sleep) and puts now N days later."""
        self.clock.write_text(str(when - time.time()))

    def start(self, **env: str) -> None:
        # No periodic pass unless a test asks: each test runs its own, so none races
        # with one the daemon started by itself.
        self.d.start(env={"TETHER_TEST_CLOCK": str(self.clock),
                          "TETHER_RETENTION_INTERVAL": "1h",
                          "TETHER_RETENTION_FIRST_PASS": "10d", **env})

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        resp = raw_call(self.d.socket, method, params or {})
        if "error" in resp:
            raise RpcFailed(method, resp["error"])
        return resp["result"]

    def run(self, *argv: str) -> str:
        c = self.d.client()
        x = c.exec_start(list(argv))
        c.exec_wait(x.id, timeout=30)
        return x.id

    def spawn(self, *argv: str) -> str:
        x = self.d.client().exec_start(list(argv))
        wait_for(lambda: self.d.client().exec_get(x.id).state == "RUNNING", what="RUNNING")
        return x.id

    def log(self, exec_id: str) -> Path:
        return self.d.home / "logs" / "default" / f"{exec_id}.stdout.log"


@pytest.fixture
def h(stopped_daemon: DaemonProc) -> Iterator[Home]:
    home = Home(stopped_daemon)
    yield home


def _writer(marker: str, size: int) -> list[str]:
    return ["sh", "-c", f"printf '{marker}'; head -c {size} /dev/zero"]


def test_old_logs_go_running_untouched_and_offset_works(h: Home) -> None:
    h.start()
    old = h.run("echo", "old output")
    live = h.spawn("sh", "-c", "echo line-one; echo line-two; exec sleep 120")
    wait_for(lambda: h.log(live).read_bytes() == b"line-one\nline-two\n", what="live output")
    time.sleep(1.0)
    split = time.time()
    time.sleep(1.0)
    fresh = h.run("echo", "fresh")
    h.set_now(split + 14 * DAY)  # `old` ended more than 14 days ago, `fresh` less
    rep = h.call("retention.prune")  # the daemon's policy: 14 days
    assert [x["id"] for x in rep["execs"]] == [old]
    assert not h.log(old).exists()
    assert h.log(fresh).exists() and h.log(live).exists()
    # The pruned exec's record stays; its logs say they were pruned, not "empty".
    r = h.d.cli("logs", old)
    assert r.returncode == 1 and b"were removed" in r.stderr, r
    assert h.d.client().exec_get(old).state == "FINISHED"
    # The running exec's log is whole, and reading from an offset still works.
    r = h.d.cli("logs", "--offset", "9", live)
    assert r.returncode == 0 and r.stdout == b"line-two\n", r
    # Its journal events survive a compaction that removes everything older around them.
    h.move(31 * DAY)
    rep = h.call("retention.prune")
    assert old not in [x["id"] for x in rep["execs"]]
    assert live not in [x["id"] for x in rep["execs"]]
    evs = h.call("events.list", {"since": 0})["events"]
    assert [e["state"] for e in evs if e["exec"] == live][:2] == ["PENDING", "RUNNING"]
    assert h.d.cli("logs", live).stdout == b"line-one\nline-two\n"
    h.d.client().exec_cancel(live, signal="KILL")


def test_periodic_pass_removes_old_logs(h: Home) -> None:
    h.start(TETHER_RETENTION_INTERVAL="0.2", TETHER_RETENTION_FIRST_PASS="0.2")
    old = h.run("echo", "old")
    h.move(15 * DAY)
    wait_for(lambda: not h.log(old).exists(), timeout=20, what="the periodic pass")
    assert h.d.client().exec_get(old).state == "FINISHED"


def test_size_cap_removes_oldest_first(h: Home) -> None:
    h.start(TETHER_LOGS_MAX="150K")
    ids = [h.run(*_writer(f"x{i}", 100_000)) for i in range(3)]
    rep = h.call("retention.prune")
    assert [x["id"] for x in rep["execs"]] == ids[:2]
    assert all(x["bytes"] >= 100_000 for x in rep["execs"])
    assert not h.log(ids[0]).exists() and not h.log(ids[1]).exists()
    assert h.log(ids[2]).stat().st_size >= 100_000


def test_size_cap_never_cuts_a_running_exec(h: Home) -> None:
    h.start(TETHER_LOGS_MAX="10K")
    live = h.spawn("sh", "-c", "head -c 50000 /dev/zero; exec sleep 120")
    wait_for(lambda: h.log(live).stat().st_size == 50_000, what="live output")
    rep = h.call("retention.prune")
    assert rep["execs"] == []
    assert h.log(live).stat().st_size == 50_000
    r = h.d.cli("logs", "--offset", "49990", live)
    assert r.stdout == b"\0" * 10
    h.d.client().exec_cancel(live, signal="KILL")


def test_events_purged_then_resume_without_gap(h: Home) -> None:
    h.start()
    for i in range(3):
        h.run("echo", str(i))
    time.sleep(1.0)
    split = time.time()
    time.sleep(1.0)
    recent = h.run("echo", "recent")  # its events are newer than 30 days: they stay
    before = h.call("events.list", {"since": 0})["events"]
    h.set_now(split + 30 * DAY)
    rep = h.call("retention.prune")
    assert rep["events"] > 0
    floor = rep["events_floor"]
    with pytest.raises(RpcFailed) as ei:
        h.call("events.list", {"since": 1})
    err = ei.value.error
    assert err["data"]["code"] == "EVENTS_PURGED" and err["data"]["oldest"] == floor
    assert f"since={floor}" in err["message"]
    with pytest.raises(RpcFailed) as ei:
        h.call("events.subscribe", {"since": 1})
    assert ei.value.error["data"]["code"] == "EVENTS_PURGED"
    after = h.call("events.list", {"since": floor})["events"]
    # No gap: everything after the floor that existed before is still there, in order.
    old_tail = [e["gseq"] for e in before if e["gseq"] > floor]
    assert [e["gseq"] for e in after][:len(old_tail)] == old_tail
    assert any(e["exec"] == recent for e in after)
    # Per stream: the same promise, with the stream's own seq.
    with pytest.raises(RpcFailed) as ei:
        h.call("events.list", {"since": 1, "sandbox": "default"})
    sfloor = ei.value.error["data"]["oldest"]
    seqs = [e["seq"] for e in h.call("events.list", {"since": sfloor,
                                                      "sandbox": "default"})["events"]]
    assert seqs == list(range(sfloor + 1, sfloor + 1 + len(seqs)))
    # Numbers are never reused: the next event continues the stream.
    nxt = h.run("echo", "next")
    evs = h.call("events.list", {"since": seqs[-1], "sandbox": "default"})["events"]
    assert evs[0]["seq"] == seqs[-1] + 1 and evs[0]["exec"] == nxt
    # The SDK's subscriber resumes from the floor.
    sub = h.d.client().subscribe(since=floor)
    assert next(sub).gseq == after[0]["gseq"]
    sub.close()


def test_prune_dry_run_changes_nothing(h: Home) -> None:
    h.start()
    x = h.run(*_writer("y", 5000))
    df0 = h.call("retention.df")
    r = h.d.cli("prune", "--older-than", "0s", "--dry-run")
    assert r.returncode == 0, r
    assert x.encode() in r.stdout and b"would remove" in r.stdout
    assert h.log(x).stat().st_size == 5001
    assert h.call("retention.df")["kinds"]["logs"] == df0["kinds"]["logs"]
    assert h.call("events.list", {"since": 0})["events"][0]["gseq"] == 1
    r = h.d.cli("prune", "--older-than", "0s")
    assert r.returncode == 0 and b"removed" in r.stdout, r
    assert not h.log(x).exists()
    r = h.d.cli("prune", "--older-than", "soon")
    assert r.returncode == 2 and b"not a duration" in r.stderr


def test_rm_refuses_running_and_removes_ended(h: Home) -> None:
    h.start()
    live = h.spawn("sleep", "120")
    r = h.d.cli("rm", live)
    assert r.returncode == 1 and b"tether kill" in r.stderr, r
    ended = h.run("echo", "bye")
    r = h.d.cli("rm", ended)
    assert r.returncode == 0 and ended.encode() in r.stdout, r
    assert not list((h.d.home / "logs" / "default").glob(f"{ended}.*"))
    assert not list((h.d.home / "run").glob(f"{ended}.*"))
    with pytest.raises(TetherError) as ei:
        h.d.client().exec_get(ended)
    assert ei.value.code == "EXEC_NOT_FOUND"
    evs = h.call("events.list", {"since": 0})["events"]
    assert any(e["type"] == "exec.removed" and e["exec"] == ended for e in evs)
    assert h.d.client().exec_get(live).state == "RUNNING"
    h.d.client().exec_cancel(live, signal="KILL")


def _walk(root: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for dirpath, _d, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.stat().st_size
    return out


def test_df_adds_up(h: Home) -> None:
    h.start()
    h.run(*_writer("z", 30_000))
    h.run("echo", "small")
    r = h.d.cli("df", "--json")
    assert r.returncode == 0, r
    du = json.loads(r.stdout)
    files = _walk(h.d.home)
    assert sum(du["kinds"].values()) == du["total"]
    assert du["kinds"]["logs"] == sum(n for p, n in files.items() if p.startswith("logs/"))
    assert du["kinds"]["run"] == sum(n for p, n in files.items() if p.startswith("run/"))
    assert du["kinds"]["store"] == sum(n for p, n in files.items()
                                       if p.startswith("tether.db"))
    assert abs(du["total"] - sum(files.values())) < 64 * 1024  # daemon-N.log grows
    [sb] = du["sandboxes"]
    assert sb["name"] == "default" and sb["execs"] == 2
    assert sb["bytes"] == du["kinds"]["logs"] + du["kinds"]["run"]
    r = h.d.cli("df")
    assert r.returncode == 0 and b"  2 execs\n" in r.stdout, r.stdout
    h.d.client().sandbox_create("solo", runtime="process")  # its row: "1 exec"
    x = h.d.client().exec_start(["true"], sandbox="solo")
    h.d.client().exec_wait(x.id, timeout=10)
    r = h.d.cli("df")
    assert b"  1 exec\n" in r.stdout, r.stdout


def test_sigkill_mid_prune_is_finished_at_restart(h: Home) -> None:
    h.start(TETHER_FAULT="retention.after_mark")
    pruned = h.run("echo", "to prune")
    with pytest.raises((RpcFailed, OSError, KeyError, ValueError)):
        h.call("retention.prune", {"older_than": 0})
    assert h.d.proc is not None
    h.d.proc.wait(10)  # killed itself between the mark and the files
    assert h.log(pruned).exists()  # marked, not yet removed
    h.start()
    assert h.call("daemon.status")["recovery"]["prunes_finished"] == 1
    assert not h.log(pruned).exists()
    r = h.d.cli("logs", pruned)
    assert r.returncode == 1 and b"were removed" in r.stderr, r


def test_sigkill_mid_rm_is_finished_at_restart(h: Home) -> None:
    h.start(TETHER_FAULT="retention.after_mark")
    gone = h.run("echo", "to remove")
    with pytest.raises((RpcFailed, OSError, KeyError, ValueError)):
        h.call("exec.remove", {"execs": [gone]})
    assert h.d.proc is not None
    h.d.proc.wait(10)
    h.start()
    with pytest.raises(TetherError) as ei:
        h.d.client().exec_get(gone)
    assert ei.value.code == "EXEC_NOT_FOUND"
    assert not list((h.d.home / "logs" / "default").glob(f"{gone}.*"))


def test_bad_params_precise_and_daemon_serves(h: Home) -> None:
    h.start()
    with pytest.raises(RpcFailed) as ei:
        h.call("retention.prune", {"older_than": -1})
    assert ei.value.error["data"]["code"] == "INVALID_PARAMS"
    with pytest.raises(RpcFailed) as ei:
        h.call("exec.remove", {"execs": []})
    assert ei.value.error["data"]["code"] == "INVALID_PARAMS"
    with pytest.raises(RpcFailed) as ei:
        h.call("exec.remove", {"execs": ["nope"]})
    assert ei.value.error["data"]["code"] == "EXEC_NOT_FOUND"
    assert h.call("daemon.health")["status"] == "SERVING"


def test_a_malformed_policy_is_refused_in_one_line(h: Home) -> None:
    proc = h.d.start(wait=False, env={"TETHER_KEEP_LOGS": "soon"})
    assert proc.wait(20) == 2  # a usage error, as for a malformed flag
    text = h.d.log_text()
    assert "$TETHER_KEEP_LOGS: 'soon' is not a duration" in text and "Traceback" not in text


def test_rm_of_an_exec_whose_logs_were_pruned_removes_the_rest(h: Home) -> None:
    h.start()
    x = h.run("echo", "old")
    h.call("retention.prune", {"older_than": 0})
    assert not h.log(x).exists()
    assert (h.d.home / "logs" / "default" / f"{x}.exit").exists()
    r = h.d.cli("rm", x)
    assert r.returncode == 0, r
    assert not list((h.d.home / "logs" / "default").glob(f"{x}.*"))
    with pytest.raises(TetherError):
        h.d.client().exec_get(x)


def test_dead_run_files_go_a_live_execs_stay(h: Home) -> None:
    h.start()
    ended = h.run("echo", "done")
    live = h.spawn("sleep", "120")
    run = h.d.home / "run"
    assert list(run.glob(f"{ended}.*")) and list(run.glob(f"{live}.*"))
    assert h.call("retention.prune")["run_files"] == 0  # settled a moment ago: kept
    h.move(2 * 3600)
    rep = h.call("retention.prune")
    assert rep["run_files"] >= 1 and rep["execs"] == []
    assert not list(run.glob(f"{ended}.*"))
    assert {p.name for p in run.glob(f"{live}.*")} >= {f"{live}.claim", f"{live}.handles.json"}
    assert h.d.client().exec_get(ended).exit_code == 0
    assert h.d.cli("logs", ended).stdout == b"done\n"
    h.d.client().exec_cancel(live, signal="KILL")


@pytest.mark.parametrize("delay_ms", [4, 8, 12, 16])
def test_sigkill_at_a_random_point_of_a_pass_leaves_rows_and_files_agreeing(
        h: Home, delay_ms: int) -> None:
    """A real SIGKILL somewhere around a pass (before, inside or after it: the exact
    middle is ``retention.after_mark``'s test): no log is gone unless its exec was
    marked, and the next daemon finishes every mark."""
    import sqlite3
    import threading

    h.start()
    c = h.d.client()
    ids = [c.exec_start(["sh", "-c", f"echo out-{i}"]).id for i in range(120)]
    for x in ids:
        c.exec_wait(x, timeout=30)
    logs = h.d.home / "logs" / "default"
    t = threading.Thread(target=lambda: _quietly(h.call, "retention.prune", {"older_than": 0}))
    t.start()
    time.sleep(delay_ms / 1000)
    h.d.kill9()
    t.join(10)
    db = sqlite3.connect(h.d.home / "tether.db")
    marked = {r[0] for r in db.execute("SELECT exec_id FROM exec_prunes")}
    db.close()
    for i, x in enumerate(ids):  # a log is gone only if its exec was marked first
        path = logs / f"{x}.stdout.log"
        if x not in marked:
            assert path.read_bytes() == f"out-{i}\n".encode(), x
    h.start()
    for i, x in enumerate(ids):
        r = h.d.cli("logs", x) if i % 20 == 0 else None
        if x in marked:
            assert not (logs / f"{x}.stdout.log").exists(), x
            assert r is None or (r.returncode == 1 and b"were removed" in r.stderr), r
        else:
            assert r is None or r.stdout == f"out-{i}\n".encode(), r
    db = sqlite3.connect(h.d.home / "tether.db")
    assert db.execute("SELECT COUNT(*) FROM exec_prunes WHERE done = 0").fetchone()[0] == 0
    db.close()


def _quietly(fn: Any, *args: Any) -> None:
    with contextlib.suppress(RpcFailed, OSError, KeyError, ValueError):
        fn(*args)  # the daemon may be killed under the call


def test_a_subscriber_caught_up_by_compaction_is_told_not_skipped(h: Home) -> None:
    h.start()
    c = h.d.client()
    big = "x" * 10_000  # each PENDING event carries the argv: ~10 KiB per exec
    ids = [c.exec_start(["true", big]).id for _ in range(60)]
    for x in ids:
        c.exec_wait(x, timeout=30)
    sub = RawConn(h.d.socket, timeout=10)
    sub.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sub.send_obj({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe",
                  "params": {"since": 1}})
    time.sleep(0.5)  # the daemon fills the socket and waits, mid catch-up
    h.set_now(time.time() + 31 * DAY)
    floor = h.call("retention.prune")["events_floor"]
    assert floor > 1
    seen: list[int] = []
    while True:
        msg = sub.recv_obj()
        if msg.get("method") == "events.event":
            gseq = msg["params"]["event"]["gseq"]
            if seen and gseq != seen[-1] + 1:
                pytest.fail(f"the subscription jumped from {seen[-1]} to {gseq} silently")
            seen.append(gseq)
        elif msg.get("method") == "events.overflow":
            last = msg["params"]["last"]
            assert "compacted" in msg["params"]["message"]
            break
    assert seen == sorted(seen) and seen == list(range(seen[0], seen[0] + len(seen)))
    assert last == seen[-1] < floor  # told, instead of a jump past the floor
    sub.close()
    with pytest.raises(RpcFailed) as ei:
        h.call("events.subscribe", {"since": last})
    assert ei.value.error["data"]["code"] == "EVENTS_PURGED"


def test_daemon_flags_win_over_the_environment(h: Home) -> None:
    import subprocess

    from tests.harness import TETHER

    bad = subprocess.run([*TETHER, "--home", str(h.d.home), "daemon", "--keep-logs", "soon"],
                         capture_output=True, timeout=30, env=h.d.env)
    assert bad.returncode == 2 and b"--keep-logs: 'soon' is not a duration" in bad.stderr
    log = open(h.d.home / "daemon-flags.log", "wb")  # noqa: SIM115
    h.d.proc = subprocess.Popen(
        [*TETHER, "--home", str(h.d.home), "daemon", "--logs-max", "150K", "--keep-events",
         "2d"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**h.d.env, "TETHER_LOGS_MAX": "10G", "TETHER_KEEP_LOGS": "3d"})
    log.close()
    h.d.wait_serving()
    policy = h.call("retention.df")["policy"]
    assert policy["logs_max_bytes"] == 150 * 1024  # the flag, not the variable
    assert policy["keep_events"] == 2 * DAY
    assert policy["keep_logs"] == 3 * DAY  # no flag: the variable


def test_old_scheduled_runs_go_at_the_journals_age_and_df_counts_them(
        h: Home, tmp_path: Path) -> None:
    h.start()
    c = h.d.client()
    c.schedule_add("tick", ["true"], every=365 * DAY, cwd=str(tmp_path))  # no fire meanwhile

    def run_now() -> None:
        run = c.schedule_run_now("tick")
        assert run is not None
        wait_for(lambda: c.schedule_show("tick").recent[0].state == "SUCCESS",
                 what="the run's end")
    run_now()
    run_now()
    time.sleep(1.0)
    split = time.time()
    time.sleep(1.0)
    run_now()
    run_now()
    assert h.call("retention.df")["schedule_runs"] == 4
    h.set_now(split + 30 * DAY)
    assert h.call("retention.prune", {"dry_run": True})["schedule_runs"] == 2
    assert len(c.schedule_show("tick").recent) == 4  # a dry run changes nothing
    rep = h.call("retention.prune")
    assert rep["schedule_runs"] == 2
    recent = c.schedule_show("tick").recent
    assert len(recent) == 2 and all((r.ended_at or 0) > split for r in recent)
    assert h.call("retention.df")["schedule_runs"] == 2
    (ev,) = [e for e in c.events_list(since=0, limit=1000).events
             if e.type == "schedule.pruned"]
    assert ev.data["runs"] == 2
    assert h.call("retention.prune")["schedule_runs"] == 0  # nothing more, no event
    assert c.schedule_list()[0].runs == 4  # the job's counters stay
    out = h.d.cli("df")
    assert b"scheduled runs kept: 2 " in out.stdout, out.stdout.decode()
