"""Test harness: the real daemon as a subprocess, the real socket, real SIGKILLs.

Homes live under /tmp with short names because a Unix socket path must fit in
108 bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.client.blocking import Client
from tether.hostio.proc import is_same_process

REPO = Path(__file__).resolve().parent.parent
TETHER = [sys.executable, "-m", "tether.cli.main"]


def wait_for(pred: Any, timeout: float = 10.0, interval: float = 0.02, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(interval)


class DaemonProc:
    """One tether home and the daemon processes started on it over a test."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = {**os.environ, **(env or {})}
        self.env.pop("TETHER_FAULT", None)
        if env and "TETHER_FAULT" in env:
            self.env["TETHER_FAULT"] = env["TETHER_FAULT"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._clients: list[Client] = []

    @property
    def socket(self) -> Path:
        return self.home / "tether.sock"

    def start(self, wait: bool = True, env: dict[str, str] | None = None,
              pool: int | None = None) -> subprocess.Popen[bytes]:
        self.starts += 1
        log = open(self.home / f"daemon-{self.starts}.log", "wb")  # noqa: SIM115
        args = [*TETHER, "--home", str(self.home), "daemon"]
        if pool is not None:
            args += ["--pool", str(pool)]
        run_env = dict(self.env)
        run_env.pop("TETHER_FAULT", None)
        run_env.update(env or {})
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=run_env,
                                     start_new_session=True)
        log.close()
        if wait:
            self.wait_serving()
        return self.proc

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace")
                       for p in sorted(self.home.glob("daemon-*.log")))

    def wait_serving(self, timeout: float = 15.0) -> None:
        def serving() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                return raw_call(self.socket, "daemon.health")["result"]["status"] == "SERVING"
            except (OSError, KeyError, ValueError):
                return False
        wait_for(serving, timeout, what="daemon SERVING")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def term(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout)

    def client(self, **kw: Any) -> Client:
        kw.setdefault("autostart", False)
        c = Client(self.home, **kw)
        self._clients.append(c)
        return c

    def cli(self, *args: str, input: bytes | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*TETHER, "--home", str(self.home), *args], input=input,
                              capture_output=True, timeout=timeout, env={**self.env, **(env or {})})

    def handles(self, exec_id: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.home / "run" / f"{exec_id}.handles.json")
                                          .read_text())
        return data

    def cleanup(self) -> None:
        for c in self._clients:
            c.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # A daemon auto-started by a client is not our child: find it by its lock.
        try:
            text = (self.home / "daemon.lock").read_text().strip()
            cmdline = Path(f"/proc/{text}/cmdline").read_bytes() if text.isdigit() else b""
            if str(self.home).encode() in cmdline.split(b"\0"):
                os.kill(int(text), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
        kill_strays(self.home)


def kill_strays(home: Path) -> None:
    """Kill every monitor and command a test left behind (verified identities only)."""
    run = home / "run"
    if not run.exists():
        return
    for h in run.glob("*.handles.json"):
        try:
            data = json.loads(h.read_text())
        except (OSError, ValueError):
            continue
        for who in ("child", "monitor"):
            ent = data.get(who) or {}
            pid, st = ent.get("pid"), ent.get("start_time")
            if isinstance(pid, int) and isinstance(st, int) and is_same_process(pid, st):
                try:
                    if who == "child":
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def raw_call(sock_path: Path, method: str, params: Any = None, rid: Any = 1,
             timeout: float = 5.0) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    with RawConn(sock_path, timeout) as c:
        c.send_obj(msg)
        return c.recv_obj()


class RawConn:
    """A bare socket speaking newline-delimited JSON, for protocol tests."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_obj(self, obj: Any) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv_line(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def recv_obj(self) -> Any:
        return json.loads(self.recv_line())


def new_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="tt", dir="/tmp"))


def remove_home(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)
