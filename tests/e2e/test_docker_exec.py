"""Docker execs run by their monitors through dockerd's Engine API (no ``docker`` CLI on
the path), against the real dockerd, a real daemon, real SIGKILLs and real PTYs: output
byte-exact on both streams and the real exit code across a daemon SIGKILL (and the
``docker exec`` path, TETHER_DOCKER_EXEC=cli, the same); stdin; a terminal attached,
resized and typed into; kill's SIGTERM then SIGKILL reaching the exec's processes in the
container and no other's; dockerd refusing the exec; a killed monitor or client taking
the command in the container along.

Skipped when docker cannot be used here, unless ``TETHER_REQUIRE_DOCKER=1``; every test
holds the machine-wide docker test lock (one test elsewhere restarts dockerd).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pexpect
import pytest

from tests.e2e import test_docker, test_terminal
from tests.e2e.test_docker import Dk, docker, logs, primary
from tests.e2e.test_terminal import Terminals, detach, stty_size, type_and_see, wait_stty_size
from tests.harness import wait_for
from tether.client.errors import TetherError
from tether.monitor.child import START_GATE

pytestmark = pytest.mark.xdist_group("docker")

# Their fixtures: a daemon's docker sandboxes removed afterwards (``dk``), the machine-wide
# docker test lock (autouse), terminals on real PTYs (``terms``).
dk = test_docker.dk
docker_usable = test_docker.docker_usable
terms = test_terminal.terms

#: Lists the pids in the primary whose environment holds TETHER_EXEC_ID=$1.
OF_EXEC = ('for d in /proc/[0-9]*; do tr "\\0" "\\n" < $d/environ 2>/dev/null | '
           'grep -qx "TETHER_EXEC_ID=$1" && echo ${d#/proc/}; done; exit 0')


def inside(sandbox: str, exec_id: str) -> list[str]:
    """The exec's processes in the sandbox's primary container."""
    return docker("exec", primary(sandbox), "sh", "-c", OF_EXEC, "of", exec_id).split()


def ps(sandbox: str) -> str:
    return docker("exec", primary(sandbox), "ps", "-o", "pid,args")


def cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def past_its_gate(pid: int) -> list[bytes]:
    """The command line of the exec's child once it runs the command. The start report
    comes before the monitor opens the child's gate (``START_GATE``, a ``/bin/sh`` that
    then execs the command), and while the kernel runs that ``execve`` the child's
    cmdline reads empty (a long window for a binary as large as ``docker``)."""
    gate = [os.fsencode(a) for a in START_GATE]
    return wait_for(lambda: (a := cmdline(pid))[:len(gate)] != gate and a != [b""] and a,
                    10, what=f"pid {pid} past its start gate")


@pytest.mark.parametrize("via", ["api", "cli"])
def test_output_is_byte_exact_on_both_streams_across_a_daemon_sigkill(
        dk: Dk, tmp_path: Path, via: str) -> None:
    if via == "cli":  # the docker CLI's path: engines behind TLS or ssh, or asked for
        dk.d.term()
        dk.d.env["TETHER_DOCKER_EXEC"] = "cli"
        dk.d.start()
    ws = tmp_path / "ws"
    ws.mkdir()
    chunk = os.urandom(40_000) + bytes(range(256))  # every byte value, no line structure
    (ws / "chunk").write_bytes(chunk)
    c = dk.client()
    sid = dk.create(c, "bytes", f"workspace: {ws}\n")["id"]
    n = 60
    x = c.exec_start(["sh", "-c", f'i=0; while [ $i -lt {n} ]; do cat chunk; echo "err $i" >&2; '
                                  'i=$((i+1)); sleep 0.05; done; exit 7'], sandbox=sid,
                     cwd=str(ws))
    child = dk.d.handles(x.id)["child"]["pid"]
    if via == "api":  # the monitor's own fork, no docker CLI anywhere
        assert cmdline(child)[:3] == cmdline(dk.d.handles(x.id)["monitor"]["pid"])[:3]
        assert Path(f"/proc/{child}/comm").read_text().strip() != "docker"
    else:
        assert os.path.basename(past_its_gate(child)[0]) == b"docker"
    wait_for(lambda: logs(c, x.id, "stderr").count(b"\n") >= 5, 30, what="output")
    dk.d.kill9()
    time.sleep(0.3)  # it writes on meanwhile, with no daemon
    dk.d.start()
    c = dk.client()
    done = c.exec_wait(x.id, timeout=60)
    assert (done.state, done.exit_code, done.signal) == ("FINISHED", 7, None), done
    out = logs(c, x.id)
    assert len(out) == n * len(chunk) and out == chunk * n
    assert Path(done.stdout_path).read_bytes() == chunk * n
    assert logs(c, x.id, "stderr") == b"".join(b"err %d\n" % i for i in range(n))


def test_stdin_reaches_the_command_byte_exact_and_closes(dk: Dk) -> None:
    c = dk.client()
    sid = dk.create(c, "stdin")["id"]
    data = os.urandom(3_000_000)
    x = c.exec_start(["sh", "-c", "cat; echo end >&2"], sandbox=sid, stdin=True)
    with c.attach(x.id, replay=0) as att:
        for i in range(0, len(data), 100_000):
            att.write(data[i:i + 100_000])
        att.close_stdin()  # dockerd closes the command's stdin: cat ends
        done = c.exec_wait(x.id, timeout=60)
    assert (done.state, done.exit_code) == ("FINISHED", 0), done
    assert logs(c, x.id) == data
    assert logs(c, x.id, "stderr") == b"end\n"


def test_dockerd_refusing_the_exec_is_a_failed_start(dk: Dk) -> None:
    """A paused primary (the sandbox stays READY: tether does not watch pauses): dockerd
    refuses the exec's creation, so nothing ran, and its words say why."""
    c = dk.client()
    sid = dk.create(c, "paused")["id"]
    docker("pause", primary(sid))
    try:
        with pytest.raises(TetherError) as e:
            c.exec_start(["true"], sandbox=sid)
    finally:
        docker("unpause", primary(sid))
    assert e.value.code == "START_FAILED", e.value
    assert "dockerd refused the exec" in e.value.message and "paused" in e.value.message
    failed = c.exec_get(e.value.data["exec"])
    assert (failed.state, failed.exit_code) == ("FAILED", 127), failed
    x = c.exec_start(["sh", "-c", "exit 4"], sandbox=sid)  # and it runs execs again
    assert c.exec_wait(x.id, timeout=30).exit_code == 4


def test_a_terminal_exec_attaches_resizes_takes_input_and_exits(dk: Dk,
                                                                terms: Terminals) -> None:
    c = dk.client()
    sid = dk.create(c, "tty")["id"]
    xid = terms.start("sh", "-i", flags=("-it", "--sandbox", sid))
    a = terms.attach(xid, rows=24, cols=80)
    assert stty_size(a) == (24, 80)
    a.setwinsize(33, 101)  # SIGWINCH to the monitor's client → /exec/{id}/resize
    wait_stty_size(a, (33, 101))
    type_and_see(a, "typed")
    # Our side of the terminal is raw: the container's cooks. Ctrl-C interrupts the
    # command inside (the client, a process on our PTY, gets no SIGINT), and a control
    # byte reaches the program as it was typed.
    a.send("sleep 100\r")
    a.expect_exact("sleep 100")
    a.send("\x03")
    type_and_see(a, "interrupted")
    a.send("od -An -c\r")
    a.expect_exact("od -An -c")
    a.send("x\x01y\r\x04")
    a.expect(rb"x 001 +y +\\n")
    detach(a)
    b = terms.attach(xid, rows=40, cols=120, sync=False)
    wait_stty_size(b, (40, 120))
    b.send("exit 5\r")
    b.expect(pexpect.EOF)
    b.close()
    assert b.exitstatus == 5, b.before
    done = c.exec_wait(xid, timeout=30)
    assert (done.state, done.exit_code) == ("FINISHED", 5), done


def test_kill_sends_sigterm_then_sigkill_to_the_execs_processes_and_no_others(dk: Dk) -> None:
    c = dk.client()
    sid = dk.create(c, "kill")["id"]
    other = c.exec_start(["sleep", "1002"], sandbox=sid)
    x = c.exec_start(["sh", "-c", 'trap "echo got TERM" TERM; (trap "" TERM; sleep 1001) & '
                                  'echo up; while :; do sleep 0.1; done'], sandbox=sid)
    wait_for(lambda: b"up" in logs(c, x.id) and "sleep 1001" in ps(sid), 30, what="started")
    t0 = time.monotonic()
    c.exec_cancel(x.id, grace=2)
    done = c.exec_wait(x.id, timeout=30)
    assert time.monotonic() - t0 >= 1.5  # the grace was given: TERM first
    assert done.state == "CANCELLED" and done.exit_code == 137, done  # then SIGKILL
    assert b"got TERM" in logs(c, x.id)
    assert inside(sid, x.id) == []  # the TERM-proof child too
    assert "sleep 1001" not in ps(sid)
    assert c.exec_get(other.id).state == "RUNNING" and "sleep 1002" in ps(sid)
    assert len(inside(sid, other.id)) == 1
    c.exec_cancel(other.id, grace=1)
    assert c.exec_wait(other.id, timeout=30).state == "CANCELLED"


@pytest.mark.parametrize("victim", ["monitor", "child"])
def test_a_killed_monitor_or_client_takes_the_command_in_the_container_along(
        dk: Dk, victim: str) -> None:
    """Nobody could record the command's end: it must not run on untracked in the
    container (the recovery contract, docs/STATE.md)."""
    c = dk.client()
    sid = dk.create(c, "orphan")["id"]
    x = c.exec_start(["sh", "-c", "while :; do echo tick; sleep 0.1; done"], sandbox=sid)
    wait_for(lambda: logs(c, x.id).count(b"tick") >= 3, 30, what="ticks")
    assert inside(sid, x.id)
    os.kill(dk.d.handles(x.id)[victim]["pid"], signal.SIGKILL)
    done = c.exec_wait(x.id, timeout=30)
    if victim == "monitor":
        assert done.state == "FAILED" and "was killed" in (done.reason or ""), done
    else:  # the monitor saw its child killed
        assert (done.state, done.signal) == ("FINISHED", signal.SIGKILL), done
    wait_for(lambda: inside(sid, x.id) == [], 30, what="the command gone from the container")


def test_a_command_cannot_forge_the_stream_framing(dk: Dk, tmp_path: Path) -> None:
    """The agent is the attacker: bytes shaped like dockerd's frame headers (stderr, a huge
    size, dockerd's own error stream), then a 3 MB burst in one write, all on its stdout.
    dockerd frames every write, so all of it is stdout data, byte for byte."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fake = (b"\x02\x00\x00\x00\x00\x00\x00\x05forge" + b"\x03\x00\x00\x00\xff\xff\xff\xff"
            + b"\x02\x00\x00\x00\x00\x00\x00")  # a header cut short, too
    burst = os.urandom(3_000_000)
    (ws / "attack").write_bytes(fake + burst)
    c = dk.client()
    sid = dk.create(c, "forge", f"workspace: {ws}\n")["id"]
    x = c.exec_start(["sh", "-c", "cat attack; printf '\\002\\000\\000\\000'"], sandbox=sid,
                     cwd=str(ws))
    done = c.exec_wait(x.id, timeout=60)
    assert (done.state, done.exit_code) == ("FINISHED", 0), done
    assert logs(c, x.id) == fake + burst + b"\x02\x00\x00\x00"
    assert logs(c, x.id, "stderr") == b""

