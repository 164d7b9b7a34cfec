"""The bwrap runtime with real bubblewrap namespaces and a real daemon."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import DaemonProc, wait_for
from tether.client.blocking import Client
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")
_KERNEL = tuple(int(p) for p in os.uname().release.split("-")[0].split(".")[:2])
#: A signal death below bwrap is known only through PIDFD_INFO_EXIT (tether.monitor.pin).
needs_exit_info = pytest.mark.skipif(_KERNEL < (6, 15), reason="needs Linux 6.15+")


def run(c: Client, sandbox: str, script: str, cwd: Path | None = None) -> tuple[int, bytes, bytes]:
    x = c.exec_start(["sh", "-c", script], sandbox=sandbox,
                     cwd=str(cwd) if cwd else None)
    done = c.exec_wait(x.id, timeout=20)
    out = b"".join(c.read_logs(x.id))
    err = b"".join(c.read_logs(x.id, stream="stderr"))
    return done.exit_code, out, err


@pytest.fixture
def box(daemon: DaemonProc, tmp_path: Path) -> tuple[Client, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    c = daemon.client()
    sb = c.sandbox_create("box", runtime="bwrap", workspace=str(ws))
    assert sb.spec.runtime == "bwrap"
    return c, ws


def test_workspace_is_writable_and_nothing_else_is(box: tuple[Client, Path],
                                                   tmp_path: Path) -> None:
    c, ws = box
    code, out, _ = run(c, "box", f"echo hi > {ws}/made && cat {ws}/made")
    assert (code, out) == (0, b"hi\n") and (ws / "made").read_text() == "hi\n"
    code, _, err = run(c, "box", "touch /usr/tether-was-here")
    assert code != 0 and b"Read-only file system" in err
    assert not Path("/usr/tether-was-here").exists()
    code, _, _ = run(c, "box", "echo x > /etc/tether-was-here")
    assert code != 0 and not Path("/etc/tether-was-here").exists()


def test_files_outside_the_allowed_mounts_cannot_be_read(box: tuple[Client, Path],
                                                         tmp_path: Path) -> None:
    c, _ = box
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    code, out, _ = run(c, "box", f"cat {secret}")
    assert code != 0 and b"top secret" not in out
    code, out, _ = run(c, "box", "ls /root /home 2>&1; echo done")
    assert b".pyenv" not in out


def test_tether_home_and_host_sockets_are_hidden(daemon: DaemonProc, box: tuple[Client, Path],
                                                 ) -> None:
    c, _ = box
    _, out, _ = run(c, "box", f"ls {daemon.home} 2>&1; ls /run 2>&1; echo end")
    assert b"tether.db" not in out and b"tether.sock" not in out
    assert b"docker.sock" not in out


def test_no_network_by_default(box: tuple[Client, Path]) -> None:
    """A real connect (dash has no /dev/tcp): the same listener answers on the host."""
    c, _ = box
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    probe = (f"import socket; s = socket.socket(); s.settimeout(2); "
             f"print('reached' if s.connect_ex(('127.0.0.1', {port})) == 0 else 'unreachable')")
    try:
        assert subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True,
                              timeout=10).stdout == b"reached\n"
        _, out, _ = run(c, "box", "awk -F: 'NR > 2 {print $1}' /proc/net/dev; "
                                  f"/usr/bin/python3 -c \"{probe}\"")
    finally:
        srv.close()
    assert out.split() == [b"lo", b"unreachable"], out


def test_host_processes_are_invisible(box: tuple[Client, Path]) -> None:
    c, _ = box
    code, out, _ = run(c, "box", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; "
                       "echo; done")
    assert code == 0
    assert b"tether.cli.main" not in out and b"tether.daemon" not in out  # not the daemon
    assert len(out.splitlines()) <= 6  # bwrap's init, the shell and its children only


def test_killing_the_exec_kills_everything_inside(box: tuple[Client, Path]) -> None:
    c, _ = box
    marker = f".{os.getpid()}7"  # a unique fraction in each sleeper's duration
    x = c.exec_start(["sh", "-c", f"setsid sleep 300{marker} & (sleep 301{marker} &) ; "
                                  f"exec sleep 302{marker}"], sandbox="box")
    wait_for(lambda: len(_pids_with(marker)) == 3, what="three sleepers")
    c.exec_cancel(x.id, grace=1)
    assert c.exec_wait(x.id, timeout=10).state == "CANCELLED"
    wait_for(lambda: not _pids_with(marker), what="every process in the sandbox gone")


def _pids_with(marker: str) -> list[int]:
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{d}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if cmd.startswith(b"sleep\0") and marker.encode() in cmd and state != "Z":
                found.append(int(d))
    return found


def test_bwrap_exec_survives_a_daemon_sigkill(daemon: DaemonProc, box: tuple[Client, Path],
                                              tmp_path: Path) -> None:
    c, ws = box
    x = c.exec_start(["sh", "-c", f"while [ ! -e {ws}/go ]; do sleep 0.05; done; echo out; "
                                  "exit 4"], sandbox="box")
    daemon.kill9()
    daemon.start()
    c = daemon.client()
    assert c.exec_get(x.id).state == "RUNNING"
    (ws / "go").touch()
    done = c.exec_wait(x.id, timeout=10)
    assert (done.state, done.exit_code) == ("FINISHED", 4)
    assert c.exec_logs(x.id).data == b"out\n"


def test_tty_exec_in_bwrap(box: tuple[Client, Path]) -> None:
    c, _ = box
    x = c.exec_start(["sh", "-c", "tty; stty size"], sandbox="box", tty=True, rows=33,
                     cols=77)
    c.exec_wait(x.id, timeout=10)
    out = b"".join(c.read_logs(x.id, stream="pty"))
    assert b"33 77" in out  # bwrap presents the terminal as /dev/console
    assert b"not a tty" not in out


def test_runtime_auto_and_status(daemon: DaemonProc) -> None:
    c = daemon.client()
    sb = c.sandbox_create("auto-box", runtime="auto")
    assert sb.spec.runtime == "bwrap"
    st = c.status()
    assert st.runtimes["bwrap"].available is True


def test_sandbox_from_a_spec_file_through_the_cli(daemon: DaemonProc, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("dataset")
    spec = tmp_path / "spec.yaml"
    spec.write_text("params:\n  dir: ./data\n  mode: slow\nruntime: bwrap\nworkspace: ./ws\n"
                    "mounts:\n  - ${params.dir}:/data:ro\nenv:\n  MODE: ${params.mode}\n"
                    "network: none\nlabels:\n  team: core\nparams_note: x\n")
    r = daemon.cli("sandbox", "create", "-f", str(spec), "--set", "mode=fast", "specbox")
    assert r.returncode == 2
    assert b"spec.yaml:13: params_note: unknown key" in r.stderr
    spec.write_text(spec.read_text().replace("params_note: x\n", ""))
    r = daemon.cli("sandbox", "create", "-f", str(spec), "--set", "mode=fast", "specbox")
    assert r.returncode == 0, r.stderr
    c = daemon.client()
    sb = c.sandbox_get("specbox")
    assert sb.spec.runtime == "bwrap" and sb.spec.env == {"MODE": "fast"}
    assert [(m.source, m.target, m.mode) for m in sb.spec.mounts] == [
        (str(tmp_path / "data"), "/data", "ro")]
    _, out, err = run(c, "specbox", "cat /data/in.txt; echo; echo $MODE; touch /data/x || "
                                       f"echo read-only; touch {tmp_path}/ws/made && echo ok",
                         cwd=tmp_path / "ws")
    assert out.split() == [b"dataset", b"fast", b"read-only", b"ok"], err


def test_a_cwd_cannot_widen_the_sandbox_to_tether_home(daemon: DaemonProc,
                                                       tmp_path: Path) -> None:
    """Review finding: a symlinked or ``..`` cwd used to mount tether's home's parent.
    A cwd inside the home is refused; a cwd that contains it (the user's own home
    directory, typically) is mounted with tether's home hidden under it."""
    from tether.client.errors import TetherError

    c = daemon.client()
    c.sandbox_create("bare", runtime="bwrap")  # no workspace: the cwd is the writable place
    for cwd in (str(daemon.home / "logs" / ".."), str(daemon.home / "logs")):
        with pytest.raises(TetherError) as e:
            c.exec_start(["true"], sandbox="bare", cwd=cwd)
        assert "tether's home" in e.value.message
    assert not c.exec_list(all=True), "a refused exec must leave no record"
    # This home's parent is /tmp itself: a symlink to it is refused as a system place
    # (tests/test_sandbox_cli.py runs from a home's parent that is a plain directory).
    link = tmp_path / "lnk"
    link.symlink_to(daemon.home.parent)
    with pytest.raises(TetherError) as e:
        c.exec_start(["true"], sandbox="bare", cwd=str(link))
    assert "/tmp is or contains /tmp" in e.value.message
    ws = tmp_path / "ws"
    ws.mkdir()
    _, out, _ = run(c, "bare", f"ls {daemon.home} 2>&1; echo end", cwd=ws)
    assert b"tether.sock" not in out


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon hands bwrap capabilities")
def test_a_root_daemon_runs_bwrap_without_capabilities(box: tuple[Client, Path]) -> None:
    """Review finding: as root, bwrap kept root's capabilities, enough to remount /etc
    read-write or unmount the tmpfs that hides tether's home."""
    c, _ = box
    _, out, _ = run(c, "box", "grep CapEff /proc/self/status; "
                                 "mount -o remount,rw,bind /etc 2>/dev/null && echo REMOUNTED; "
                                 "umount /tmp 2>/dev/null && echo UNMOUNTED; echo end")
    assert out.split() == [b"CapEff:", b"0000000000000000", b"end"], out


def test_system_places_cannot_be_a_workspace(daemon: DaemonProc) -> None:
    """Review finding: a cwd of / was bound read-write over the sandbox's own /proc,
    /dev and /run (the host's docker.sock and pid 1 were visible)."""
    from tether.client.errors import TetherError

    c = daemon.client()
    c.sandbox_create("bare2", runtime="bwrap")
    for cwd in ("/", "/var", "/tmp", "/run", "/etc", "/dev/shm"):
        with pytest.raises(TetherError) as e:
            c.exec_start(["true"], sandbox="bare2", cwd=cwd)
        assert "system" in e.value.message or "kernel" in e.value.message, cwd
    with pytest.raises(TetherError) as e:
        c.sandbox_create("rootws", runtime="bwrap", workspace="/")
    assert "system one" in e.value.message
    assert not c.exec_list(all=True)


def test_secrets_and_homes_stay_out_of_reach(daemon: DaemonProc, tmp_path: Path) -> None:
    """Second review: a root daemon's sandbox is uid 0 without capabilities, which
    still owns root's files: /etc/shadow and host keys are masked, and a home directory
    (dotfiles, keys) or a place inside a system directory cannot be the workspace."""
    from tether.client.errors import TetherError

    c = daemon.client()
    ws = tmp_path / "ws"
    ws.mkdir()
    c.sandbox_create("sec", runtime="bwrap", workspace=str(ws))
    _, out, _ = run(c, "sec", "wc -c < /etc/shadow 2>/dev/null || echo unreadable; "
                              "cat /etc/ssh/ssh_host_*_key 2>/dev/null | wc -c")
    assert out.split()[0] in (b"0", b"unreadable") and out.split()[-1] == b"0", out
    c.sandbox_create("nows", runtime="bwrap")  # no workspace: the cwd would be it
    for place in (os.path.expanduser("~"), "/var/lib", "/etc/cron.d", "/usr/lib"):
        if not os.path.isdir(place):
            continue
        with pytest.raises(TetherError) as e:
            c.exec_start(["true"], sandbox="nows", cwd=place)
        assert "home directory" in e.value.message or "system one" in e.value.message
    with pytest.raises(TetherError) as e:
        c.sandbox_create("homews", runtime="bwrap", workspace=os.path.expanduser("~"))
    assert "home directory" in e.value.message
    assert not c.exec_list(all=True) or all(
        x.sandbox == c.sandbox_get("sec").id for x in c.exec_list(all=True))


@pytest.mark.parametrize("script, code, sig, reason", [
    pytest.param("kill -TERM $$", None, 15, "killed by SIGTERM",  # from inside the sandbox
                 marks=needs_exit_info),
    ("exit 130", 130, None, "exited with code 130"),  # not SIGINT: a real exit status
    ("exit 137", 137, None, "exited with code 137"),
])
def test_bwrap_records_signal_deaths_like_the_process_runtime(
        box: tuple[Client, Path], script: str, code: int | None, sig: int | None,
        reason: str) -> None:
    c, _ = box
    x = c.exec_start(["sh", "-c", script], sandbox="box")
    done = c.exec_wait(x.id, timeout=20)
    assert (done.state, done.exit_code, done.signal, done.reason) == ("FINISHED", code, sig,
                                                                      reason)


@needs_exit_info
def test_a_command_killed_from_the_host_records_the_signal(box: tuple[Client, Path]) -> None:
    """What the OOM killer does: SIGKILL to the command itself, not to bwrap."""
    c, _ = box
    marker = f".{os.getpid()}9"
    x = c.exec_start(["sleep", f"300{marker}"], sandbox="box")
    wait_for(lambda: len(_pids_with(marker)) == 1, what="the sleeper")
    os.kill(_pids_with(marker)[0], 9)
    done = c.exec_wait(x.id, timeout=20)
    assert (done.exit_code, done.signal, done.reason) == (None, 9, "killed by SIGKILL")


@needs_exit_info
def test_tether_kill_reaches_the_command_not_bwrap(box: tuple[Client, Path]) -> None:
    """The command's own handler runs (as in the process runtime): it exits 7."""
    c, ws = box
    x = c.exec_start(["sh", "-c", f"trap 'exit 7' TERM; touch {ws}/ready; "
                                  "while :; do sleep 0.05; done"], sandbox="box")
    wait_for(lambda: (ws / "ready").exists(), what="the trap set")
    c.exec_cancel(x.id, signal="TERM", grace=10)
    done = c.exec_wait(x.id, timeout=20)
    assert (done.state, done.exit_code, done.signal) == ("CANCELLED", 7, None)
    y = c.exec_start(["sleep", "300"], sandbox="box")
    c.exec_cancel(y.id, signal="INT", grace=10)
    done = c.exec_wait(y.id, timeout=20)
    assert (done.state, done.exit_code, done.signal) == ("CANCELLED", None, 2)


@needs_exit_info
def test_tether_kill_of_a_terminal_shell_waits_its_grace_then_sigkills(
        box: tuple[Client, Path]) -> None:
    """An interactive shell on a terminal moves itself to a process group of its own and
    ignores SIGTERM. The signal went to bwrap's group instead: bwrap, the terminal's
    session leader, died of it and the kernel hung the shell up (SIGHUP, within 0.3 s).
    As in the process runtime: SIGTERM to the shell's group, SIGKILL after the grace."""
    c, ws = box
    x = c.exec_start(["bash", "--norc", "--noprofile", "-i"], sandbox="box", tty=True,
                     stdin=True, cwd=str(ws), env={"PS1": "$ ", "HISTFILE": "/dev/null"})
    wait_for(lambda: b"$ " in b"".join(c.read_logs(x.id, stream="pty")),
             what="the prompt")
    t0 = time.monotonic()
    c.exec_cancel(x.id, signal="TERM", grace=1.0)
    done = c.exec_wait(x.id, timeout=20)
    took = time.monotonic() - t0
    assert (done.state, done.exit_code, done.signal) == ("CANCELLED", None, 9), done
    assert took >= 0.9, took
