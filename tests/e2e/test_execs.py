"""Execs through the real daemon: exit codes, cancel (grandchildren included), timeouts,
logs from offsets and while following, addressing by id, prefix and name."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, wait_for
from tether.client.errors import TetherError
from tether.hostio.proc import is_same_process, proc_start_time


def _pids_in_file(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def test_cancel_kills_grandchildren_after_grace(daemon: DaemonProc, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The leader ignores SIGTERM; its children do too; only SIGKILL ends them.
    script = (f"trap '' TERM; (trap '' TERM; sleep 100 & echo $! >> {pids}; wait) & "
              f"sleep 100 & echo $! >> {pids}; echo ready; wait")
    c = daemon.client()
    x = c.exec_start(["sh", "-c", script])
    wait_for(lambda: pids.exists() and len(_pids_in_file(pids)) == 2)
    # Identity by start time: another test may rewind the pid counter (ns_last_pid), so a
    # killed grandchild's pid can come back as someone else's.
    started = {pid: proc_start_time(pid) for pid in _pids_in_file(pids)}
    t0 = time.monotonic()
    c.exec_cancel(x.id, grace=0.5)
    done = c.exec_wait(x.id, timeout=10)
    elapsed = time.monotonic() - t0
    assert done.state == "CANCELLED"
    assert done.signal == signal.SIGKILL
    assert elapsed >= 0.4
    for pid, st in started.items():
        assert st is not None
        wait_for(lambda p=pid, s=st: not is_same_process(p, s), what=f"grandchild {pid} killed")


def test_cancel_with_cooperative_child_ends_with_sigterm(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"])
    c.exec_cancel(x.id, grace=5)
    done = c.exec_wait(x.id, timeout=10)
    assert (done.state, done.signal, done.exit_code) == ("CANCELLED", 15, None)
    # Cancelling again is harmless and changes nothing.
    assert c.exec_cancel(x.id).state == "CANCELLED"


def test_cancel_with_custom_signal(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"])
    c.exec_cancel(x.id, signal="INT", grace=5)
    done = c.exec_wait(x.id, timeout=10)
    assert done.signal == signal.SIGINT
    with pytest.raises(TetherError) as e:
        c.exec_cancel(x.id, signal="NOPE")
    assert e.value.rpc_code == -32602


def test_timeout_cancels_and_says_so(daemon: DaemonProc) -> None:
    c = daemon.client()
    # The timeout leaves the shell ample time to set its trap even on a loaded machine.
    x = c.exec_start(["sh", "-c", "trap '' TERM; sleep 100"], timeout=2, kill_grace=0.3)
    done = c.exec_wait(x.id, timeout=10)
    assert done.state == "CANCELLED"
    assert done.signal == signal.SIGKILL
    assert "timeout" in done.reason


def test_signalled_exec_is_finished_with_signal(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c", "kill -USR1 $$"])
    done = c.exec_wait(x.id, timeout=10)
    assert (done.state, done.exit_code, done.signal) == ("FINISHED", None, 10)
    r = daemon.cli("wait", x.id)
    assert r.returncode == 128 + 10 and r.stdout.strip() == b"138"


def test_env_cwd_and_tether_variables(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c", 'printf "%s|%s|%s" "$FOO" "$PWD" "$TETHER_EXEC_ID"'],
                     env={"FOO": "bar baz"}, cwd=str(tmp_path))
    c.exec_wait(x.id, timeout=10)
    out = b"".join(c.read_logs(x.id)).decode()
    assert out == f"bar baz|{tmp_path}|{x.id}"


def test_start_errors(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    with pytest.raises(TetherError) as e:
        c.exec_start(["definitely-not-a-command-xyz"])
    assert e.value.code == "START_FAILED" and "command not found" in e.value.message
    failed = c.exec_get(e.value.data["exec"])
    assert failed.state == "FAILED"
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], cwd=str(tmp_path / "missing"))
    assert e.value.rpc_code == -32602 and "cwd" in e.value.message
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], cwd="relative/dir")
    assert e.value.rpc_code == -32602


def test_addressing_by_prefix_and_name(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["sleep", "100"], name="web-1")
    assert c.exec_get("web-1").id == x.id
    assert c.exec_get(x.id[:6]).id == x.id
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], name="web-1")
    assert e.value.code == "NAME_IN_USE"
    c.exec_cancel("web-1", grace=1)
    c.exec_wait("web-1", timeout=10)
    # Once the first ended, the name can be reused; it then means the newest exec.
    y = c.exec_start(["true"], name="web-1")
    assert c.exec_get("web-1").id == y.id
    with pytest.raises(TetherError) as e:
        c.exec_get("zzzz")
    assert e.value.code == "EXEC_NOT_FOUND"


def test_logs_offset_and_follow(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    x = c.exec_start(["sh", "-c",
                      f"printf 0123456789; while [ ! -e {tmp_path}/go ]; do sleep 0.02; done; "
                      "printf abc"])
    wait_for(lambda: c.exec_logs(x.id).size == 10)
    chunk = c.exec_logs(x.id, offset=4, limit=3)
    assert chunk.data == b"456" and chunk.offset == 7
    got: list[bytes] = []
    follower = threading.Thread(target=lambda: got.extend(c2.read_logs(x.id, offset=7,
                                                                       follow=True)))
    c2 = daemon.client()
    follower.start()
    time.sleep(0.2)
    (tmp_path / "go").touch()
    follower.join(10)
    assert not follower.is_alive()
    assert b"".join(got) == b"789abc"
    r = daemon.cli("logs", "--offset", "3", x.id)
    assert r.stdout == b"3456789abc"


def test_cli_run_foreground_streams_and_exits_with_code(daemon: DaemonProc) -> None:
    r = daemon.cli("run", "--", "sh", "-c", "echo out; echo err >&2; exit 9")
    assert r.returncode == 9
    assert r.stdout == b"out\n"
    assert r.stderr == b"err\n"
    r = daemon.cli("run", "-d", "--name", "bg", "--", "sleep", "100")
    assert r.returncode == 0
    exec_id = r.stdout.decode().strip()
    assert daemon.client().exec_get("bg").id == exec_id
    r = daemon.cli("run", "--", "no-such-command-xyz")
    assert r.returncode == 127 and b"command not found" in r.stderr


def test_cli_ctrl_c_cancels_foreground_exec(daemon: DaemonProc) -> None:
    p = subprocess.Popen([*TETHER, "--home", str(daemon.home), "run", "--name", "fg", "--",
                          "sleep", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    c = daemon.client()
    wait_for(lambda: any(x.name == "fg" for x in c.exec_list()))
    p.send_signal(signal.SIGINT)
    assert p.wait(15) == 128 + signal.SIGTERM
    assert c.exec_get("fg").state == "CANCELLED"


def test_cli_ps_json_fields(daemon: DaemonProc) -> None:
    daemon.cli("run", "--", "true")
    daemon.cli("run", "-d", "--name", "sleeper", "--", "sleep", "100")
    import json

    rows = json.loads(daemon.cli("ps", "-a", "--json").stdout)
    assert len(rows) == 2
    for row in rows:
        for key in ("id", "name", "sandbox", "state", "exit_code", "pid", "started_at",
                    "ended_at", "reason"):
            assert key in row
    running = json.loads(daemon.cli("ps", "--json").stdout)
    assert [r["name"] for r in running] == ["sleeper"]
    assert running[0]["pid"] and is_same_process(
        running[0]["pid"], daemon.handles(running[0]["id"])["child"]["start_time"])
    r = daemon.cli("kill", "--grace", "1", "sleeper")
    assert r.returncode == 0
    assert daemon.cli("wait", "sleeper").returncode == 128 + signal.SIGTERM


def test_sandboxes_lifecycle(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    sb = c.sandbox_create("work", workspace=str(tmp_path), env={"SB": "1"})
    assert sb.state == "READY"
    x = c.exec_start(["sh", "-c", 'printf "%s %s" "$SB" "$PWD"; sleep 100'], sandbox="work")
    wait_for(lambda: c.exec_logs(x.id).size > 0)
    assert c.exec_logs(x.id).data == f"1 {tmp_path}".encode()
    assert c.sandbox_stop("work", grace=1).state == "STOPPED"
    assert c.exec_get(x.id).state == "CANCELLED"
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], sandbox="work")
    assert e.value.code == "SANDBOX_NOT_READY"
    assert c.sandbox_start("work").state == "READY"
    assert c.sandbox_delete("work").state == "DELETED"
    assert [s.name for s in c.sandbox_list()] == ["default"]
    # Logs outlive the sandbox.
    assert (daemon.home / "logs" / sb.id / f"{x.id}.stdout.log").exists()
    with pytest.raises(TetherError) as e:
        c.sandbox_delete("default")
    assert e.value.code == "DEFAULT_SANDBOX"


def test_many_concurrent_starts(daemon: DaemonProc) -> None:
    results: list[str] = []

    def worker() -> None:
        with daemon.client() as c:
            for _ in range(10):
                results.append(c.exec_start(["true"]).id)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(set(results)) == 40
    c = daemon.client()
    for x in results:
        assert c.exec_wait(x, timeout=20).state == "FINISHED"


def test_command_is_found_on_the_execs_own_path(daemon: DaemonProc, tmp_path: Path) -> None:
    tool = tmp_path / "my-tool"
    tool.write_text("#!/bin/sh\necho from-my-tool\n")
    tool.chmod(0o755)
    c = daemon.client()
    x = c.exec_start(["my-tool"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert c.exec_wait(x.id, timeout=10).exit_code == 0
    assert b"".join(c.read_logs(x.id)) == b"from-my-tool\n"
    with pytest.raises(TetherError) as e:
        c.exec_start(["my-tool"], env={"PATH": "/usr/bin:/bin"})
    assert "command not found" in e.value.message
    assert not list((daemon.home / "run").glob("*.sock")), "failed start left its socket"


def test_sandbox_delete_finishes_when_the_client_goes_away(daemon: DaemonProc) -> None:
    from tests.harness import RawConn

    c = daemon.client()
    c.sandbox_create("gone")
    c.exec_start(["sleep", "100"], sandbox="gone")
    with RawConn(daemon.socket) as raw:
        raw.send_obj({"jsonrpc": "2.0", "id": 1, "method": "sandbox.delete",
                      "params": {"sandbox": "gone", "grace": 1}})
    wait_for(lambda: all(s.name != "gone" for s in c.sandbox_list()),
             what="sandbox deleted although its client left")


def test_idle_timeout_stops_and_ttl_deletes(stopped_daemon: DaemonProc) -> None:
    d = stopped_daemon
    d.start(env={"TETHER_SWEEP_INTERVAL": "0.2"})
    r = d.cli("sandbox", "create", "--runtime", "process", "--idle-timeout", "3", "idle")
    assert r.returncode == 0, r.stderr
    c = d.client()
    c.sandbox_create("short", ttl=1.5)
    x = c.exec_start(["sleep", "2"], sandbox="idle")
    wait_for(lambda: c.sandbox_get("idle").state == "STOPPED", timeout=15)
    # It stayed READY while the exec ran, and stopped only 3 s after it ended. (The idle
    # clock starts at READY too: 3 s leaves a loaded machine time to start the exec.)
    assert c.exec_get(x.id).state == "FINISHED"
    stopped = [e for e in c.events_list(limit=10000).events
               if e.type == "sandbox.state" and e.state == "STOPPED"]
    assert "idle_timeout" in stopped[0].reason
    assert stopped[0].time >= c.exec_get(x.id).ended_at + 2.9
    wait_for(lambda: all(s.name != "short" for s in c.sandbox_list()),
             timeout=15, what="ttl deletion")


def test_hostile_values_on_the_monitor_socket_do_not_kill_it(daemon: DaemonProc) -> None:
    """Review finding: 1e400 and friends used to crash the monitor, killing the command."""
    import json as _json
    import socket as _socket

    c = daemon.client()
    x = c.exec_start(["sh", "-c", "sleep 100"], tty=True)
    sock_path = x.socket
    for line in (b'{"op":"attach","rows":1e400}', b'{"op":"attach","replay":-1e400}',
                 b'{"op":"signal","signal":1e400}', b'{"op":"watch","since":1e400}',
                 b"\xff\xfe not json", b'{"op":[]}', b"[" * 5000):
        with _socket.socket(_socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(sock_path)
            s.sendall(line + b"\n")
            with contextlib.suppress(OSError):  # dropping the offender is fine
                s.recv(4096)
    with _socket.socket(_socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(b'{"op":"ping"}\n')
        assert _json.loads(s.recv(4096))["ok"] is True
    assert c.exec_get(x.id).state == "RUNNING"


def test_very_long_timeouts_and_graces_are_fine(daemon: DaemonProc) -> None:
    """Review finding: a wait past ~24.8 days overflowed epoll and killed the monitor."""
    c = daemon.client()
    x = c.exec_start(["sleep", "100"], timeout=3e6)
    time.sleep(0.3)
    assert c.exec_get(x.id).state == "RUNNING"
    c.exec_cancel(x.id, signal="INT", grace=3e6)  # sleep dies of SIGINT at once
    done = c.exec_wait(x.id, timeout=10)
    assert (done.state, done.signal) == ("CANCELLED", signal.SIGINT)


def test_lists_page_and_filter_over_the_socket(daemon: DaemonProc, tmp_path: Path) -> None:
    """``exec.list``, ``lineage.list`` and ``events.list`` as a dashboard pages them: a
    page of the newest, how many match, by state, sandbox and text; the newest events."""
    from tests.harness import RawConn

    c = daemon.client()
    ids = [c.exec_start(["echo", f"word{i}"], name=f"pager-{i}").id for i in range(6)]
    for x in ids:
        c.exec_wait(x, timeout=20)
    live = c.exec_start(["sleep", "30"], name="sleeper")
    page = c.exec_page(limit=4, offset=1)
    assert [x.id for x in page.execs] == [*ids[::-1][:4]] and page.total == 7
    assert c.exec_page(states=["RUNNING"]).execs[0].id == live.id
    assert [x.id for x in c.exec_page(query="word3").execs] == [ids[3]]
    assert c.exec_page(query="PAGER-", sandbox="default").total == 6
    assert [x.id for x in c.exec_list()] == [live.id]  # without paging: as before
    assert c.lineage_page(statuses=["ACTIVE"]).total == 0
    with RawConn(daemon.socket) as conn:
        for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"states": ["DONE"]},
                    {"query": "x" * 257}):
            reply = conn.call("exec.list", bad)
            assert reply["error"]["data"]["code"] == "INVALID_PARAMS", (bad, reply)
        reply = conn.call("events.list", {"last": True, "sandbox": "default"})
        assert reply["error"]["data"]["code"] == "INVALID_PARAMS"
    every = c.events_list(since=0, limit=1000).events
    newest = c.events_list(last=True, limit=3)
    assert newest.events == every[-3:] and newest.next == every[-1].gseq
    assert c.events_list(last=True, limit=3, since=every[-2].gseq).events == every[-1:]
