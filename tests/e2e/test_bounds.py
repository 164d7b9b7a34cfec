"""Resources an agent (or a flood of requests) can exhaust, bounded (issue 22, findings
1 and 2): the store's WAL, each agent's call rate on ``agent.sock``, what a turn may carry
and what a lineage keeps. The attacks run from inside a real bwrap sandbox, as a
``--agent generic`` script speaking to ``agent.sock`` by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc, RawConn, new_home, remove_home, wait_for
from tether.runtime import bwrap

PROBE = bwrap.probe()
needs_bwrap = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")

AUTO = {"TETHER_DEFAULT_RUNTIME": "auto"}  # the default sandbox is bwrap

# A hostile agent: calls one agent.* method as fast as it can on its socket (agent.sock
# inside bwrap), by hand (no SDK retries): N times, then on until told to stop (a file
# "stop"); it says when its first N are done ("drained") and reports what it got.
FLOOD = r'''
import json, os, socket, sys, time
method, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_SOCKET"])
f = s.makefile("rwb")
auth = {"session": os.environ["TETHER_SESSION"], "token": os.environ["TETHER_TOKEN"]}
params = dict(auth)
if method == "agent.turn":
    params.update(context_pct=10, messages=[{"role": "assistant", "content": "x" * size}])
ok, codes, first, n = 0, {}, None, 0
open("flooding", "w").close()
t0 = time.monotonic()
while not os.path.exists("stop") and time.monotonic() - t0 < 60:
    if n == count:
        open("drained", "w").close()
    n += 1
    f.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method,
                        "params": params}).encode() + b"\n")
    f.flush()
    r = json.loads(f.readline())
    if "result" in r:
        ok += 1
    else:
        code = r["error"]["data"]["code"]
        codes[code] = codes.get(code, 0) + 1
        first = first or r["error"]
with open("report.tmp", "w") as out:
    json.dump({"ok": ok, "codes": codes, "first": first, "calls": n,
               "seconds": time.monotonic() - t0, "socket": os.environ["TETHER_SOCKET"]}, out)
os.rename("report.tmp", "report.json")
time.sleep(600)
'''

# A quiet agent beside it: one turn when told to, by hand too.
ONE_TURN = r'''
import json, os, socket, time
while not os.path.exists("go"):
    time.sleep(0.02)
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_SOCKET"])
s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "agent.turn", "params": {
    "session": os.environ["TETHER_SESSION"], "token": os.environ["TETHER_TOKEN"],
    "context_pct": 5}}).encode() + b"\n")
reply = s.makefile("rb").readline()
with open("turn.tmp", "wb") as out:
    out.write(reply)
os.rename("turn.tmp", "turn.json")
time.sleep(600)
'''


@pytest.fixture
def auto_home() -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env=AUTO)
    yield d
    d.cleanup()
    remove_home(d.home)


def agent(d: DaemonProc, work: Path, script: str, *args: str) -> str:
    """Start ``script`` as a generic agent in the default (bwrap) sandbox; its lineage."""
    work.mkdir(exist_ok=True)
    (work / "agent.py").write_text(script)  # not in /tmp: the sandbox's /tmp is its own
    r = subprocess.run([*TETHER, "--home", str(d.home), "run", "--agent", "generic", "-d",
                        "--", sys.executable, "agent.py", *args], cwd=work,
                       capture_output=True, timeout=60, env=d.env)
    assert r.returncode == 0, r.stderr
    lineage = d.client().exec_get(r.stdout.decode().strip()).lineage
    assert lineage is not None
    return lineage


def report(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def events(d: DaemonProc, type_: str) -> list[Any]:
    return [e for e in d.client().events_list(limit=10000).events if e.type == type_]


@needs_bwrap
def test_a_sandboxed_agent_flooding_agent_sock_is_rate_limited_and_journaled_once(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Finding 1: one agent looping over agent.turn made 680 commits a second. Now each
    lineage draws from a bucket (defaults: 200 at once, 20 a second): the rest get
    RATE_LIMITED with a retry_after, one agent.rate_limited event is journaled for the
    whole flood, and another agent's calls are not slowed by it."""
    d = auto_home
    d.start()
    flood, quiet = tmp_path / "flood", tmp_path / "quiet"
    lineage = agent(d, flood, FLOOD, "agent.turn", "800", "100")
    other = agent(d, quiet, ONE_TURN)
    wait_for(lambda: (flood / "drained").exists(), 60, what="800 calls of the flood")
    (quiet / "go").touch()  # mid-flood, its bucket empty: the other lineage's is its own
    reply = json.loads(wait_for(lambda: report(quiet / "turn.json"), 20, what="other turn")
                       and (quiet / "turn.json").read_text())
    (flood / "stop").touch()
    got = wait_for(lambda: report(flood / "report.json"), 30, what="the flood's report")
    assert got["socket"] == str(d.home / "agent" / "agent.sock")
    refused = got["codes"].pop("RATE_LIMITED", 0)
    assert got["codes"] == {}, got
    # 200 at once, then 20 a second for as long as it flooded.
    assert 200 <= got["ok"] <= 200 + 20 * (got["seconds"] + 1), got
    assert got["calls"] > 800, got
    assert refused > 0 and got["first"]["code"] == 1003, got
    data = got["first"]["data"]
    assert (data["limit"], data["burst"], data["session"]) == (20.0, 200.0, lineage)
    assert 0 < data["retry_after"] <= 0.05, data
    assert "refused; retry in" in got["first"]["message"]
    limited = events(d, "agent.rate_limited")
    assert len(limited) == 1, limited
    assert limited[0].data["lineage"] == lineage
    assert limited[0].data["method"] == "agent.turn"
    c = d.client()
    assert c.lineage_get(lineage).turns == got["ok"]  # every refused call left nothing
    assert reply["result"]["turn"] == 1, reply
    assert c.lineage_get(other).turns == 1
    assert c.health().status == "SERVING"


def test_the_wal_is_truncated_once_it_passes_its_limit(tmp_path: Path) -> None:
    """Finding 1: with the automatic checkpoint off and only passive checkpoints, a
    writer faster than the copy kept SQLite from ever restarting the WAL: 1.45 GB after
    a 60 s flood. Now the daemon truncates it once it passes the limit (2 MiB here)."""
    d = DaemonProc(new_home(), env={"TETHER_WAL_LIMIT": "2M", "TETHER_SWEEP_INTERVAL": "60"})
    try:
        d.start()
        c = d.client()
        lin = c.agent_start(["sleep", "600"], provider="generic")
        token = _token(d, lin.exec or "")
        wal = d.home / "tether.db-wal"
        peak = 0
        with RawConn(d.socket) as conn:
            for _ in range(400):  # each turn adds tens of KiB of WAL: far past 2 MiB
                r = conn.call("agent.turn", {"session": lin.id, "token": token,
                                             "messages": [{"role": "user", "content": "y"}]})
                assert "result" in r, r
                peak = max(peak, wal.stat().st_size)
        assert peak > 2 * 1024 * 1024, "the flood wrote too little to test the bound"
        # The log line comes after the truncation (the worker thread truncates, the loop
        # logs when it next runs): waiting for the size alone raced it on a loaded machine.
        wait_for(lambda: "checkpointed and truncated" in d.log_text(), 10,
                 what=f"the WAL ({wal.stat().st_size} bytes) truncated, and logged")
        wait_for(lambda: wal.stat().st_size <= 2 * 1024 * 1024, 10,
                 what=f"the WAL ({wal.stat().st_size} bytes) truncated below 2 MiB")
        assert c.lineage_get(lin.id).turns == 400  # nothing lost by the truncation
        assert d.term() == 0
        d.start()
        assert d.client().lineage_get(lin.id).turns == 400
    finally:
        d.cleanup()
        remove_home(d.home)


def _token(d: DaemonProc, exec_id: str) -> str:
    """The attempt's token, from its process's environment (it is nowhere else; the
    start gate's shell has not got it: wait until the command runs)."""
    def token() -> str | None:
        pid = d.handles(exec_id)["child"]["pid"]
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        found = [e for e in env if e.startswith(b"TETHER_TOKEN=")]
        return found[0].split(b"=", 1)[1].decode() if found else None
    found: str = wait_for(token, 10, what="the agent's token in its environment")
    return found


# An agent reporting big turns: N turns of a message of S bytes (waiting as told when
# rate-limited), then one turn over the limit; what it got, in a report.
BIG_TURNS = r'''
import json, os, socket, sys, time
n, size = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_SOCKET"])
f = s.makefile("rwb")
auth = {"session": os.environ["TETHER_SESSION"], "token": os.environ["TETHER_TOKEN"]}
def turn(i, content):
    while True:
        f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "agent.turn", "params": {
            **auth, "messages": [{"role": "assistant", "content": content}]}}).encode()
            + b"\n")
        f.flush()
        r = json.loads(f.readline())
        err = r.get("error")
        if err and err["data"]["code"] == "RATE_LIMITED":
            time.sleep(err["data"]["retry_after"])
            continue
        return r
last = None
for i in range(1, n + 1):
    last = turn(i, f"turn {i}: " + "x" * size)
    assert "result" in last, last
too_big = turn(n + 1, "z" * (300 * 1024))
with open("report.tmp", "w") as out:
    json.dump({"last": last["result"], "too_big": too_big.get("error")}, out)
os.rename("report.tmp", "report.json")
time.sleep(600)
'''


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@needs_bwrap
def test_big_turns_from_a_sandboxed_agent_keep_memory_and_the_snapshot_bounded(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Finding 2: 300 turns of 1 MB took the daemon's RSS from 44 to 436 MB (it cached
    every lineage's whole conversation) and drain/ to 287 MB. Now a turn carries at most
    256 KiB (more is TURN_TOO_LARGE, nothing recorded), the snapshot keeps the newest
    2 MiB of the conversation, and the daemon keeps none of it in memory."""
    d = auto_home
    d.start(env={"TETHER_AGENT_RATE": "1000"})  # the rate limit is not what is tested
    before = rss_kib(d.pid)
    work = tmp_path / "big"
    lineage = agent(d, work, BIG_TURNS, "300", str(250 * 1024))
    got = wait_for(lambda: report(work / "report.json"), 240, interval=0.5,
                   what="300 turns of 250 KiB")
    grew = rss_kib(d.pid) - before
    drain = tree_bytes(d.home / "drain")
    print(f"RSS {before} KiB -> +{grew} KiB; drain/ {drain} bytes")
    assert drain <= 2 * 2 * 1024 * 1024 + 300 * 1024, drain  # twice the cap, plus a turn
    assert grew < 60 * 1024, f"the daemon's RSS grew {grew} KiB over 75 MB of turns"
    assert got["last"]["turn"] == 300
    err = got["too_big"]
    assert err is not None and err["data"]["code"] == "TURN_TOO_LARGE", err
    assert (err["code"], err["data"]["limit"]) == (-32602, 256 * 1024), err
    assert err["data"]["size"] > 300 * 1024
    c = d.client()
    assert c.lineage_get(lineage).turns == 300  # the refused turn left nothing
    from tether.agent import snapshot

    snap = snapshot.read(snapshot.path_for(d.home, lineage))
    assert snap["turn"] == 300
    assert snap["messages"][-1]["content"].startswith("turn 300: ")  # the newest kept
    assert snap["dropped"] + len(snap["messages"]) == 300
    assert snap["dropped"] >= 300 - 9 * 2  # 2 MiB of base, 2 MiB of lines at the most
