"""A docker sandbox on another engine (``docker_host``): a second real dockerd on its
own unix socket, data root and exec root (no iptables, no default bridge), with the
test image loaded into it. Create, exec, cp, the event watch, recovery after a
daemon SIGKILL and delete must all reach that engine, and nothing the default one.

Skipped when docker cannot be used here, unless ``TETHER_REQUIRE_DOCKER=1``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_docker import (
    DOCKER,
    IMAGE,
    IPTABLES,
    LOCK,
    docker_problem,
    events,
    host_blocked,
    journal_end,
    require,
    run,
    wait_state,
)
from tests.harness import DaemonProc, wait_for
from tether.client.errors import TetherError
from tether.runtime.docker import bridge_name

pytestmark = pytest.mark.xdist_group("docker")


def on(sock: str | None, *args: str, check: bool = True) -> str:
    """``docker`` against the engine at ``sock`` (None: the default one)."""
    env = {**os.environ}
    env.pop("DOCKER_HOST", None)
    if sock is not None:
        env["DOCKER_HOST"] = sock
    r = subprocess.run([DOCKER, *args], capture_output=True, timeout=60, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} on {sock}: {r.stderr.decode()}")
    return r.stdout.decode()


def names(sock: str | None, sandbox: str) -> list[str]:
    return sorted(on(sock, "ps", "-a", "--filter", f"label=tether.sandbox={sandbox}",
                     "--format", "{{.Names}}").split())


@pytest.fixture(scope="module")
def engine2() -> Iterator[str]:
    """A second dockerd, its address, with the test image; stopped and removed after."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        require(docker_problem())
        dockerd = shutil.which("dockerd")
        require(None if dockerd else "no dockerd to start a second engine with")
        assert dockerd is not None
        root = Path(tempfile.mkdtemp(prefix="tether-d2-", dir="/tmp"))
        # Its own default bridge: with --bridge=none dockerd deletes docker0, the first
        # engine's, from the host.
        bridge = f"tthd2{os.getpid() % 100000}"
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True,
                       capture_output=True, timeout=30)
        sock = f"unix://{root}/docker.sock"
        log = open(root / "dockerd.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
             "--pidfile", str(root / "docker.pid"), "-H", sock, "--iptables=false",
             "--ip6tables=false", f"--bridge={bridge}"], stdout=log, stderr=log, cwd="/")
        try:
            wait_for(lambda: subprocess.run(
                [DOCKER, "-H", sock, "info"], capture_output=True, timeout=30
            ).returncode == 0 or None, 60, interval=0.5, what="the second dockerd")
            save = subprocess.Popen([DOCKER, "save", IMAGE], stdout=subprocess.PIPE,
                                    env={k: v for k, v in os.environ.items()
                                         if k != "DOCKER_HOST"})
            subprocess.run([DOCKER, "-H", sock, "load"], stdin=save.stdout,
                           capture_output=True, timeout=120, check=True)
            assert save.wait(60) == 0
            yield sock
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def test_a_sandbox_on_a_second_engine_lives_and_recovers_there(
        daemon: DaemonProc, engine2: str, tmp_path: Path) -> None:
    c = daemon.client(reconnect=10)
    ids: list[str] = []
    spec = (f"runtime: docker\nimage: {IMAGE}\ndocker_host: {engine2}\n"
            f"companions:\n  - name: db\n    image: {IMAGE}\n"
            "    command: nc -ll -p 5432 -e echo pong\n")
    try:
        a = c._call("sandbox.create", {"name": "far", "spec": spec})
        b = c._call("sandbox.create", {"name": "far2", "spec": spec})
        ids += [a["id"], b["id"]]
        assert a["state"] == b["state"] == "READY", (a, b)
        assert a["spec"]["docker_host"] == engine2
        # Everything on the second engine, nothing on the default one.
        assert names(engine2, a["id"]) == [f"tether-companion-{a['id']}-db",
                                           f"tether-primary-{a['id']}"]
        assert names(None, a["id"]) == []
        assert host_blocked(a["id"])  # a unix:// engine is this machine's: blocked here
        # Execs (docker exec through DOCKER_HOST) reach it.
        assert run(c, a["id"], "echo hi; echo err >&2; exit 3") == (3, b"hi\n", b"err\n")
        # (Not the companion's port: with iptables off the second engine adds no FORWARD
        # rule, and the first one's DROP policy drops bridged packets.)
        # tether cp both ways.
        (tmp_path / "in.txt").write_bytes(b"far away\n")
        c.sandbox_copy(a["id"], "in", str(tmp_path / "in.txt"), "/tmp/in.txt")
        assert run(c, a["id"], "cat /tmp/in.txt")[1] == b"far away\n"
        c.sandbox_copy(a["id"], "out", "/tmp/in.txt", str(tmp_path / "back.txt"))
        assert (tmp_path / "back.txt").read_bytes() == b"far away\n"
        # The watch of that engine: a container killed there fails the sandbox.
        wait_for(lambda: any(e.type == "docker.connected" and e.data.get("docker_host")
                             == engine2 for e in events(c)) or None, 30, interval=0.1,
                 what="the watch of the second engine")
        on(engine2, "kill", f"tether-primary-{b['id']}")
        sb = wait_state(c, b["id"], "FAILED", timeout=30)
        assert sb.reason is not None and "CONTAINER_EXITED" in sb.reason, sb
        status = c._call("daemon.status", {})["runtimes"]["docker"]
        assert status["hosts"][engine2]["connected"] is True, status
        # Recovery: a SIGKILLed daemon reconciles that engine when it starts again.
        mark = journal_end(c)
        daemon.kill9()
        on(engine2, "kill", f"tether-primary-{a['id']}")
        daemon.start()
        c = daemon.client(reconnect=10)

        def reconnected() -> bool | None:
            return any(e.type == "docker.connected" and e.data.get("docker_host") == engine2
                       for e in events(c, mark)) or None
        wait_for(reconnected, 30, interval=0.1, what="docker.connected of the engine")
        sb = wait_state(c, a["id"], "FAILED", timeout=30)
        assert sb.reason is not None and "CONTAINER_EXITED" in sb.reason, sb
        # Delete removes what is on that engine.
        for sid in ids:
            c.sandbox_delete(sid, grace=1)
            assert names(engine2, sid) == []
            assert not host_blocked(sid)
    finally:
        with contextlib.suppress(Exception):
            for sid in ids:
                with contextlib.suppress(TetherError):
                    c.sandbox_delete(sid, grace=1)
        for sid in ids:
            while host_blocked(sid):
                subprocess.run([IPTABLES, "-w", "5", "-D", "INPUT", "-i", bridge_name(sid),
                                "-j", "DROP"], capture_output=True, timeout=30)


def test_an_unreachable_engine_is_refused_before_anything_is_recorded(
        daemon: DaemonProc, engine2: str) -> None:
    c = daemon.client(reconnect=10)
    gone = f"unix:///tmp/tether-no-such-{os.getpid()}/docker.sock"
    t0 = time.monotonic()
    with pytest.raises(TetherError) as e:
        c._call("sandbox.create", {"name": "nowhere", "spec": (
            f"runtime: docker\nimage: {IMAGE}\ndocker_host: {gone}\n")})
    assert time.monotonic() - t0 < 60  # sanity bound only
    assert e.value.code == "RUNTIME_UNAVAILABLE", e.value
    assert f"dockerd at {gone} is not reachable" in e.value.message, e.value.message
    assert e.value.data["docker_host"] == gone
    assert [sb for sb in c.sandbox_list(all=True) if sb.name == "nowhere"] == []
    assert c.health().status == "SERVING"
