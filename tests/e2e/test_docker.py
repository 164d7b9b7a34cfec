"""The docker runtime against a real dockerd, a real daemon and real SIGKILLs:
companions and their health checks, the private network, byte-exact exec output,
execs that outlive the daemon, every row of the reconcile table, a dockerd
restart, labelled leftovers, stop/start/rm and resource limits.

Every test is in one xdist group (one of them restarts dockerd). The module is
skipped when docker cannot be used here, unless ``TETHER_REQUIRE_DOCKER=1``
makes that a failure. Whatever a test leaves behind in docker is removed by
label (``tether.home`` of the test's own home only).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProc, raw_call, wait_for
from tether.client.blocking import Client
from tether.client.errors import TetherError
from tether.model.records import Event, SandboxRecord
from tether.runtime.docker import bridge_name, home_key

pytestmark = pytest.mark.xdist_group("docker")

IMAGE = os.environ.get("TETHER_TEST_IMAGE", "tether-test:busybox")
DOCKER = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else (
    shutil.which("docker") or "/usr/bin/docker")
IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"

#: A required companion that becomes healthy only after two seconds.
SLOW_DB = f"""
companions:
  - name: db
    image: {IMAGE}
    command: sh -c "sleep 2; touch /tmp/ready; nc -ll -p 5432 -e echo pong"
    health:
      command: [test, -f, /tmp/ready]
      interval: 0.2
"""
#: A required companion without a health check: ready once it runs.
DB = f"""
companions:
  - name: db
    image: {IMAGE}
    command: nc -ll -p 5432 -e echo pong
"""
#: Asks the companion until it answers (it may still be binding its port).
ASK_DB = ("ok=1; for i in 1 2 3 4 5 6 7 8 9 10; do nc db 5432 </dev/null && { ok=0; break; }; "
          "sleep 0.2; done; [ $ok = 0 ]")
#: Held by every test here, machine-wide: one of them restarts dockerd, so no two
#: may overlap, whatever xdist does with the group (and across pytest runs).
LOCK = "/tmp/tether-docker-tests.lock"


# ---------------------------------------------------------------------- docker
def docker(*args: str, check: bool = True, timeout: float = 60) -> str:
    r = subprocess.run([DOCKER, *args], capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({r.returncode}): "
                             f"{r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def docker_problem() -> str | None:
    """Why the docker runtime cannot be tested here, or None."""
    if not os.access(DOCKER, os.X_OK):
        return "no docker CLI (install docker.io; .ci/provision.sh does)"
    if os.geteuid() != 0:
        return "the docker runtime keeps sandboxes off the host with iptables: needs root"
    try:
        r = subprocess.run([DOCKER, "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, timeout=30)
        if r.returncode != 0:
            return f"`docker info` failed: {r.stderr.decode(errors='replace').strip()}"
        r = subprocess.run([DOCKER, "image", "inspect", IMAGE], capture_output=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"docker does not answer: {e}"
    if r.returncode != 0:
        return f"image {IMAGE} is missing (.ci/provision.sh imports it)"
    return None


_USABLE: list[bool] = []  # set once docker was found usable


@pytest.fixture(autouse=True)
def docker_usable() -> Iterator[None]:
    """Take the machine-wide docker test lock, then skip (or, with
    TETHER_REQUIRE_DOCKER=1, fail) when docker cannot be used here."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _USABLE:
            require(docker_problem())
            _USABLE.append(True)
        yield


def require(problem: str | None) -> None:
    if problem is None:
        return
    if os.environ.get("TETHER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"TETHER_REQUIRE_DOCKER=1 but docker cannot be used: {problem}",
                    pytrace=False)
    pytest.skip(f"docker cannot be used: {problem}")


def labelled(label: str, value: str) -> tuple[list[str], list[str]]:
    """Names of the containers and networks carrying ``label=value``."""
    flt = f"label={label}={value}"
    ctrs = docker("ps", "-a", "--filter", flt, "--format", "{{.Names}}").split()
    nets = docker("network", "ls", "--filter", flt, "--format", "{{.Name}}").split()
    return sorted(ctrs), sorted(nets)


def of_sandbox(sandbox: str) -> tuple[list[str], list[str]]:
    return labelled("tether.sandbox", sandbox)


def status(name: str) -> str:
    """A container's status (running, exited, ...) or ``missing``."""
    r = subprocess.run([DOCKER, "inspect", "--format", "{{.State.Status}}", name],
                       capture_output=True, timeout=30)
    return r.stdout.decode().strip() if r.returncode == 0 else "missing"


def inspect(name: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", name))
    return data[0]


def host_blocked(sandbox: str) -> bool:
    return subprocess.run([IPTABLES, "-w", "5", "-C", "INPUT", "-i", bridge_name(sandbox),
                           "-j", "DROP"], capture_output=True, timeout=30).returncode == 0


def primary(sandbox: str) -> str:
    return f"tether-primary-{sandbox}"


def remove_everything_of(key: str, sandboxes: set[str]) -> None:
    """The safety net: every container and network of one tether home, and the
    host-blocking rules of its sandboxes. Never anything of another home."""
    flt = f"label=tether.home={key}"
    out = docker("ps", "-a", "--filter", flt, "--format", '{{.Label "tether.sandbox"}}',
                 check=False)
    sandboxes |= set(out.split())
    ids = docker("ps", "-aq", "--filter", flt, check=False).split()
    if ids:
        docker("rm", "-f", *ids, check=False)
    for net in docker("network", "ls", "--filter", flt, "--format", "{{.Name}}",
                      check=False).split():
        sandboxes.add(net.removeprefix("tether-net-"))
        docker("network", "rm", net, check=False)
    for sb in sandboxes:
        while host_blocked(sb):
            subprocess.run([IPTABLES, "-w", "5", "-D", "INPUT", "-i", bridge_name(sb), "-j",
                            "DROP"], capture_output=True, timeout=30)


# ---------------------------------------------------------------------- tether
class Dk:
    """One test's daemon plus what it made in docker."""

    def __init__(self, daemon: DaemonProc) -> None:
        self.d = daemon
        self.key = home_key(str(daemon.home))
        self.ids: set[str] = set()

    def client(self) -> Client:
        return self.d.client(reconnect=10)

    def create(self, c: Client, name: str, extra: str = "", **params: Any) -> dict[str, Any]:
        spec = f"runtime: docker\nimage: {IMAGE}\n{extra}"
        try:
            sb: dict[str, Any] = c._call("sandbox.create", {"name": name, "spec": spec,
                                                            **params})
        except TetherError as e:
            if "sandbox" in e.data:
                self.ids.add(str(e.data["sandbox"]))
            raise
        self.ids.add(sb["id"])
        return sb

    def kill_daemon(self, c: Client) -> int:
        """Note where the journal ends, then SIGKILL the daemon; returns that mark."""
        mark = journal_end(c)
        self.d.kill9()
        return mark

    def start_and_reconcile(self, mark: int) -> tuple[Client, Event]:
        """Start the daemon; wait for the ``docker.connected`` after ``mark``."""
        self.d.start()
        c = self.client()
        ev = wait_event(c, "docker.connected", mark, timeout=30)
        return c, ev


@pytest.fixture
def dk(daemon: DaemonProc) -> Iterator[Dk]:
    box = Dk(daemon)
    yield box
    try:
        if daemon.proc is not None and daemon.proc.poll() is None:
            c = daemon.client(reconnect=2, timeout=60)
            for sb in c.sandbox_list():
                if sb.spec.runtime == "docker":
                    box.ids.add(sb.id)
                    with contextlib.suppress(Exception):
                        c.sandbox_delete(sb.id, grace=1)
    finally:
        remove_everything_of(box.key, box.ids)


def events(c: Client, since: int = 0, sandbox: str | None = None) -> list[Event]:
    """The journal (or one sandbox's) after ``since``, every page of it."""
    out: list[Event] = []
    while True:
        page = c.events_list(since=since, sandbox=sandbox, limit=10_000)
        out += page.events
        if not page.events:
            return out
        since = page.next


def journal_end(c: Client) -> int:
    evs = events(c)
    return int(evs[-1].gseq) if evs else 0


def wait_event(c: Client, kind: str, since: int, timeout: float = 15.0) -> Event:
    def find() -> Event | None:
        return next((e for e in events(c, since) if e.type == kind), None)
    found: Event = wait_for(find, timeout, interval=0.1,
                                     what=f"event {kind} after gseq {since}")
    return found


def wait_state(c: Client, sandbox: str, state: str, timeout: float = 15.0) -> SandboxRecord:
    def reached() -> SandboxRecord | None:
        try:
            sb = c.sandbox_get(sandbox)
        except TetherError as e:
            if e.code == "SANDBOX_NOT_FOUND":  # a create not yet recorded
                return None
            raise
        return sb if sb.state == state else None
    found: SandboxRecord = wait_for(reached, timeout, interval=0.05,
                                     what=f"sandbox {sandbox} {state}")
    return found


def state_of(c: Client, sandbox: str) -> str:
    """A sandbox's state, also once it is DELETED (which ``sandbox.get`` no longer finds)."""
    found = [sb for sb in c.sandbox_list(all=True) if sb.id == sandbox]
    assert len(found) == 1, found
    return str(found[0].state)


def logs(c: Client, exec_id: str, stream: str = "stdout") -> bytes:
    return b"".join(c.read_logs(exec_id, stream=stream))


def run(c: Client, sandbox: str, script: str, timeout: float = 30) -> tuple[int, bytes, bytes]:
    x = c.exec_start(["sh", "-c", script], sandbox=sandbox)
    done = c.exec_wait(x.id, timeout=timeout)
    assert done.state in ("FINISHED", "FAILED", "CANCELLED"), done
    return done.exit_code, logs(c, x.id), logs(c, x.id, "stderr")


# ---------------------------------------------------------------------- 1 companions
def test_a_required_companion_holds_ready_until_healthy(dk: Dk) -> None:
    c = dk.client()
    t0 = time.monotonic()
    sb = dk.create(c, "slowdb", SLOW_DB)
    took = time.monotonic() - t0
    assert sb["state"] == "READY" and took >= 2.0, (sb, took)
    assert inspect(f"tether-companion-{sb['id']}-db")["State"]["Health"]["Status"] == "healthy"
    code, out, _ = run(c, sb["id"], ASK_DB)
    assert (code, out) == (0, b"pong\n")
    wait_event(c, "docker.connected", 0)  # the event stream has caught up, too
    time.sleep(0.3)
    journal = [(e.type, e.state or e.data.get("health"))
               for e in events(c, sandbox=sb["id"]) if e.type.startswith("sandbox.")]
    # Healthy before READY, and reported once: by create, not again from docker's events.
    assert journal == [("sandbox.state", "PENDING"), ("sandbox.companion", "healthy"),
                       ("sandbox.state", "READY")], journal


def test_a_required_companion_that_never_gets_healthy_fails_the_create(dk: Dk) -> None:
    c = dk.client()
    never = f"""
companions:
  - name: db
    image: {IMAGE}
    command: sleep 600
    health:
      command: [test, -f, /tmp/never]
      interval: 0.2
      timeout: 1
      retries: 2
"""
    t0 = time.monotonic()
    with pytest.raises(TetherError) as e:
        dk.create(c, "sickdb", never)
    assert time.monotonic() - t0 < 30  # sanity bound only
    assert e.value.code == "COMPANION_UNHEALTHY", e.value
    assert "required companion 'db' is unhealthy" in e.value.message
    sid = e.value.data["sandbox"]
    sb = c.sandbox_get(sid)
    assert sb.state == "FAILED" and sb.reason.startswith("COMPANION_UNHEALTHY"), sb
    assert of_sandbox(sid) == ([], [])
    assert not host_blocked(sid)


# ---------------------------------------------------------------------- 2 network
def test_the_private_network_reaches_companions_but_not_the_host_or_internet(dk: Dk) -> None:
    c = dk.client()
    sb = dk.create(c, "net", DB)
    sid = sb["id"]
    assert host_blocked(sid)
    gateway = docker("network", "inspect", f"tether-net-{sid}", "--format",
                     "{{(index .IPAM.Config 0).Gateway}}").strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", gateway), gateway

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"host-secret\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        with socket.create_connection((gateway, port), timeout=2) as s:  # the host itself
            assert s.recv(100) == b"host-secret\n"
        code, out, err = run(c, sid, (
            f"(nc -w 2 {gateway} {port} </dev/null; echo host=$?) >/tmp/h 2>&1 & "
            "(nc -w 2 8.8.8.8 53 </dev/null; echo inet=$?) >/tmp/i 2>&1 & "
            f"({ASK_DB}; echo db=$?) >/tmp/d 2>&1; wait; cat /tmp/d /tmp/h /tmp/i"))
    finally:
        srv.close()
    assert code == 0, err
    assert b"host-secret" not in out, out
    lines = out.decode().splitlines()
    assert lines[:2] == ["pong", "db=0"], out
    assert "host=0" not in lines and any(x.startswith("host=") for x in lines), out
    assert "inet=0" not in lines and any(x.startswith("inet=") for x in lines), out

    assert c.sandbox_delete(sid).state == "DELETED"
    assert not host_blocked(sid)
    assert of_sandbox(sid) == ([], [])


# ---------------------------------------------------------------------- 3 output
def test_exec_output_is_byte_exact_with_stderr_apart_and_the_exit_code(dk: Dk,
                                                                      tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    data = os.urandom(3_000_000) + bytes(range(256)) * 64
    (ws / "data.bin").write_bytes(data)
    c = dk.client()
    sb = dk.create(c, "bytes", f"workspace: {ws}\nworkspace_target: /workspace\n")
    x = c.exec_start(["sh", "-c", "cat data.bin; head -c 1000 /workspace/data.bin; "
                                  "echo to-stderr >&2; exit 3"], sandbox=sb["id"], cwd=str(ws))
    done = c.exec_wait(x.id, timeout=60)
    assert (done.state, done.exit_code) == ("FINISHED", 3), done
    expected = data + data[:1000]
    got = logs(c, x.id)
    assert len(got) == len(expected) and got == expected
    assert Path(done.stdout_path).read_bytes() == expected
    assert logs(c, x.id, "stderr") == b"to-stderr\n"
    assert c.exec_logs(x.id, offset=len(expected) - 5).data == \
        expected[-5:]


# ---------------------------------------------------------------------- 4 survival
def test_a_docker_exec_survives_a_daemon_sigkill_and_is_cancelled_inside(dk: Dk) -> None:
    c = dk.client()
    sid = dk.create(c, "survivor")["id"]
    script = ("trap 'echo trapped at $i; exit 7' TERM; i=0; "
              "while :; do echo tick $i; i=$((i+1)); sleep 0.1; done")
    x = c.exec_start(["sh", "-c", script], sandbox=sid)

    def ticks() -> int:
        return logs(c, x.id).count(b"tick ")

    wait_for(lambda: ticks() >= 3, what="three ticks")
    dk.d.kill9()
    dk.d.start()
    c = dk.client()
    assert c.exec_get(x.id).state == "RUNNING"
    before = ticks()
    wait_for(lambda: ticks() >= before + 3, what="ticking on after the restart")

    c.exec_cancel(x.id, grace=10)
    done = c.exec_wait(x.id, timeout=20)
    assert (done.state, done.exit_code) == ("CANCELLED", 7), done
    out = logs(c, x.id)
    assert re.fullmatch(rb"(tick \d+\n)+trapped at \d+\n", out), out[-200:]
    n = out.count(b"tick ")
    assert out.splitlines()[:n] == [f"tick {i}".encode() for i in range(n)]  # no gap, no repeat

    environs = docker("exec", primary(sid), "sh", "-c",
                      'for d in /proc/[0-9]*; do tr "\\0" "\\n" < $d/environ 2>/dev/null | '
                      'grep -qx "TETHER_EXEC_ID=$1" && echo ${d#/proc/}; done; exit 0',
                      "check", x.id)
    assert environs.split() == [], environs
    ps = docker("exec", primary(sid), "ps", "-o", "pid,args")
    assert "trapped" not in ps and "sleep 0.1" not in ps, ps


# ---------------------------------------------------------------------- 5 reconcile
def test_every_reconcile_row_with_containers_changed_while_the_daemon_is_down(dk: Dk) -> None:
    c = dk.client()
    names = ("keep", "exited", "missing", "stopped", "stopgone", "stoprun", "failed")
    ids = {n: dk.create(c, n)["id"] for n in names}
    for n in ("stopped", "stopgone", "stoprun"):
        assert c.sandbox_stop(ids[n], grace=1).state == "STOPPED"
        assert status(primary(ids[n])) == "exited"

    # While the daemon runs, a killed primary is noticed from docker's events.
    # (Nothing else would ever look at it: there is no polling.)
    docker("kill", primary(ids["failed"]))
    failed = wait_state(c, ids["failed"], "FAILED", timeout=20)
    assert failed.reason == (f"CONTAINER_EXITED: the primary container "
                                f"({primary(ids['failed'])}) is exited (exit code 137)")

    mark = dk.kill_daemon(c)
    docker("stop", "-t", "1", primary(ids["exited"]))
    docker("rm", "-f", primary(ids["missing"]))
    docker("rm", "-f", primary(ids["stopgone"]))
    docker("start", primary(ids["stoprun"]))
    c, connected = dk.start_and_reconcile(mark)
    assert {k: connected.data[k] for k in ("checked", "changed", "leftovers")} == \
        {"checked": 7, "changed": 3, "leftovers": 0}, connected

    got = {n: c.sandbox_get(ids[n]) for n in names}
    assert {n: sb.state for n, sb in got.items()} == {
        "keep": "READY", "exited": "FAILED", "missing": "FAILED", "stopped": "STOPPED",
        "stopgone": "FAILED", "stoprun": "STOPPED", "failed": "FAILED"}
    assert got["exited"].reason == (f"CONTAINER_EXITED: the primary container "
                                       f"({primary(ids['exited'])}) is exited (exit code 0)")
    for n in ("missing", "stopgone"):
        assert got[n].reason == (f"CONTAINER_MISSING: the primary container "
                                    f"({primary(ids[n])}) is missing")
    assert got["failed"].reason == failed.reason
    assert status(primary(ids["stoprun"])) == "exited"  # STOPPED+running: stopped again
    assert status(primary(ids["keep"])) == "running"
    assert run(c, ids["keep"], "echo still here")[:2] == (0, b"still here\n")
    # Only the three that changed got a new state event after the restart.
    changed = sorted(e.sandbox for e in events(c, mark) if e.type == "sandbox.state")
    assert changed == sorted(ids[n] for n in ("exited", "missing", "stopgone"))


def test_pending_and_deleting_sandboxes_interrupted_by_a_sigkill(dk: Dk) -> None:
    c = dk.client()
    # DELETING: a delete waiting on an exec that ignores SIGTERM.
    gone = dk.create(c, "gone")["id"]
    x = c.exec_start(["sh", "-c", "trap '' TERM; echo armed; while :; do sleep 0.2; done"],
                     sandbox=gone)
    wait_for(lambda: logs(c, x.id) == b"armed\n", what="the exec armed")
    # PENDING: a create waiting for a companion that is never healthy.
    slow = f"""
companions:
  - name: db
    image: {IMAGE}
    command: sleep 600
    health:
      command: [test, -f, /tmp/never]
      interval: 0.5
      retries: 1000
"""
    calls: list[Any] = []

    def call(method: str, params: dict[str, Any]) -> None:
        try:
            calls.append(raw_call(dk.d.socket, method, params, timeout=120))
        except Exception as e:  # the daemon is SIGKILLed under it
            calls.append(e)

    threads = [threading.Thread(target=call, args=("sandbox.delete",
                                                   {"sandbox": gone, "grace": 60})),
               threading.Thread(target=call, args=("sandbox.create", {
                   "name": "pend", "spec": f"runtime: docker\nimage: {IMAGE}\n{slow}"}))]
    for t in threads:
        t.start()
    wait_state(c, gone, "DELETING")
    pend = wait_state(c, "pend", "PENDING").id
    dk.ids.add(pend)
    wait_for(lambda: status(f"tether-companion-{pend}-db") == "running", timeout=30,
             what="the pending sandbox's companion running")
    time.sleep(0.3)  # the delete's SIGTERM reaches the exec, which ignores it
    assert c.exec_get(x.id).state == "RUNNING"

    mark = dk.kill_daemon(c)
    for t in threads:
        t.join(10)
    assert len(calls) == 2 and all(isinstance(r, Exception) for r in calls), calls
    assert of_sandbox(pend) != ([], []) and of_sandbox(gone) != ([], [])
    assert host_blocked(pend) and host_blocked(gone)

    c, connected = dk.start_and_reconcile(mark)
    assert connected.data["changed"] == 2, connected
    sb = c.sandbox_get(pend)
    assert sb.state == "FAILED" and sb.reason.startswith("INTERRUPTED_PENDING"), sb
    assert state_of(c, gone) == "DELETED"
    for sid in (pend, gone):
        assert of_sandbox(sid) == ([], [])
        assert not host_blocked(sid)
    done = c.exec_wait(x.id, timeout=15)
    assert done.state in ("CANCELLED", "FAILED"), done
    assert logs(c, x.id) == b"armed\n"  # logs outlive the sandbox
    journal = [e.state for e in events(c, sandbox=gone) if e.type == "sandbox.state"]
    assert journal == ["PENDING", "READY", "DELETING", "DELETED"]


# ---------------------------------------------------------------------- 6 dockerd restart
def find_dockerd() -> int | None:
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            comm = Path(f"/proc/{d}/comm").read_text().strip()
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if comm == "dockerd" and state != "Z":
            return int(d)
    return None


def docker_answers() -> bool:
    try:
        return subprocess.run([DOCKER, "info"], capture_output=True,
                              timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


_STARTED: list[subprocess.Popen[bytes]] = []  # dockerds we started (kept from the GC)


@contextlib.contextmanager
def dockerd_restarted() -> Iterator[None]:
    """SIGTERM dockerd, wait for it to end and start it again the same way; it is
    running again afterwards whatever happens."""
    pid = find_dockerd()
    if pid is None:
        pytest.fail("dockerd answers but no dockerd process is visible to restart")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    exe = os.readlink(f"/proc/{pid}/exe")
    if exe.endswith(" (deleted)") or not os.path.exists(exe):
        exe = shutil.which(argv[0].decode()) or "/usr/sbin/dockerd"
    environ = dict(line.split(b"=", 1) for line in
                   Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in line)
    cwd = os.readlink(f"/proc/{pid}/cwd")
    if not os.path.isdir(cwd):  # e.g. "/tmp/x (deleted)": the checkout that started it
        cwd = "/"

    def start() -> None:
        with open("/var/log/dockerd.log", "ab") as log:
            _STARTED.append(subprocess.Popen(argv, executable=exe, env=environ, cwd=cwd,
                                             stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT,
                                             start_new_session=True))
        wait_for(docker_answers, 60, interval=0.2, what="dockerd answering again")

    try:
        os.kill(pid, signal.SIGTERM)
        try:
            wait_for(lambda: find_dockerd() != pid, 60, interval=0.1, what="dockerd to exit")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: find_dockerd() != pid, 10, interval=0.1, what="dockerd killed")
        start()
        yield
    finally:
        if not docker_answers():
            if find_dockerd() is None:
                start()
            else:
                wait_for(docker_answers, 60, interval=0.2, what="dockerd answering")


def test_a_dockerd_restart_is_noticed_reconciled_and_resubscribed(dk: Dk) -> None:
    c = dk.client()
    before = dk.create(c, "before")["id"]
    wait_event(c, "docker.connected", 0)
    live_restore = docker("info", "--format", "{{.LiveRestoreEnabled}}").strip() == "true"
    mark = journal_end(c)
    with dockerd_restarted():
        down = wait_event(c, "docker.disconnected", mark, timeout=30)
        up = wait_event(c, "docker.connected", down.gseq, timeout=30)
        assert up.gseq > down.gseq
        assert up.data["checked"] == 1
        # Without live-restore dockerd stops every container when it stops (and
        # nothing restarts them): READY+exited → FAILED. With it they live on.
        st = status(primary(before))
        sb = c.sandbox_get(before)
        if live_restore:
            assert (st, sb.state) == ("running", "READY"), sb
        else:
            assert (st, sb.state) == ("exited", "FAILED"), sb
            assert sb.reason.startswith(f"CONTAINER_EXITED: the primary container "
                                           f"({primary(before)}) is exited"), sb

        # Still subscribed: a new sandbox's killed primary is noticed from events.
        after = dk.create(c, "after")["id"]
        assert run(c, after, "echo alive")[:2] == (0, b"alive\n")
        docker("kill", primary(after))
        sb = wait_state(c, after, "FAILED", timeout=10)
        assert sb.reason == (f"CONTAINER_EXITED: the primary container "
                                f"({primary(after)}) is exited (exit code 137)")


# ---------------------------------------------------------------------- 7 leftovers
def test_labelled_leftovers_of_this_home_are_removed_and_journaled(dk: Dk) -> None:
    c = dk.client()
    real = dk.create(c, "real")["id"]
    fake = "f" + uuid.uuid4().hex[:11]
    other = "o" + uuid.uuid4().hex[:11]
    other_key = uuid.uuid4().hex[:16]  # another home on the same engine
    mark = dk.kill_daemon(c)
    docker("network", "create", "--label", f"tether.home={dk.key}", "--label",
           f"tether.sandbox={fake}", "--label", "tether.role=network", f"tether-net-{fake}")
    docker("create", "--label", f"tether.home={dk.key}", "--label",
           f"tether.sandbox={fake}", "--label", "tether.role=primary", "--name",
           primary(fake), "--network", f"tether-net-{fake}", IMAGE, "sleep", "600")
    docker("start", primary(fake))
    docker("run", "-d", "--label", f"tether.home={other_key}", "--label",
           f"tether.sandbox={other}", "--label", "tether.role=primary", "--name",
           primary(other), IMAGE, "sleep", "600")
    try:
        c, connected = dk.start_and_reconcile(mark)
        assert connected.data["leftovers"] == 1, connected
        removed = [e for e in events(c, mark) if e.type == "docker.leftover_removed"]
        assert len(removed) == 1 and removed[0].sandbox is None, removed
        assert removed[0].data == {"sandbox": fake,
                                      "names": sorted([primary(fake), f"tether-net-{fake}"])}
        assert removed[0].gseq < connected.gseq
        assert of_sandbox(fake) == ([], [])
        assert status(primary(other)) == "running"  # another home's: untouched
        assert c.sandbox_get(real).state == "READY"
        assert status(primary(real)) == "running"
    finally:
        docker("rm", "-f", primary(other), check=False)


# ---------------------------------------------------------------------- 8 lifecycle
def test_stop_start_and_rm_of_a_docker_sandbox(dk: Dk) -> None:
    c = dk.client()
    sb = dk.create(c, "life", DB)
    sid = sb["id"]
    x = c.exec_start(["sh", "-c", "echo one; echo two >&2"], sandbox=sid)
    assert c.exec_wait(x.id, timeout=20).state == "FINISHED"
    ctrs, nets = of_sandbox(sid)
    assert ctrs == sorted([primary(sid), f"tether-companion-{sid}-db"])
    assert nets == [f"tether-net-{sid}"]

    assert c.sandbox_stop(sid, grace=1).state == "STOPPED"
    assert [status(n) for n in ctrs] == ["exited", "exited"]
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], sandbox=sid)
    assert e.value.code == "SANDBOX_NOT_READY"

    assert c.sandbox_start(sid).state == "READY"
    assert [status(n) for n in ctrs] == ["running", "running"]
    assert host_blocked(sid)
    assert run(c, sid, ASK_DB)[:2] == (0, b"pong\n")

    assert c.sandbox_delete(sid).state == "DELETED"
    assert of_sandbox(sid) == ([], [])
    assert not host_blocked(sid)
    assert logs(c, x.id) == b"one\n" and logs(c, x.id, "stderr") == b"two\n"
    assert Path(c.exec_get(x.id).stdout_path).read_bytes() == b"one\n"
    journal = [e.state for e in events(c, sandbox=sid) if e.type == "sandbox.state"]
    assert journal == ["PENDING", "READY", "STOPPED", "READY", "DELETING", "DELETED"]


# ---------------------------------------------------------------------- 9 resources
def test_resource_limits_map_to_docker(dk: Dk) -> None:
    c = dk.client()
    sid = dk.create(c, "limited", "resources:\n  memory: 64m\n  cpus: 0.5\n  pids: 50\n")["id"]
    host = inspect(primary(sid))["HostConfig"]
    assert host["Memory"] == 64 * 1024 * 1024
    assert host["MemorySwap"] == 64 * 1024 * 1024
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 50


# ---------------------------------------------------------------------- 10 restart policy
def test_restart_always_lets_dockerd_bring_containers_back(dk: Dk) -> None:
    """The reconcile table's "or restarted, if the spec asks for it": with restart:
    always an exited primary is started again by dockerd and the sandbox stays READY;
    what tether itself stops stays stopped."""
    c = dk.client()
    sid = dk.create(c, "phoenix", "restart: always\n")["id"]
    assert inspect(primary(sid))["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    mark = journal_end(c)
    # The keep-alive shell exits 0, and the container with it: the `docker exec` that
    # asked may itself be killed by that (137) before it returns. The effect is checked.
    docker("exec", primary(sid), "kill", "-TERM", "1", check=False)
    exited = wait_event(c, "sandbox.container_exited", mark)
    assert exited.sandbox == sid and exited.data["role"] == "primary"
    wait_for(lambda: status(primary(sid)) == "running", 15, what="dockerd's restart")
    time.sleep(1.5)  # longer than the reconcile's settle time
    assert state_of(c, sid) == "READY"
    assert run(c, sid, "echo alive")[:2] == (0, b"alive\n")
    assert c.sandbox_stop(sid, grace=1).state == "STOPPED"
    time.sleep(1.5)
    assert status(primary(sid)) == "exited" and state_of(c, sid) == "STOPPED"


# ---------------------------------------------------------------------- review regressions
def test_cancel_leaves_no_process_of_the_exec_in_the_container(dk: Dk) -> None:
    """Review finding: a child that ignores SIGTERM outlived its cancelled exec."""
    c = dk.client()
    sid = dk.create(c, "leaky")["id"]
    x = c.exec_start(["sh", "-c", '(trap "" TERM; sleep 1001) & sleep 1002'], sandbox=sid)
    wait_for(lambda: "sleep 1001" in docker("exec", primary(sid), "ps"), 10)
    done = c.exec_cancel(x.id, grace=1)
    assert c.exec_wait(done.id, timeout=20).state == "CANCELLED"
    wait_for(lambda: "sleep 100" not in docker("exec", primary(sid), "ps"), 10,
             what="every process of the exec to be gone")


def test_cp_out_keeps_absolute_symlinks_and_host_errors_are_copy_errors(
        dk: Dk, tmp_path: Path) -> None:
    """Review finding: an absolute symlink made copying out an internal error, and a
    missing host path was reported as dockerd being unreachable."""
    c = dk.client()
    sid = dk.create(c, "links")["id"]
    assert run(c, sid, "mkdir -p /data/sub && echo hi > /data/sub/f && "
                       "ln -s /etc/passwd /data/abs")[0] == 0
    out = tmp_path / "out"
    out.mkdir()
    c.sandbox_copy(sid, "out", "/data", str(out))
    assert (out / "data" / "sub" / "f").read_text() == "hi\n"
    assert os.readlink(out / "data" / "abs") == "/etc/passwd"
    with pytest.raises(TetherError) as e:
        c.sandbox_copy(sid, "in", str(tmp_path / "missing"), "/tmp")
    assert e.value.code == "PATH_NOT_FOUND", e.value  # as out of it, and as bwrap says
    with pytest.raises(TetherError) as e:
        c.sandbox_copy(sid, "out", "/data", str(tmp_path / "no" / "such" / "dir"))
    assert e.value.code in ("PATH_NOT_FOUND", "COPY_FAILED"), e.value
    assert c.status().runtimes["docker"].available is True


def test_cp_reports_the_bytes_of_the_files_and_a_missing_source_alike_both_ways(
        dk: Dk, tmp_path: Path) -> None:
    """Issue 23: `tether cp` of a 4-byte file said "copied 10240 bytes" (the tar's size),
    and a missing source exited 1 going in but 2 coming out."""
    c = dk.client()
    dk.create(c, "cpbox")
    (tmp_path / "four").write_bytes(b"four")
    cli = ["--home", str(dk.d.home), "cp"]

    def tether(*args: str) -> subprocess.CompletedProcess[bytes]:
        from tests.harness import TETHER
        return subprocess.run([*TETHER, *cli, *args], capture_output=True, timeout=60,
                              env=dk.d.env)
    r = tether(str(tmp_path / "four"), "cpbox:/tmp/")
    assert (r.returncode, r.stdout) == (0, b"copied 4 bytes\n"), r.stderr
    r = tether("cpbox:/tmp/four", str(tmp_path / "back"))
    assert (r.returncode, r.stdout) == (0, b"copied 4 bytes\n"), r.stderr
    assert (tmp_path / "back").read_bytes() == b"four"
    into = tether(str(tmp_path / "missing"), "cpbox:/tmp/")
    out = tether("cpbox:/tmp/missing", str(tmp_path / "m"))
    assert into.returncode == out.returncode == 1, (into.stderr, out.stderr)
    assert b"does not exist" in into.stderr and b"does not exist" in out.stderr


def test_rm_force_records_deleted_while_dockerd_is_unreachable(dk: Dk) -> None:
    """Review finding: with dockerd gone a sandbox could only stay DELETING. --force
    records DELETED; its containers are removed as leftovers once docker answers."""
    c = dk.client()
    sid = dk.create(c, "orphan")["id"]
    mark = dk.kill_daemon(c)
    dk.d.start(env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    c = dk.client()
    with pytest.raises(TetherError) as e:
        c.sandbox_delete(sid, grace=1)
    assert e.value.code in ("RUNTIME_UNAVAILABLE", "DOCKER_UNAVAILABLE")
    assert "--force" in e.value.message and state_of(c, sid) == "DELETING"
    done = c.sandbox_delete(sid, grace=1, force=True)
    assert done.state == "DELETED"
    assert of_sandbox(sid)[0] == [primary(sid)]  # still there: nobody could remove it
    mark = dk.kill_daemon(c)
    c, connected = dk.start_and_reconcile(mark)
    assert connected.data["leftovers"] == 1
    assert of_sandbox(sid) == ([], []) and not host_blocked(sid)


def test_cp_out_never_makes_device_nodes_or_keeps_owners(dk: Dk, tmp_path: Path) -> None:
    """Second review: a sandbox could have `tether cp` create a block device on the
    host (owned by any uid) by putting one in a directory that gets copied out."""
    c = dk.client()
    sid = dk.create(c, "devs")["id"]
    assert run(c, sid, "mkdir -p /d && echo x > /d/f && chown 1234:1234 /d/f && "
                       "mknod /d/loop b 7 0")[0] == 0
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TetherError) as e:
        c.sandbox_copy(sid, "out", "/d", str(out))
    assert e.value.code == "COPY_FAILED" and not (out / "d").exists()
    assert run(c, sid, "rm /d/loop")[0] == 0
    copied = c.sandbox_copy(sid, "out", "/d", str(out))
    assert (copied.sandbox, copied.direction, copied.src) == (sid, "out", "/d")
    assert (out / "d" / "f").read_text() == "x\n"
    assert (out / "d" / "f").stat().st_uid == os.getuid()  # not the sandbox's 1234
