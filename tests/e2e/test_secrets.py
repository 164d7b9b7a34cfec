"""Secrets (issue 11 #3): env values and agent tokens stay out of tether.db, every file
of the home and every reply and event, through the real daemon; a token speaks only for
its own lineage and attempt; the exec and a revived agent still get their env, also
across a real SIGKILL of the daemon."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness import SCRIPTED_AGENT, DaemonProc, wait_for
from tests.rawrpc import RawConn
from tether.client.blocking import Client
from tether.client.errors import TetherError

FAST = {"TETHER_AGENT_TICK": "0.2"}


def files_holding(home: Path, secret: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Every regular file under the home (tether.db, its WAL, logs, run/, agents/ …)
    whose bytes contain ``secret``: what any process of the user could read."""
    found = []
    for root, _dirs, names in os.walk(home):
        for n in names:
            p = Path(root, n)
            if p.is_file() and not p.is_symlink() and n not in skip \
                    and secret.encode() in p.read_bytes():
                found.append(str(p.relative_to(home)))
    return found


def raw_replies(d: DaemonProc, exec_ids: list[str]) -> str:
    """exec.list, exec.get, events.list, lineage.list/get and `ps --json`, as sent."""
    out = []
    with RawConn(d.socket) as r:
        out.append(r.call("exec.list", {"all": True}))
        out += [r.call("exec.get", {"exec": x}) for x in exec_ids]
        out.append(r.call("events.list", {"since": 0, "limit": 10000}))
        lins = r.call("lineage.list", {"all": True})
        out.append(lins)
        out += [r.call("lineage.get", {"lineage": x["id"]})
                for x in lins["result"]["lineages"]]
    ps = d.cli("ps", "--json", "-a")
    assert ps.returncode == 0, ps.stderr
    return json.dumps(out) + ps.stdout.decode()


def stdout_of(c: Client, exec_id: str) -> str:
    return b"".join(c.read_logs(exec_id)).decode(errors="replace")


def test_an_exec_env_value_is_kept_by_the_exec_alone_across_a_daemon_sigkill(
        daemon: DaemonProc, tmp_path: Path) -> None:
    secret = "sk-" + uuid.uuid4().hex
    go = tmp_path / "go"
    c = daemon.client()
    x = c.exec_start(["sh", "-c", 'echo "k=$API_KEY"; while [ ! -e "$GO" ]; do sleep 0.05; '
                      'done; echo "again=$API_KEY"'],
                     env={"API_KEY": secret, "GO": str(go), "PATH": os.environ["PATH"]})
    wait_for(lambda: f"k={secret}" in stdout_of(c, x.id), what="the exec saw its env")
    with RawConn(daemon.socket) as r:
        spec = r.result("exec.get", {"exec": x.id})["spec"]
    assert spec["env"] == {"API_KEY": "", "GO": "", "PATH": ""}  # the names, no values
    replies = raw_replies(daemon, [x.id])
    assert x.id in replies and secret not in replies
    assert files_holding(daemon.home, secret, skip=(f"{x.id}.stdout.log",)) == []

    daemon.kill9()  # the monitor keeps the env in memory; nothing to re-read
    daemon.start()
    c = daemon.client()
    assert c.exec_get(x.id).state == "RUNNING"  # re-adopted
    go.touch()
    done = c.exec_wait(x.id, timeout=20)
    assert done.state == "FINISHED" and done.exit_code == 0
    assert f"again={secret}" in stdout_of(c, x.id)
    assert secret not in raw_replies(daemon, [x.id])
    assert files_holding(daemon.home, secret, skip=(f"{x.id}.stdout.log",)) == []


def start_agent(d: DaemonProc, tmp: Path, secret: str, *args: str) -> dict[str, Any]:
    """agent.start over the raw socket: its reply, as sent, is checked too."""
    tmp.mkdir(exist_ok=True)
    with RawConn(d.socket, timeout=30) as r:
        reply = r.call("agent.start", {
            "argv": [sys.executable, str(SCRIPTED_AGENT), "--log", str(tmp / "agent.log"),
                     "--show-env", "TETHER_TOKEN", "--show-env", "AGENT_SECRET", *args],
            "provider": "generic", "revival": "revive", "request_key": uuid.uuid4().hex,
            "env": {"PATH": os.environ["PATH"], "AGENT_SECRET": secret}})
    assert "result" in reply, reply
    return reply


def starts(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "agent.log"
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [x for x in lines if x["event"] == "start"]


def refused(call: Any) -> str:
    with pytest.raises(TetherError) as e:
        call()
    return e.value.code


def test_tokens_are_in_no_reply_or_file_and_speak_only_for_their_own_lineage(
        daemon: DaemonProc, tmp_path: Path) -> None:
    secret = "cfg-" + uuid.uuid4().hex
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_reply = start_agent(daemon, a_dir, secret, "--pcts", "10", "--linger", "60")
    b_reply = start_agent(daemon, b_dir, secret, "--pcts", "10", "--linger", "60")
    a, b = a_reply["result"], b_reply["result"]
    wait_for(lambda: starts(a_dir) and starts(b_dir), what="both agents started")
    tok_a, tok_b = (starts(p)[0]["env"]["TETHER_TOKEN"] for p in (a_dir, b_dir))
    assert starts(a_dir)[0]["env"]["AGENT_SECRET"] == secret
    assert tok_a and tok_b and tok_a != tok_b

    sent = json.dumps([a_reply, b_reply]) + raw_replies(daemon, [a["exec"], b["exec"]])
    for value in (tok_a, tok_b, secret):
        assert value not in sent
    for tok in (tok_a, tok_b):  # tether.db and its WAL included
        assert files_holding(daemon.home, tok) == []

    c = daemon.client()
    assert c.agent_heartbeat(a["id"], tok_a) is not None  # its own: accepted
    assert refused(lambda: c.agent_handoff(b["id"], tok_a, "forged")) == "BAD_TOKEN"
    assert refused(lambda: c.agent_turn(b["id"], tok_a, context_pct=99)) == "BAD_TOKEN"
    assert refused(lambda: c.agent_heartbeat(b["id"], tok_a)) == "BAD_TOKEN"
    assert c.lineage_get(b["id"]).lifecycle == "HEALTHY"  # the forged turn changed nothing

    # A revival gets a new token: the dead attempt's no longer speaks for the lineage.
    os.kill(daemon.handles(a["exec"])["child"]["pid"], signal.SIGKILL)
    wait_for(lambda: len(starts(a_dir)) == 2, timeout=30, what="attempt 2 started")
    second = starts(a_dir)[1]
    assert second["attempt"] == "2" and second["env"]["AGENT_SECRET"] == secret
    assert second["env"]["TETHER_TOKEN"] not in (tok_a, tok_b)
    assert refused(lambda: c.agent_heartbeat(a["id"], tok_a)) == "BAD_TOKEN"
    assert c.agent_heartbeat(a["id"], second["env"]["TETHER_TOKEN"]) is not None


def test_a_revival_interrupted_by_a_daemon_sigkill_gets_its_env_and_a_working_token(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    d = stopped_daemon
    secret = "cfg-" + uuid.uuid4().hex
    d.start(env={**FAST, "TETHER_FAULT": "agent.after_attempt_commit"})
    lin = start_agent(d, tmp_path, secret, "--pcts", "10", "--linger", "60")["result"]
    wait_for(lambda: starts(tmp_path), what="attempt 1 started")
    first = starts(tmp_path)[0]["env"]["TETHER_TOKEN"]
    os.kill(d.handles(lin["exec"])["child"]["pid"], signal.SIGKILL)
    assert d.proc is not None
    d.proc.wait(20)  # the revival committed attempt 2, then the daemon SIGKILLed itself
    assert d.proc.returncode == -signal.SIGKILL
    d.start(env=FAST)
    c = d.client()
    wait_for(lambda: len(starts(tmp_path)) == 2, timeout=30, what="attempt 2 started")
    second = starts(tmp_path)[1]
    assert second["attempt"] == "2" and second["env"]["AGENT_SECRET"] == secret
    token = second["env"]["TETHER_TOKEN"]
    assert token and token != first
    assert c.agent_heartbeat(lin["id"], token) is not None
    assert refused(lambda: c.agent_heartbeat(lin["id"], first)) == "BAD_TOKEN"
    assert files_holding(d.home, token) == [] and files_holding(d.home, first) == []
    assert token not in raw_replies(d, [lin["exec"]])
