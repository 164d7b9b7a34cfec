"""Webhooks across real SIGKILLs of the daemon, and ``agent.waiting`` reaching a hook.

At-least-once: every matching event reaches the receiver, a duplicate only ever with
the key (and body) of the first, and none is lost.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from tests.harness import FIXTURES, REPO, DaemonProc, wait_for
from tests.receiver import Receiver
from tether.client.blocking import Client

FAST = {"TETHER_AGENT_TICK": "0.2"}


def finished_keys(c: Client, hook: str) -> dict[str, str]:
    """exec id -> the delivery key its FINISHED event must arrive with."""
    out = {}
    cursor = 0
    while True:
        page = c.events_list(since=cursor, limit=1000)
        for e in page.events:
            if e.type == "exec.state" and e.state == "FINISHED" and e.exec:
                out[e.exec] = f"{e.gseq}-{hook}"
        if len(page.events) < 1000:
            return out
        cursor = page.next


def assert_at_least_once(rx: Receiver, want: dict[str, str]) -> None:
    by_key: dict[str, bytes] = {}
    for r in rx.received:
        assert by_key.setdefault(r.key, r.body) == r.body  # a duplicate is the same delivery
        assert want[r.json()["exec"]["id"]] == r.key
    assert set(by_key) == set(want.values())  # none lost


def test_deliveries_in_flight_survive_a_kill9(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start()
    c = d.client()
    with Receiver() as rx:
        c.hook_add("ci", ["exec.finished"], url=rx.url)
        rx.hold()  # the receiver takes the requests and does not answer yet
        ids = [c.exec_start(["true"]).id for _ in range(12)]
        for x in ids:
            c.exec_wait(x, timeout=30)
        wait_for(lambda: rx.held >= 1, what="a delivery in flight")
        d.kill9()
        rx.release()  # the receiver processes what it got: the daemon never hears of it
        wait_for(lambda: rx.held == 0, what="held requests answered")
        before = len(rx.received)
        d.start()
        c = d.client()
        want = finished_keys(c, "ci")
        assert set(want) == set(ids)
        wait_for(lambda: c.hook_show("ci").counts == {"COMPLETED": 12}, 30, what="all delivered")
        assert before >= 1 and len(rx.received) > len(set(rx.keys()))  # a duplicate
        assert_at_least_once(rx, want)
        recovered = [e for e in c.events_list(limit=1000).events if e.type == "daemon.recovered"]
        assert recovered[-1].data["deliveries_requeued"] >= 1


def test_kills_at_random_points_lose_no_delivery(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start()
    rng = random.Random(12)
    with Receiver() as rx:
        d.client().hook_add("ci", ["exec.finished"], url=rx.url)
        ids: list[str] = []
        for _ in range(3):
            c = d.client()
            ids += [c.exec_start(["sh", "-c", f"sleep 0.{rng.randint(0, 3)}"]).id
                    for _ in range(8)]
            time.sleep(rng.uniform(0.0, 0.6))
            d.kill9()
            d.start()
        c = d.client()
        for x in ids:
            c.exec_wait(x, timeout=30)
        wait_for(lambda: c.hook_show("ci").counts == {"COMPLETED": len(ids)}, 30,
                 what="all delivered")
        want = finished_keys(c, "ci")
        assert set(want) == set(ids)
        assert_at_least_once(rx, want)


def test_agent_waiting_from_a_claude_notification_reaches_a_hook(
        stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start(env=FAST)
    c = d.client()
    payload = FIXTURES / "claude" / "Notification.json"
    with Receiver() as rx:
        c.hook_add("pager", ["agent.waiting"], url=rx.url)
        script = (f'"{sys.executable}" -m tether.agent.hook claude Notification < "{payload}"'
                  "; sleep 30")
        lin = c.agent_start(["sh", "-c", script], provider="generic", name="helper",
                            cwd=str(REPO), env={"PYTHONPATH": str(REPO / "src")})
        wait_for(lambda: rx.received, 20, what="agent.waiting delivered")
        body = rx.received[0].json()
        ev = body["event"]
        assert ev["type"] == "agent.waiting" and ev["state"] == "notification"
        assert ev["data"]["message"] == "Claude is waiting for your input"
        assert ev["data"]["notification"] == "idle_prompt"
        assert body["lineage"]["id"] == lin.id and body["lineage"]["name"] == "helper"
        c.exec_cancel(lin.exec or "", grace=0.5)


def test_agent_waiting_when_an_ask_revival_is_pending(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start(env=FAST)
    c = d.client()
    with Receiver() as rx:
        c.hook_add("pager", ["agent.waiting"], url=rx.url)
        lin = c.agent_start(["sh", "-c", "exit 1"], provider="generic", revival="ask")
        wait_for(lambda: rx.received, 20, what="agent.waiting delivered")
        ev = rx.received[0].json()["event"]
        assert ev["state"] == "ask" and f"tether lineage resolve {lin.id}" in ev["reason"]
        assert c.lineage_get(lin.id).status == "ASK_PENDING"


def test_home_hooks_dir_is_private(stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    d = stopped_daemon
    d.start()
    secret = tmp_path / "s"
    secret.write_text("k")
    d.client().hook_add("x", ["exec.*"], url="http://127.0.0.1:9/", secret_file=str(secret))
    assert (d.home / "hooks").stat().st_mode & 0o077 == 0
