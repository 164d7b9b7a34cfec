"""The daemon under systemd, as far as this machine allows: no ``systemd --user`` can run
here (PID 1 is not systemd and the user manager exits at once), so the notify protocol is
tested against a real ``$NOTIFY_SOCKET`` datagram socket, and the unit file with
``systemd-analyze verify`` (Debian's ``systemd`` package; .ci/provision.sh installs it).
Also the daemon's JSON log lines (``--log-format json``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, wait_for


def _datagrams(sock: socket.socket, until: str, timeout: float = 20.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while until not in got:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            raise AssertionError(f"no {until} within {timeout}s; got {got}") from None
    return got


def test_notify_ready_watchdog_stopping(stopped_daemon: DaemonProc) -> None:
    path = stopped_daemon.home / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        # WatchdogSec=0.4 s: the daemon pings every 0.2 s.
        stopped_daemon.start(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"})
        got = _datagrams(sock, "READY=1")
        assert got == ["READY=1"]  # nothing before it is serving
        t0 = time.monotonic()
        pings = _datagrams(sock, "WATCHDOG=1")
        while len(pings) < 4:
            pings += _datagrams(sock, "WATCHDOG=1")
        assert set(pings) == {"WATCHDOG=1"}
        assert time.monotonic() - t0 < 10  # about 0.2 s apart, with room for a busy box
        assert stopped_daemon.term() == 0
        rest = _datagrams(sock, "STOPPING=1")
        assert set(rest) <= {"WATCHDOG=1", "STOPPING=1"}


def test_no_watchdog_for_another_pid(stopped_daemon: DaemonProc) -> None:
    path = stopped_daemon.home / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        stopped_daemon.start(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000",
                                  "WATCHDOG_PID": "1"})
        assert _datagrams(sock, "READY=1") == ["READY=1"]
        sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            sock.recv(4096)


def test_install_writes_a_unit_systemd_accepts(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    home = tmp_path / "home"
    p = subprocess.run([*TETHER, "--home", str(home), "daemon", "install", "--user"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    unit = tmp_path / "config" / "systemd" / "user" / "tether.service"
    text = unit.read_text()
    for line in ("Type=notify", "KillMode=process", "Restart=on-failure", "WatchdogSec=30",
                 f"--home {home}", "WantedBy=default.target"):
        assert line in text
    dry = subprocess.run([*TETHER, "--home", str(home), "daemon", "install", "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert dry.stdout == f"# {unit}\n{text}"
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd): the unit "
                    "file was written but not verified")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    v = subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True,
                       text=True, env={**env, "XDG_RUNTIME_DIR": str(runtime)}, timeout=60)
    assert v.returncode == 0 and not v.stderr.strip(), v.stderr
    u = subprocess.run([*TETHER, "--home", str(home), "daemon", "uninstall", "--user"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert u.returncode == 0, u.stderr
    assert not unit.exists()


def test_json_log_lines_carry_the_ids(stopped_daemon: DaemonProc) -> None:
    stopped_daemon.start(env={"TETHER_LOG_FORMAT": "json"})
    c = stopped_daemon.client()
    x = c.exec_start(["true"])
    c.exec_wait(x.id, timeout=20)

    def ended() -> dict[str, object] | None:
        lines = [json.loads(line) for line in stopped_daemon.log_text().splitlines()
                 if line.strip()]
        return next((ln for ln in lines if ln.get("exec") == x.id), None)

    line = wait_for(ended, what="the exec's end in the daemon log")
    assert line["sandbox"] == x.sandbox and line["level"] == "INFO"
    assert line["msg"] == f"exec {x.id} FINISHED (exit 0)"
    assert isinstance(line["time"], float) and line["logger"] == "tether.execs"


def test_unknown_log_format_is_refused(stopped_daemon: DaemonProc) -> None:
    p = subprocess.run([*TETHER, "--home", str(stopped_daemon.home), "daemon"],
                       capture_output=True, text=True, timeout=60,
                       env={**stopped_daemon.env, "TETHER_LOG_FORMAT": "xml"})
    assert p.returncode == 2
    assert "unknown log format 'xml'" in p.stderr and "text, json" in p.stderr
