"""Activity digests against the real daemon: rollups of real execs, closed by moving
the daemon's test clock (``TETHER_TEST_CLOCK``) instead of waiting hours; a late
exec makes a new version; a pass killed with SIGKILL resumes; a failing summarizer
leaves a FAILED node that the next pass builds."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Client, DaemonProc, RpcFailed, new_home, raw_call, remove_home, wait_for
from tether.digest import periods

UTC = periods.zone("UTC")
DAY = 86400.0


@pytest.fixture
def dd() -> Iterator[DaemonProc]:
    home = new_home()
    clock = home / "clock"
    clock.write_text("0")
    d = DaemonProc(home, env={"TETHER_TEST_CLOCK": str(clock), "TETHER_DIGEST_TZ": "UTC",
                              # no periodic pass: each test runs its own (one test below
                              # turns it on)
                              "TETHER_DIGEST_INTERVAL": str(10 * 365 * DAY)})
    try:
        yield d
    finally:
        d.cleanup()
        remove_home(home)


def advance(d: DaemonProc, seconds: float) -> None:
    clock = d.home / "clock"
    clock.write_text(str(float(clock.read_text()) + seconds))


def run_three(c: Client) -> list[str]:
    ids = []
    for argv in (["true"], ["sh", "-c", "echo boom >&2; exit 3"], ["true"]):
        x = c.exec_start(argv)
        c.exec_wait(x.id, timeout=20)
        ids.append(x.id)
    return ids


def digest_events(c: Client) -> list[dict[str, Any]]:
    page = c.events_list(since=0, limit=1000)
    return [{"node": e.data["node"], "version": e.data["version"], "state": e.state,
             "gseq": e.gseq} for e in page.events if e.type == "digest.node"]


def test_closed_periods_are_built_from_real_execs_and_add_up(dd: DaemonProc) -> None:
    dd.start()
    c = dd.client()
    ids = run_three(c)
    ended = c.exec_get(ids[-1]).ended_at
    assert ended is not None
    hour, day = periods.of("hour", ended, UTC), periods.of("day", ended, UTC)

    first = c.digest_build()  # the hour is still open: placeholders only
    assert first.built == 0 and first.drafts >= 2
    tree = c.digest_show("day", day.label)
    assert tree.node is not None and tree.node.state == "DRAFT"

    advance(dd, 2 * DAY)
    done = c.digest_build()
    assert done.failed == 0 and f"{hour.id} v1 COMPLETE" in done.nodes
    tree = c.digest_show("day", day.label)
    assert tree.node is not None and tree.node.state == "COMPLETE"
    hours = {h.id: h for h in tree.children}
    h = hours[hour.id]
    assert h.summary is not None and set(ids) <= set(h.children)
    assert h.summary.failed >= 1 and h.summary.commands.get("echo", 0) >= 1  # sh -c: its first word
    boom = [f for f in h.summary.failures if f.exec == ids[1]]
    assert boom and boom[0].exit_code == 3 and boom[0].line == "boom"
    d = tree.node.summary
    assert d is not None
    assert d.runs == sum(k.summary.runs for k in tree.children if k.summary)
    assert d.failed == sum(k.summary.failed for k in tree.children if k.summary)
    # Each node built once, and journaled once.
    evs = digest_events(c)
    assert Counter(e["node"] for e in evs if e["state"] == "COMPLETE")[hour.id] == 1
    # Nothing changed: the next pass builds nothing.
    again = c.digest_build()
    assert again.built == 0 and again.unchanged >= 2

    r = dd.cli("digest", "--day", day.label)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert f"day {day.label}  COMPLETE v1" in text and f"hour {hour.label}" in text
    assert "last failure: echo (exit 3): boom" in text
    r = dd.cli("digest", "--day", day.label, "--json")
    assert json.loads(r.stdout)["node"]["summary"]["runs"] == d.runs
    r = dd.cli("digest")
    assert f"day {day.label}" in r.stdout.decode()


def test_the_periodic_pass_builds_once_the_clock_has_moved(dd: DaemonProc) -> None:
    dd.env["TETHER_DIGEST_INTERVAL"] = "3600"
    dd.start()
    c = dd.client()
    ids = run_three(c)
    ended = c.exec_get(ids[-1]).ended_at
    assert ended is not None
    hour = periods.of("hour", ended, UTC)
    advance(dd, 2 * DAY)  # wakes the loop's sleep: an hour of the daemon's clock passed

    def built() -> bool:
        node = c.digest_show("hour", hour.label).node
        return node is not None and node.state == "COMPLETE"
    wait_for(built, 20, what="the periodic pass")


def test_a_late_exec_appends_a_version_and_keeps_the_old_one(dd: DaemonProc) -> None:
    dd.start()
    c = dd.client()
    run_three(c)
    advance(dd, 2 * DAY)
    c.digest_build()
    x = c.exec_start(["true"])  # ends "two days ago" by the daemon's clock: late
    late = c.exec_wait(x.id, timeout=20).ended_at
    assert late is not None
    day = periods.of("day", late, UTC)
    before = c.digest_show("day", day.label).node
    c.digest_build()
    tree = c.digest_show("day", day.label, versions=True)
    assert tree.node is not None and tree.node.state == "COMPLETE"
    expected = 1 if before is None else before.version + 1
    assert tree.node.version == expected
    assert tree.versions is not None and [v.version for v in tree.versions] == \
        list(range(1, expected + 1))
    if before is not None:  # the old version is kept as it was
        assert tree.versions[0].summary == before.summary
        assert tree.node.summary is not None and before.summary is not None
        assert tree.node.summary.runs == before.summary.runs + 1


def test_a_pass_killed_after_a_node_resumes_without_building_it_twice(dd: DaemonProc) -> None:
    dd.start()
    c = dd.client()
    run_three(c)
    c.close()
    dd.term()
    advance(dd, 40 * DAY)  # hour, day, week and month all closed
    dd.start(env={"TETHER_FAULT": "digest.after_node"})
    with pytest.raises((OSError, RpcFailed, ValueError, KeyError)):
        raw_call(dd.socket, "digest.build", timeout=20)
    assert dd.proc is not None and dd.proc.wait(10) == -9
    dd.start()
    c = dd.client()
    c.digest_build()
    evs = digest_events(c)
    built = Counter(e["node"] for e in evs if e["state"] == "COMPLETE")
    levels = {n.split(":")[0] for n in built}
    assert levels == {"hour", "day", "week", "month"}
    assert all(n == 1 for n in built.values()), built  # none built twice
    restarted = max(e.gseq for e in c.events_list(since=0, limit=1000).events
                    if e.type == "daemon.started")
    assert any(e["gseq"] < restarted for e in evs), "one node was built before the kill"


def test_summarizer_prose_failure_then_retry_and_a_kill_mid_build(dd: DaemonProc,
                                                                  tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    run_three(c)
    advance(dd, 2 * DAY)
    failed = c.digest_build(summarizer="sh -c 'cat >/dev/null; echo no model >&2; exit 4'")
    assert failed.failed >= 1 and failed.built == 0
    node = c.digest_recent("hour", 1)[0]
    assert node.state == "FAILED" and node.error is not None and "exited 4: no model" in \
        node.error
    # The figures are there even though the prose failed.
    assert node.summary is not None and node.summary.runs >= 1

    marker = tmp_path / "started"
    slow = f"sh -c 'cat >/dev/null; touch {marker}; sleep 30'"

    def build_until_killed() -> None:
        with contextlib.suppress(OSError):  # the daemon dies under it
            raw_call(dd.socket, "digest.build", {"summarizer": slow}, timeout=60)

    t = threading.Thread(target=build_until_killed, daemon=True)
    t.start()
    wait_for(marker.exists, 20, what="the summarizer to start")
    assert c.digest_recent("hour", 1)[0].state == "BUILDING"
    dd.kill9()
    t.join(10)
    subprocess.run(["pkill", "-f", str(marker)], check=False)  # its summarizer lives on
    dd.start()
    c = dd.client()
    prose = "sh -c 'python3 -c \"import json,sys; d=json.load(sys.stdin); " \
            "print(\\\"prose:\\\", d[\\\"summary\\\"][\\\"runs\\\"])\"'"
    done = c.digest_build(summarizer=prose)
    assert done.failed == 0
    node = c.digest_recent("hour", 1)[0]
    assert node.state == "COMPLETE" and node.version == 1
    assert node.summary is not None and node.summary.text == f"prose: {node.summary.runs}"
    assert node.summarizer == prose


def test_one_agents_story_and_bad_periods(dd: DaemonProc, tmp_path: Path) -> None:
    dd.start()
    c = dd.client()
    creds, go = tmp_path / "creds", tmp_path / "go"
    script = (f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > {creds}.tmp; '
              f"mv {creds}.tmp {creds}; while [ ! -e {go} ]; do sleep 0.05; done")
    lin = c.agent_start(["sh", "-c", script], provider="generic", name="storyteller",
                        sandbox="default")
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    c.agent_turn(session, token, context_pct=42.0, usage={"input_tokens": 1200})
    go.touch()
    wait_for(lambda: c.lineage_get(lin.id).status == "FINISHED", 20, what="the agent to end")
    story = c.digest_lineage(lin.id)
    assert [a.id for a in story.attempts] == [lin.exec]
    turns = [e for e in story.events if e.type == "agent.turn"]
    assert turns and turns[0].data["usage"] == {"input_tokens": 1200}
    r = dd.cli("digest", "--lineage", "storyteller")
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert "attempt 1" in text and "turn 1  context 42%  1200 tokens" in text

    advance(dd, 2 * DAY)
    c.digest_build()
    hour = c.digest_recent("hour", 1)[0]
    assert hour.summary is not None and hour.summary.turns == 1
    assert hour.summary.tokens == {"input_tokens": 1200}
    assert hour.summary.context_peak_pct == 42.0

    with pytest.raises(Exception, match="write it like 2026-11-23"):
        c.digest_show("day", "2026-13-01")
    r = dd.cli("digest", "--week", "2026-W60")
    assert r.returncode == 1 and b"write it like 2026-W47" in r.stderr
    r = dd.cli("digest", "--summarizer", "x")
    assert r.returncode == 2 and b"--summarizer needs --build" in r.stderr
    assert c.health().status == "SERVING"
