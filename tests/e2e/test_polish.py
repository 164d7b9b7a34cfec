"""The small things a new user tripped over (issue 23, item 14), each done as they did it:
the CLI as a subprocess against a real daemon. (`tether cp`'s byte count and exit codes
are in test_docker.py, the unsandboxed notice's length in test_default_toolchain.py.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.harness import TETHER, DaemonProc, wait_for


def tether(d: DaemonProc, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], capture_output=True,
                          text=True, timeout=60, env={**d.env, **(env or {})}, cwd="/tmp")


def test_scheduled_runs_are_numbered_per_job_named_and_shown_in_the_jobs_zone(
        daemon: DaemonProc) -> None:
    utc = {"TZ": "UTC"}
    assert tether(daemon, "schedule", "add", "other", "--every", "1d", "--", "true",
                  env=utc).returncode == 0
    assert tether(daemon, "schedule", "run-now", "other").returncode == 0  # a run id used
    r = tether(daemon, "schedule", "add", "nightly", "--cron", "0 2 * * *", "--tz",
               "Europe/Paris", "--", "sh", "-c", "echo from the job", env=utc)
    assert r.returncode == 0, r.stderr
    # 02:00 in Paris, as its cron says, then the same time here (UTC).
    assert re.search(r"next run \d{4}-\d\d-\d\d 02:00:00 CES?T \(\d{4}-\d\d-\d\d "
                     r"0[01]:00:00 UTC\)", r.stdout), r.stdout
    status = tether(daemon, "scheduler", "status", env=utc).stdout
    assert re.search(r"02:00:00 CES?T \(", status), status
    first = tether(daemon, "schedule", "run-now", "nightly")
    assert first.stdout == "run 1 of nightly: PENDING (its exec: nightly#1)\n", first.stdout
    with daemon.client() as c:
        wait_for(lambda: c.schedule_show("nightly").recent[0].state == "SUCCESS", 20,
                 what="the run")
    logs = tether(daemon, "logs", "nightly#1")
    assert logs.stdout == "from the job\n", logs.stderr
    assert "nightly#1" in tether(daemon, "ps", "-a").stdout
    second = tether(daemon, "schedule", "run-now", "nightly")
    assert second.stdout.startswith("run 2 of nightly:"), second.stdout
    shown = tether(daemon, "schedule", "show", "nightly").stdout.splitlines()
    runs = [line.split()[0] for line in shown[shown.index(next(
        x for x in shown if x.startswith("RUN"))) + 1:]]
    assert runs == ["2", "1"], shown


def test_digest_without_build_and_by_exec_names(daemon: DaemonProc) -> None:
    assert tether(daemon, "run", "--name", "build", "--", "sh", "-c",
                  "date; exit 3").returncode == 3
    assert tether(daemon, "run", "--", "sh", "-c", "cd /; exit 4").returncode == 4
    r = tether(daemon, "digest")  # no --build: the newcomer's first try
    assert r.returncode == 0, r.stderr
    assert "no digest yet" not in r.stdout
    line = r.stdout.splitlines()[0]
    assert "2 runs: 0 ok, 2 failed" in line, line
    assert "top: build (1), sh (1)" in line, line  # not "date;" and "exit"


def test_df_tells_two_lineages_of_one_name_apart(daemon: DaemonProc) -> None:
    ids = []
    for _ in range(2):
        r = tether(daemon, "run", "--agent", "generic", "--name", "bot", "--", "echo", "hi")
        assert r.returncode == 0, r.stderr
    with daemon.client() as c:
        ids = [x.id for x in c.lineage_list(all=True)]
    out = tether(daemon, "df").stdout
    for ident in ids:
        assert f"bot ({ident})" in out, out


def test_hook_ls_has_a_header_and_counts_read_right(daemon: DaemonProc) -> None:
    r = tether(daemon, "hook", "add", "pager", "--on", "exec.finished", "--max-tries", "1",
               "--exec", "--", "false")
    assert r.returncode == 0, r.stderr
    tether(daemon, "run", "--", "true")
    with daemon.client() as c:
        wait_for(lambda: c.hook_show("pager").dead, 30, what="a dead delivery")
    ls = tether(daemon, "hook", "ls").stdout.splitlines()
    assert ls[0].split() == ["HOOK", "ON", "TARGET", "DELIVERIES"], ls
    assert ls[1].startswith("pager ") and "DEAD=1" in ls[1], ls
    again = tether(daemon, "hook", "retry", "pager")
    assert again.stdout == "1 delivery of pager queued again\n", again.stdout


def test_logs_plain_leaves_text_only(daemon: DaemonProc) -> None:
    with daemon.client() as c:
        x = c.exec_start(["sh", "-c", r"printf 'a\033(B\033[m\017b\r\nprog 1%%\rprog 2%%\n'"],
                         tty=True, cwd="/tmp")
        c.exec_wait(x.id, timeout=20)
    raw = subprocess.run([*TETHER, "--home", str(daemon.home), "logs", x.id],
                         capture_output=True, env=daemon.env, timeout=60).stdout
    assert b"\x0f" in raw and b"\r" in raw
    plain = subprocess.run([*TETHER, "--home", str(daemon.home), "logs", "--plain", x.id],
                           capture_output=True, env=daemon.env, timeout=60).stdout
    assert plain == b"ab\nprog 1%\nprog 2%\n", plain


def test_lineage_inspect_is_for_people_and_json_for_programs(daemon: DaemonProc,
                                                             tmp_path: Path) -> None:
    r = tether(daemon, "run", "--agent", "generic", "--name", "helper", "--", "echo", "hi")
    assert r.returncode == 0, r.stderr
    with daemon.client() as c:
        [lin] = c.lineage_list(all=True)
    shown = tether(daemon, "lineage", "inspect", "helper").stdout
    lines = shown.splitlines()
    assert lines[0] == f"lineage   {lin.id} (helper)", shown
    assert any(x.startswith("status    FINISHED") for x in lines), shown
    assert any(x.startswith("provider  generic") for x in lines), shown
    doc = json.loads(tether(daemon, "lineage", "inspect", "--json", "helper").stdout)
    assert doc["id"] == lin.id and doc["status"] == "FINISHED"
