"""The implicit ``default`` sandbox under the product default (``auto`` → bwrap), and
agent sessions in it: a real daemon, the real CLI, real bubblewrap namespaces."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc, new_home, remove_home, wait_for
from tether.runtime import bwrap

PROBE = bwrap.probe()
# One worker for the whole module: its agents share the real ~/.claude (tether makes
# read-only placeholders there, and one test creates and removes the directory).
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}"),
              pytest.mark.xdist_group("user-home")]

AUTO = {"TETHER_DEFAULT_RUNTIME": "auto"}
FAST = {**AUTO, "TETHER_AGENT_TICK": "0.2"}
# A plain bwrap exec sees only the system directories: the system's python, not ours.
SYS_PY = "/usr/bin/python3"


@pytest.fixture
def auto_home() -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env=AUTO)
    yield d
    d.cleanup()
    remove_home(d.home)


def tether(d: DaemonProc, *args: str, cwd: Path | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd,
                          capture_output=True, timeout=timeout, env=d.env)


def listener() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv


# ---------------------------------------------------------------------- the sandbox
def test_the_default_sandbox_is_bwrap_and_isolates_tether_run(auto_home: DaemonProc,
                                                               tmp_path: Path) -> None:
    d = auto_home
    d.start()
    c = d.client()
    assert c.sandbox_get("default").spec.runtime == "bwrap"
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    (other / "secret").write_text("host secret")
    marker = f"/opt/tether-default-{os.getpid()}"
    srv = listener()
    port = srv.getsockname()[1]
    script = f"""
        echo made > made.txt && echo cwd-writable
        touch {marker} 2>/dev/null && echo opt-writable
        cat {other}/secret 2>/dev/null; echo x > {other}/planted 2>/dev/null && echo other-ok
        echo pids $(ls /proc | grep -c '^[0-9]')
        echo daemons $(ps -e -o args= | grep -c -e '[t]ether.cli.main' -e '[t]ether.daemon')
        {SYS_PY} -c 'import socket; socket.create_connection(("127.0.0.1", {port}), 2)' \
            2>/dev/null && echo net-reached || echo net-unreachable
        test -e {d.home} && echo home-visible
        ls {d.home} 2>/dev/null
        echo inner > /tmp/inner-{os.getpid()} && echo tmp-ok
        echo end
    """
    try:
        r = tether(d, "run", "--", "sh", "-c", script, cwd=work)
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().split("\n")
    assert "cwd-writable" in lines and (work / "made.txt").read_text() == "made\n"
    assert "opt-writable" not in lines and not Path(marker).exists()
    assert "host secret" not in r.stdout.decode() and "other-ok" not in lines
    assert not (other / "planted").exists()
    pids = int(next(x for x in lines if x.startswith("pids ")).split()[1])
    assert pids <= 8 < len([p for p in os.listdir("/proc") if p.isdigit()]), r.stdout
    assert "daemons 0" in lines  # the host's tether processes are not there
    assert "net-unreachable" in lines and "net-reached" not in lines
    assert "home-visible" not in lines and "tether.db" not in lines
    assert "tmp-ok" in lines and not Path(f"/tmp/inner-{os.getpid()}").exists()
    assert lines[-2:] == ["end", ""]


def test_restarts_follow_the_default_runtime_and_journal_it(auto_home: DaemonProc) -> None:
    d = auto_home
    d.start()
    assert d.client().sandbox_get("default").spec.runtime == "bwrap"
    assert d.term() == 0
    d.start(env={"TETHER_DEFAULT_RUNTIME": "process"})
    c = d.client()
    assert c.sandbox_get("default").spec.runtime == "process"
    specs = [e for e in c.events_list(sandbox="default", limit=1000).events
             if e.type == "sandbox.spec"]
    assert specs[-1].data == {"runtime": "process"}
    assert "process" in specs[-1].reason and specs[-1].sandbox == "default"
    # The process default really runs unsandboxed: it sees the host's /proc and home.
    r = tether(d, "run", "--", "sh", "-c", f"test -S {d.home}/tether.sock && echo sees-home")
    assert (r.returncode, r.stdout) == (0, b"sees-home\n"), r.stderr
    n = len(specs)
    assert d.term() == 0
    d.start(env={"TETHER_DEFAULT_RUNTIME": "process"})  # unchanged: nothing journaled
    c = d.client()
    assert len([e for e in c.events_list(sandbox="default", limit=1000).events
                if e.type == "sandbox.spec"]) == n
    assert d.term() == 0
    # --default-runtime beats the environment.
    d.starts += 1
    log = open(d.home / f"daemon-{d.starts}.log", "wb")  # noqa: SIM115
    d.proc = subprocess.Popen([*TETHER, "--home", str(d.home), "daemon", "--default-runtime",
                               "bwrap"], stdout=log, stderr=subprocess.STDOUT,
                              env={**d.env, "TETHER_DEFAULT_RUNTIME": "process"},
                              start_new_session=True)
    log.close()
    d.wait_serving()
    c = d.client()
    assert c.sandbox_get("default").spec.runtime == "bwrap"
    specs = [e for e in c.events_list(sandbox="default", limit=1000).events
             if e.type == "sandbox.spec"]
    assert len(specs) == n + 1 and specs[-1].data == {"runtime": "bwrap"}


def test_an_invalid_default_runtime_is_refused(auto_home: DaemonProc) -> None:
    d = auto_home
    r = d.cli("daemon", "--default-runtime", "docker", timeout=20)
    assert r.returncode == 2 and b"--default-runtime" in r.stderr and b"docker" in r.stderr
    proc = d.start(wait=False, env={"TETHER_DEFAULT_RUNTIME": "docker"})
    assert proc.wait(20) == 1
    log = d.log_text()
    assert "--default-runtime must be auto, bwrap or process, not 'docker'" in log
    assert "Traceback" not in log
    assert not d.socket.exists()
    d.start()  # it let go of the home: a valid daemon starts on it
    assert d.client().sandbox_get("default").spec.runtime == "bwrap"


# ---------------------------------------------------------------------- agents
AGENT = r'''
import hashlib, json, os, socket, sys, time
from tether.agent.session import Session
from tether.client.blocking import Client

attempt = os.environ["TETHER_ATTEMPT"]
home = os.environ["TETHER_HOME"]
s = Session.from_env()
out = {"socket": os.environ.get("TETHER_SOCKET"), "home": sorted(os.listdir(home)),
       "token": hashlib.sha256(os.environ["TETHER_TOKEN"].encode()).hexdigest(),
       "restored": len(s.restored_messages()),
       "sees": {n: os.path.exists(os.path.join(home, n)) for n in ("tether.sock", "tether.db")}}
reply = s.turn(context_pct=10 * int(attempt), messages=[
    {"role": "user", "content": f"task {attempt}"},
    {"role": "assistant", "content": f"did {attempt}"}])
out["lifecycle"] = reply.lifecycle
c = Client(home, socket=os.environ["TETHER_SOCKET"], reconnect=1)
for method, params in (("exec.start", {"argv": ["true"]}), ("exec.list", {}),
                       ("sandbox.list", {}), ("daemon.health", {})):
    try:
        c._call(method, params)
        out[method] = "ok"
    except Exception as e:
        out[method] = [getattr(e, "rpc_code", None), getattr(e, "code", repr(e))]
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2).close()
    out["network"] = "reached"
except OSError as e:
    out["network"] = str(e)
with open(f"report.{attempt}.tmp", "w") as f:
    json.dump(out, f)
os.rename(f"report.{attempt}.tmp", f"report.{attempt}.json")
time.sleep(300)
'''


def report(work: Path, attempt: int) -> dict[str, Any] | None:
    p = work / f"report.{attempt}.json"
    return json.loads(p.read_text()) if p.exists() else None


def test_an_agent_in_the_default_sandbox_reaches_only_its_session(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    d = auto_home
    d.start(env=FAST)
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)  # not in /tmp: the sandbox's /tmp is its own
    srv = listener()
    try:
        r = tether(d, "run", "--agent", "generic", "-d", "--", sys.executable,
                   "agent.py", str(srv.getsockname()[1]), cwd=work)
        assert r.returncode == 0, r.stderr
        exec_id = r.stdout.decode().strip()  # the exec id alone; the lineage on stderr
        first = wait_for(lambda: report(work, 1), timeout=20, what="attempt 1's report")
    finally:
        srv.close()
    c = d.client()
    assert c.exec_get(exec_id).sandbox == "default"
    lineage_id = c.exec_get(exec_id).lineage
    assert lineage_id is not None
    assert first["socket"] == str(d.home / "agent" / "agent.sock")
    assert first["home"] == ["agent", "agents"]  # its own state dir, nothing else
    assert first["sees"] == {"tether.sock": False, "tether.db": False}
    assert first["lifecycle"] == "HEALTHY" and first["restored"] == 0
    for method in ("exec.start", "exec.list", "sandbox.list"):
        assert first[method] == [-32601, "METHOD_NOT_FOUND"], method
    assert first["daemon.health"] == "ok"
    # Its network namespace is its own: the host's loopback listener is out of reach (the
    # way out is the egress proxy: tests/e2e/test_egress.py).
    assert "Connection refused" in first["network"], first["network"]
    inspect = tether(d, "lineage", "inspect", "--json", lineage_id)
    assert inspect.returncode == 0, inspect.stderr
    rec = json.loads(inspect.stdout)
    assert (rec["turns"], rec["attempt"], rec["exec"]) == (1, 1, exec_id)

    # Killed: revived in the same sandbox with a new token, and it still reports turns.
    child = d.handles(exec_id)["child"]["pid"]
    os.kill(child, signal.SIGKILL)
    second = wait_for(lambda: report(work, 2), timeout=20, what="attempt 2's report")
    assert second["token"] != first["token"]
    assert second["restored"] == 2  # the snapshot of turn 1 is readable inside
    assert second["home"] == ["agent", "agents", "drain"]
    assert second["sees"] == {"tether.sock": False, "tether.db": False}
    assert second["exec.start"] == [-32601, "METHOD_NOT_FOUND"]
    rec = c.lineage_get(lineage_id)
    assert (rec.attempt, rec.revivals, rec.turns) == (2, 1, 2)
    assert rec.status == "ACTIVE" and rec.exec != exec_id
    assert c.exec_get(rec.exec or "").sandbox == "default"


TURN_ON_DEMAND = r'''
import os, time
from tether.client.blocking import Client
c = Client(os.environ["TETHER_HOME"], socket=os.environ["TETHER_SOCKET"], reconnect=2)
n = 0
while True:
    if os.path.exists(f"go.{n + 1}"):
        n += 1
        try:
            res = c.agent_turn(os.environ["TETHER_SESSION"], os.environ["TETHER_TOKEN"],
                               context_pct=10 + n).lifecycle
        except Exception as e:
            res = f"{type(e).__name__}: {e}"
        c.close()
        with open(f"turn.{n}.tmp", "w") as f:
            f.write(res)
        os.rename(f"turn.{n}.tmp", f"turn.{n}")
    time.sleep(0.05)
'''


def test_a_sandboxed_agent_reaches_a_restarted_daemon(auto_home: DaemonProc,
                                                      tmp_path: Path) -> None:
    d = auto_home
    d.start(env=FAST)
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(TURN_ON_DEMAND)
    r = tether(d, "run", "--agent", "generic", "-d", "--", sys.executable, "agent.py",
               cwd=work)
    assert r.returncode == 0, r.stderr
    (work / "go.1").touch()
    assert wait_for(lambda: (work / "turn.1").exists(), timeout=15)
    assert (work / "turn.1").read_text() == "HEALTHY"
    d.kill9()  # the agent outlives its daemon, and the next one adopts it
    d.start(env=FAST)
    (work / "go.2").touch()
    wait_for(lambda: (work / "turn.2").exists(), timeout=15)
    answer = (work / "turn.2").read_text()
    assert answer == "HEALTHY"


def test_a_sandboxed_agent_sees_no_home_directory_but_its_own_config(
        auto_home: DaemonProc, tmp_path: Path) -> None:
    """Review finding: with the host read-only, an agent could read ~/.ssh and reach
    sockets under the home directories. Now those are hidden; its provider config is
    there (read-write) and the settings that name commands are read-only."""
    import uuid

    d = auto_home
    d.start(env=FAST)
    user_home = Path(os.path.expanduser("~"))
    secret = user_home / f".tether-test-secret-{uuid.uuid4().hex[:8]}"
    secret.write_text("do not read\n")
    claude = user_home / ".claude"
    made_claude = not claude.exists()
    claude.mkdir(exist_ok=True)
    settings = claude / "settings.json"
    had_settings = settings.exists()
    before = settings.read_bytes() if had_settings else b"{}\n"
    settings.write_bytes(before)
    work = tmp_path / "work"
    work.mkdir()
    try:
        r = tether(d, "run", "--agent", "generic", "--", "sh", "-c",
                   f"cat {secret} 2>/dev/null || echo hidden; "
                   f"test -d {claude} && echo config-visible; "
                   f"echo '{{\"hooks\": 1}}' > {settings} 2>/dev/null || echo settings-ro",
                   cwd=work)
        assert r.stdout.split() == [b"hidden", b"config-visible", b"settings-ro"], r
        assert settings.read_bytes() == before
    finally:
        secret.unlink()
        if not had_settings:
            settings.unlink()
        if made_claude:  # with what tether made read-only in it (settings, hooks)
            shutil.rmtree(claude)


def test_a_sandboxed_agent_cannot_replace_the_agent_socket(auto_home: DaemonProc,
                                                           tmp_path: Path) -> None:
    """Second review: the shared agent socket directory was writable, so one agent
    could move the socket away (cutting every other agent off) or plant its own."""
    d = auto_home
    d.start(env=FAST)
    work = tmp_path / "work"
    work.mkdir()
    r = tether(d, "run", "--agent", "generic", "--", "sh", "-c",
               'mv "$TETHER_SOCKET" "$TETHER_SOCKET.x" 2>/dev/null && echo moved || '
               'echo kept; touch "$(dirname "$TETHER_SOCKET")/planted" 2>/dev/null && '
               'echo planted || echo refused', cwd=work)
    assert r.stdout.split() == [b"kept", b"refused"], r
    assert (d.home / "agent" / "agent.sock").exists()
