"""The event journal through the real daemon: sequence numbers, events.list,
events.subscribe (backlog, live, resume, overflow), ``tether events --json``, and
continuity across a real SIGKILL of the daemon."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.harness import DaemonProc, RawConn, wait_for
from tether.model.records import Event

# ---------------------------------------------------------------------- helpers


class Conn(RawConn):
    """RawConn that answers calls and keeps notifications that arrive in between."""

    def __init__(self, path: Path, timeout: float = 10.0, rcvbuf: int | None = None) -> None:
        super().__init__(path, timeout)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.notes: list[dict[str, Any]] = []
        self._n = 0

    def send_call(self, method: str, params: Any = None) -> str:
        self._n += 1
        rid = f"c{self._n}"
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_obj(msg)
        return rid

    def reply(self, rid: str) -> dict[str, Any]:
        while True:
            msg = self.recv_obj()
            if "id" not in msg:
                self.notes.append(msg)
                continue
            assert msg["id"] == rid, msg
            return msg  # type: ignore[no-any-return]

    def call(self, method: str, params: Any = None) -> Any:
        msg = self.reply(self.send_call(method, params))
        assert "result" in msg, msg
        return msg["result"]

    def note(self) -> dict[str, Any]:
        """The next notification (queued first, then from the socket)."""
        if self.notes:
            return self.notes.pop(0)
        msg = self.recv_obj()
        assert "id" not in msg, f"unexpected response {msg}"
        return msg  # type: ignore[no-any-return]


def list_events(c: Conn, since: int = 0, sandbox: str | None = None,
                limit: int = 1000) -> list[dict[str, Any]]:
    """Every event after ``since``, paging through events.list with its ``next`` cursor."""
    out: list[dict[str, Any]] = []
    cursor = since
    while True:
        params: dict[str, Any] = {"since": cursor, "limit": limit}
        if sandbox is not None:
            params["sandbox"] = sandbox
        page = c.call("events.list", params)
        out += page["events"]
        if not page["events"]:
            assert page["next"] == cursor
            return out
        key = "seq" if sandbox is not None else "gseq"
        assert page["next"] == page["events"][-1][key]
        cursor = page["next"]


def check_journal(events: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    """gseq strictly increasing; each stream's seq is exactly 1..n. Returns the streams."""
    gseqs = [e["gseq"] for e in events]
    assert all(a < b for a, b in itertools.pairwise(gseqs)), gseqs
    streams: dict[str | None, list[dict[str, Any]]] = {}
    for e in events:
        streams.setdefault(e.get("sandbox"), []).append(e)
    for sb, evs in streams.items():
        seqs = [e["seq"] for e in evs]
        assert seqs == list(range(1, len(seqs) + 1)), f"stream {sb!r}: seq {seqs}"
    return streams


class Subscriber:
    """One events.subscribe on its own connection."""

    def __init__(self, path: Path, since: int = 0, sandbox: str | None = None,
                 rcvbuf: int | None = None, wait_reply: bool = True) -> None:
        self.conn = Conn(path, rcvbuf=rcvbuf)
        params: dict[str, Any] = {"since": since}
        if sandbox is not None:
            params["sandbox"] = sandbox
        self.rid = self.conn.send_call("events.subscribe", params)
        self.id: str | None = None
        if wait_reply:
            self.id = self._reply()["subscription"]

    def _reply(self) -> Any:
        msg = self.conn.reply(self.rid)
        assert "result" in msg, msg
        assert msg["result"]["subscription"]
        return msg["result"]

    def next_msg(self) -> dict[str, Any]:
        """The next notification; the subscribe reply is consumed when it shows up."""
        while True:
            if self.conn.notes:
                return self.conn.notes.pop(0)
            msg = self.conn.recv_obj()
            if msg.get("id") == self.rid:
                assert "result" in msg, msg
                self.id = msg["result"]["subscription"]
                continue
            assert "id" not in msg, msg
            return msg  # type: ignore[no-any-return]

    def event(self) -> dict[str, Any]:
        msg = self.next_msg()
        assert msg["jsonrpc"] == "2.0"
        assert msg["method"] == "events.event", msg
        assert set(msg["params"]) >= {"subscription", "event"}
        assert self.id is None or msg["params"]["subscription"] == self.id
        ev = msg["params"]["event"]
        assert isinstance(ev, dict)
        return ev  # type: ignore[no-any-return]

    def events_until(self, pred: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            ev = self.event()
            out.append(ev)
            if pred(ev):
                return out

    def quiet(self, seconds: float = 0.3) -> bool:
        """True if nothing more arrives within ``seconds``."""
        if self.conn.notes:
            return False
        self.conn.sock.settimeout(seconds)
        try:
            self.conn.recv_line()
        except TimeoutError:
            return True
        finally:
            self.conn.sock.settimeout(10.0)
        return False

    def close(self) -> None:
        self.conn.close()


def exec_run(c: Conn, argv: list[str], sandbox: str = "default",
             name: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"argv": argv, "sandbox": sandbox}
    if name:
        params["name"] = name
    x = c.call("exec.start", params)
    done = c.call("exec.wait", {"exec": x["id"], "timeout": 15})
    assert done["state"] in ("FINISHED", "FAILED", "CANCELLED"), done
    return done  # type: ignore[no-any-return]


def make_sandboxes(c: Conn, prefix: str, n: int, batch: int = 100) -> None:
    """n sandbox.create calls (2 events each), sent as batches."""
    for start in range(0, n, batch):
        msgs = [{"jsonrpc": "2.0", "id": i, "method": "sandbox.create",
                 "params": {"name": f"{prefix}{i}"}} for i in range(start, min(n, start + batch))]
        c.send_obj(msgs)
        replies = c.recv_obj()
        assert isinstance(replies, list) and all("result" in r for r in replies), replies[:3]


@pytest.fixture
def conn(daemon: DaemonProc) -> Iterator[Conn]:
    c = Conn(daemon.socket)
    yield c
    c.close()


# ---------------------------------------------------------------------- sequence numbers
def _varied_history(c: Conn) -> dict[str, Any]:
    """Sandbox and exec state changes of every kind, in two sandboxes and the default."""
    a = c.call("sandbox.create", {"name": "alpha"})
    b = c.call("sandbox.create", {"name": "beta"})
    fin = exec_run(c, ["sh", "-c", "exit 3"], sandbox="alpha")
    exec_run(c, ["true"], sandbox="beta")
    exec_run(c, ["true"])
    long = c.call("exec.start", {"argv": ["sleep", "30"], "sandbox": "beta"})
    c.call("exec.cancel", {"exec": long["id"], "signal": "KILL", "grace": 0})
    c.call("exec.wait", {"exec": long["id"], "timeout": 10})
    rid = c.send_call("exec.start", {"argv": ["/no/such/cmd-xyz"], "sandbox": "alpha"})
    failed = c.reply(rid)["error"]["data"]["exec"]
    c.call("sandbox.stop", {"sandbox": "beta"})
    c.call("sandbox.start", {"sandbox": "beta"})
    exec_run(c, ["true"], sandbox="beta")
    c.call("sandbox.delete", {"sandbox": "alpha"})
    return {"alpha": a["id"], "beta": b["id"], "finished": fin["id"], "cancelled": long["id"],
            "failed": failed}


def test_seq_per_sandbox_from_one_without_gap_or_duplicate(conn: Conn) -> None:
    ids = _varied_history(conn)
    events = list_events(conn)
    streams = check_journal(events)
    assert set(streams) == {None, "default", ids["alpha"], ids["beta"]}
    # Every kind of state change is journaled, in the stream of its sandbox.
    alpha = [(e["type"], e.get("exec"), e.get("state")) for e in streams[ids["alpha"]]]
    assert alpha[:2] == [("sandbox.state", None, "PENDING"), ("sandbox.state", None, "READY")]
    assert alpha[-2:] == [("sandbox.state", None, "DELETING"), ("sandbox.state", None, "DELETED")]
    assert [s for t, x, s in alpha if x == ids["finished"]] == ["PENDING", "RUNNING", "FINISHED"]
    assert [s for t, x, s in alpha if x == ids["failed"]] == ["PENDING", "FAILED"]
    beta = [(e["type"], e.get("exec"), e.get("state")) for e in streams[ids["beta"]]]
    assert [s for t, x, s in beta if x == ids["cancelled"]] == ["PENDING", "RUNNING", "CANCELLED"]
    assert [s for t, x, s in beta if t == "sandbox.state"] == [
        "PENDING", "READY", "STOPPED", "READY"]
    daemon_types = [e["type"] for e in streams[None]]
    assert "daemon.started" in daemon_types and "daemon.recovered" in daemon_types
    finished = next(e for e in events if e.get("exec") == ids["finished"]
                    and e.get("state") == "FINISHED")
    assert finished["data"]["exit_code"] == 3
    now = time.time()
    for e in events:
        assert isinstance(e["time"], float) and now - 120 < e["time"] <= now + 1, e
        assert isinstance(e["type"], str) and e["type"]


def test_every_event_says_why(conn: Conn) -> None:
    _varied_history(conn)
    missing = [e for e in list_events(conn) if not e.get("reason")]
    assert not missing, f"{len(missing)} events without a reason, e.g. {missing[:3]}"


def test_events_list_since_global_and_per_sandbox(conn: Conn) -> None:
    ids = _varied_history(conn)
    everything = list_events(conn)
    # Global cursor: exactly the events after it, in order; pages of any size agree.
    for since in (0, 1, 5, everything[len(everything) // 2]["gseq"], everything[-1]["gseq"]):
        assert list_events(conn, since=since) == [e for e in everything if e["gseq"] > since]
    assert list_events(conn, limit=3) == everything
    page = conn.call("events.list", {"since": 0, "limit": 4})
    assert page["events"] == everything[:4] and page["next"] == everything[3]["gseq"]
    # Per-sandbox cursor is that sandbox's seq; by name or by id alike.
    beta = [e for e in everything if e.get("sandbox") == ids["beta"]]
    assert list_events(conn, sandbox="beta") == beta
    assert list_events(conn, sandbox=ids["beta"]) == beta
    assert list_events(conn, sandbox="beta", limit=2) == beta
    for since in (0, 1, 4, len(beta)):
        assert list_events(conn, sandbox="beta", since=since) == beta[since:]
    page = conn.call("events.list", {"sandbox": "beta", "since": 2, "limit": 2})
    assert [e["seq"] for e in page["events"]] == [3, 4] and page["next"] == 4
    # Past the end: empty, and the cursor stays put.
    end = conn.call("events.list", {"since": everything[-1]["gseq"] + 100})
    assert end == {"events": [], "next": everything[-1]["gseq"] + 100, "epoch": page["epoch"]}


# ---------------------------------------------------------------------- subscribe
def test_subscribe_delivers_backlog_then_live(daemon: DaemonProc, conn: Conn) -> None:
    conn.call("sandbox.create", {"name": "before"})
    backlog = list_events(conn)
    sub = Subscriber(daemon.socket, since=0)
    try:
        got = [sub.event() for _ in backlog]
        assert got == backlog
        # Live: made on another connection after the backlog was delivered.
        x = conn.call("exec.start", {"argv": ["sh", "-c", "exit 5"], "sandbox": "before"})
        live = sub.events_until(lambda e: e.get("exec") == x["id"] and e.get("state") in
                                ("FINISHED", "FAILED"))
        assert [(e.get("exec"), e.get("state")) for e in live] == [
            (x["id"], "PENDING"), (x["id"], "RUNNING"), (x["id"], "FINISHED")]
        assert live[-1]["data"]["exit_code"] == 5
        conn.call("sandbox.create", {"name": "after"})
        live += sub.events_until(lambda e: e.get("state") == "READY")
        # Exactly the journal, each event once, identical to what events.list says.
        assert backlog + live == list_events(conn)
        check_journal(backlog + live)
        assert sub.quiet()
    finally:
        sub.close()


def test_subscribe_notification_shape(daemon: DaemonProc, conn: Conn) -> None:
    sub = Subscriber(daemon.socket, since=0)
    try:
        msg = sub.next_msg()
        assert set(msg) == {"jsonrpc", "method", "params"}, msg  # a notification: no id
        assert msg["jsonrpc"] == "2.0" and msg["method"] == "events.event"
        assert msg["params"]["subscription"] == sub.id
        ev = msg["params"]["event"]
        assert {"gseq", "seq", "type", "time"} <= set(ev)
        assert ev == list_events(conn)[0]
    finally:
        sub.close()


def test_subscribe_per_sandbox_uses_its_seq(daemon: DaemonProc, conn: Conn) -> None:
    sb = conn.call("sandbox.create", {"name": "solo"})
    conn.call("sandbox.create", {"name": "other"})
    exec_run(conn, ["true"], sandbox="solo")
    exec_run(conn, ["true"], sandbox="other")
    mine = list_events(conn, sandbox="solo")
    assert [e["seq"] for e in mine] == [1, 2, 3, 4, 5]
    sub = Subscriber(daemon.socket, since=2, sandbox="solo")
    try:
        got = [sub.event() for _ in mine[2:]]
        assert got == mine[2:]
        exec_run(conn, ["true"], sandbox="other")  # not ours: never delivered
        conn.call("sandbox.stop", {"sandbox": "solo"})
        ev = sub.event()
        assert (ev["sandbox"], ev["seq"], ev["state"]) == (sb["id"], 6, "STOPPED")
        assert sub.quiet()
    finally:
        sub.close()


def test_resume_from_last_seen_sees_each_event_once(daemon: DaemonProc, conn: Conn) -> None:
    """A subscriber that keeps disconnecting while events are being made loses none."""
    stop = threading.Event()
    errors: list[BaseException] = []
    end: dict[str, str] = {}

    def produce() -> None:
        try:
            with Conn(daemon.socket) as p:
                i = 0
                while not stop.is_set():
                    make_sandboxes(p, f"r{i}-", 10, batch=10)
                    i += 1
                end["id"] = p.call("sandbox.create", {"name": "the-end"})["id"]
        except BaseException as e:  # surfaced below
            errors.append(e)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    seen: list[dict[str, Any]] = []
    last = 0
    try:
        for round_ in range(8):
            sub = Subscriber(daemon.socket, since=last)
            try:
                for _ in range(37 + round_):
                    ev = sub.event()
                    seen.append(ev)
                    last = ev["gseq"]
            finally:
                sub.close()  # gone mid-stream, with events still coming
    finally:
        stop.set()
        producer.join(20)
    assert not errors, errors
    sub = Subscriber(daemon.socket, since=last)
    try:
        seen += sub.events_until(lambda e: e.get("state") == "READY"
                                 and e.get("sandbox") == end["id"])
    finally:
        sub.close()
    everything = list_events(conn)
    assert [e["gseq"] for e in seen] == [e["gseq"] for e in everything]
    assert seen == everything


def test_unsubscribe(daemon: DaemonProc, conn: Conn) -> None:
    sub = Subscriber(daemon.socket, since=0)
    try:
        backlog = list_events(conn)
        assert [sub.event() for _ in backlog] == backlog
        other = Conn(daemon.socket)
        try:
            # Another connection cannot cancel it; an unknown id is a plain False.
            assert other.call("events.unsubscribe", {"subscription": sub.id}) == {"ok": False}
            assert other.call("events.unsubscribe", {"subscription": "sub-999999"}) == {
                "ok": False}
        finally:
            other.close()
        assert sub.conn.call("events.unsubscribe", {"subscription": sub.id}) == {"ok": True}
        assert sub.conn.call("events.unsubscribe", {"subscription": sub.id}) == {"ok": False}
        conn.call("sandbox.create", {"name": "unseen"})
        assert sub.quiet(), "events kept coming after events.unsubscribe"
        assert sub.conn.call("daemon.health")["status"] == "SERVING"  # connection still fine
    finally:
        sub.close()


def test_slow_subscriber_overflows_and_resumes_without_loss(
        stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_SUBSCRIBER_QUEUE": "16"})
    with Conn(d.socket) as c:
        slow = Subscriber(d.socket, since=0, rcvbuf=4096, wait_reply=False)
        try:
            wait_for(lambda: c.call("daemon.status")["counts"]["subscriptions"] == 1,
                     what="the subscription to exist")
            # ~3,000 events while the subscriber reads nothing.
            make_sandboxes(c, "flood", 1000, batch=50)
            for i in range(0, 1000, 2):
                c.send_obj([{"jsonrpc": "2.0", "id": 1, "method": "sandbox.stop",
                             "params": {"sandbox": f"flood{i}"}},
                            {"jsonrpc": "2.0", "id": 2, "method": "sandbox.stop",
                             "params": {"sandbox": f"flood{i + 1}"}}])
                assert all("result" in r for r in c.recv_obj())
            total = list_events(c)
            assert len(total) > 2500

            got: list[dict[str, Any]] = []
            while True:
                msg = slow.next_msg()
                if msg["method"] == "events.overflow":
                    break
                assert msg["method"] == "events.event", msg
                got.append(msg["params"]["event"])
            p = msg["params"]
            assert p["subscription"] == slow.id
            last = p["last"]
            assert isinstance(last, int)
            assert isinstance(p.get("message"), str) and f"since={last}" in p["message"]
            # Everything delivered before the overflow is the journal's prefix up to "last".
            assert got == [e for e in total if e["gseq"] <= last]
            assert len(got) < len(total), "no overflow happened"
            # Dropped: no more events on it, and the daemon forgot it.
            wait_for(lambda: c.call("daemon.status")["counts"]["subscriptions"] == 0,
                     what="the overflowed subscription to be dropped")
            c.call("sandbox.create", {"name": "after-overflow"})
            assert slow.quiet()
        finally:
            slow.close()

        # Resume from "last": every remaining event, once.
        again = Subscriber(d.socket, since=last)
        try:
            final = list_events(c)
            rest = [again.event() for _ in range(len(final) - len(got))]
        finally:
            again.close()
        assert got + rest == final
        check_journal(got + rest)


# ---------------------------------------------------------------------- CLI
def _cli_events(daemon: DaemonProc, *args: str) -> list[dict[str, Any]]:
    r = daemon.cli("events", "--json", *args)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert all(ln.strip() for ln in lines)
    return [json.loads(ln) for ln in lines]


def test_cli_events_json(daemon: DaemonProc, conn: Conn) -> None:
    ids = _varied_history(conn)
    api = list_events(conn)
    out = _cli_events(daemon)
    assert len(out) == len(api)
    for ev, ref in zip(out, api, strict=True):
        assert isinstance(ev, dict)
        assert {"seq", "type", "time"} <= set(ev), ev
        assert ev["seq"] == ref["seq"] and ev["type"] == ref["type"]
        assert ev["time"] == pytest.approx(ref["time"])
        assert ev.get("sandbox") == ref.get("sandbox")
        assert ev.get("state") == ref.get("state")
        if ev["type"].startswith("exec."):
            assert ev["exec"] == ref["exec"] and ev["exec"], ev
            assert ev["state"], ev
    # --since and --sandbox select the same events as the API.
    beta = _cli_events(daemon, "--sandbox", "beta", "--since", "2")
    assert [e["seq"] for e in beta] == [e["seq"] for e in list_events(conn, sandbox="beta",
                                                                      since=2)]
    assert all(e["sandbox"] == ids["beta"] for e in beta)
    mid = api[len(api) // 2]["gseq"]
    assert len(_cli_events(daemon, "--since", str(mid))) == len([e for e in api
                                                                 if e["gseq"] > mid])


def test_cli_events_json_lines_carry_every_documented_field(daemon: DaemonProc,
                                                            conn: Conn) -> None:
    _varied_history(conn)
    for ev in _cli_events(daemon):
        missing = {"seq", "sandbox", "type", "time", "state"} - set(ev)
        assert not missing, f"{ev['type']} line lacks {sorted(missing)}: {ev}"
        if ev["type"].startswith("exec."):
            assert "exec" in ev


# ---------------------------------------------------------------------- SIGKILL
def test_sequences_continue_across_daemon_sigkill(daemon: DaemonProc) -> None:
    with Conn(daemon.socket) as c:
        c.call("sandbox.create", {"name": "kx"})
        exec_run(c, ["true"], sandbox="kx")
        # Running across the kill; it ends while no daemon or the next one runs.
        survivor = c.call("exec.start", {"argv": ["sh", "-c", "sleep 0.5; exit 4"],
                                         "sandbox": "kx"})
        before = list_events(c)

    # Kill the daemon in the middle of a burst of commits.
    stop = threading.Event()
    made = {"n": 0}

    def burst() -> None:
        try:
            with Conn(daemon.socket) as p:
                while not stop.is_set():
                    p.call("sandbox.create", {"name": f"burst{made['n']}"})
                    made["n"] += 1
        except (OSError, ValueError):
            pass  # the daemon died under us

    t = threading.Thread(target=burst, daemon=True)
    t.start()
    wait_for(lambda: made["n"] >= 20, what="the burst under way")
    daemon.kill9()
    stop.set()
    t.join(10)
    daemon.start()

    with Conn(daemon.socket) as c:
        done = c.call("exec.wait", {"exec": survivor["id"], "timeout": 15})
        assert done["state"] == "FINISHED" and done["exit_code"] == 4
        exec_run(c, ["true"], sandbox="kx")
        exec_run(c, ["true"])
        c.call("sandbox.create", {"name": "after-kill"})
        after = list_events(c)
    assert after[: len(before)] == before  # the journal before the kill is intact
    streams = check_journal(after)  # no gap, no duplicate, in every stream
    assert len({e["gseq"] for e in after}) == len(after)
    daemon_types = [e["type"] for e in streams[None]]
    assert daemon_types.count("daemon.started") == 2
    assert daemon_types.count("daemon.recovered") == 2
    ends = [e for e in after if e.get("exec") == survivor["id"]]
    assert [e["state"] for e in ends] == ["PENDING", "RUNNING", "FINISHED"]
    assert sum(1 for e in after if e.get("state") == "PENDING"
               and e["type"] == "sandbox.state") >= made["n"]


def test_client_subscribe_resumes_across_sigkill(daemon: DaemonProc) -> None:
    """tether.Client.subscribe() keeps yielding across a kill -9 and restart, each event once."""
    got: dict[str, list[Event]] = {"all": [], "kz": []}
    errors: list[BaseException] = []

    with Conn(daemon.socket) as c:
        kz = c.call("sandbox.create", {"name": "kz"})["id"]
        exec_run(c, ["true"], sandbox="kz")

    def follow(key: str, sandbox: str | None) -> None:
        client = daemon.client(reconnect=30)
        gen = client.subscribe(since=0, sandbox=sandbox)
        try:
            for ev in gen:
                got[key].append(ev)
                if ev.type == "sandbox.state" and ev.state == "STOPPED" \
                        and ev.sandbox == kz:
                    return
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            gen.close()

    threads = [threading.Thread(target=follow, args=("all", None), daemon=True),
               threading.Thread(target=follow, args=("kz", kz), daemon=True)]
    for t in threads:
        t.start()
    wait_for(lambda: len(got["kz"]) >= 5 and any(e.type == "daemon.started"
                                                  for e in got["all"]),
             what="the followers to catch up")
    with Conn(daemon.socket) as c:
        survivor = c.call("exec.start", {"argv": ["sh", "-c", "sleep 0.3; exit 2"],
                                         "sandbox": "kz"})
    wait_for(lambda: any(e.exec == survivor["id"] and e.state == "RUNNING"
                         for e in got["kz"]), what="the followers to see it running")
    daemon.kill9()
    time.sleep(0.3)  # the followers are now retrying against a dead socket
    daemon.start()
    with Conn(daemon.socket) as c:
        done = c.call("exec.wait", {"exec": survivor["id"], "timeout": 15})
        assert done["exit_code"] == 2
        exec_run(c, ["true"], sandbox="kz")
        c.call("sandbox.stop", {"sandbox": "kz"})
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a follower never saw the last event"
        assert not errors, errors
        everything = list_events(c)
        mine = list_events(c, sandbox="kz")
    assert [e.gseq for e in got["all"]] == [e["gseq"] for e in everything]
    assert msgspec.to_builtins(got["all"]) == everything
    assert msgspec.to_builtins(got["kz"]) == mine
    assert [e.seq for e in got["kz"]] == list(range(1, len(mine) + 1))
    assert [e.type for e in got["all"]].count("daemon.started") == 2
