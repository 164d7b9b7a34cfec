"""Test harness: the real daemon as a subprocess, the real socket, real SIGKILLs.

The hand-spoken socket (:mod:`tests.rawrpc`) and throw-away homes (:mod:`tests.homes`)
are shared with ``bench`` and ``demo``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.homes import kill_strays, new_home, read_handles, remove_home
from tests.rawrpc import RawConn, RpcFailed, raw_call
from tether.client.blocking import Client

__all__ = ["FIXTURES", "SCRIPTED_AGENT", "TETHER", "Client", "DaemonProc", "RawConn",
           "RpcFailed", "kill_strays", "new_home", "raw_call", "read_handles", "remove_home",
           "wait_for"]

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"  # recorded provider payloads (tests/fixtures/README.md)
SCRIPTED_AGENT = TESTS / "agents" / "scripted_agent.py"
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
              pool: int | None = None, args: list[str] | None = None,
              ) -> subprocess.Popen[bytes]:
        """``args``: more ``tether daemon`` options (e.g. ``--fleet URL``)."""
        self.starts += 1
        log = open(self.home / f"daemon-{self.starts}.log", "wb")  # noqa: SIM115
        argv = [*TETHER, "--home", str(self.home), "daemon", *(args or [])]
        if pool is not None:
            argv += ["--pool", str(pool)]
        run_env = dict(self.env)
        run_env.pop("TETHER_FAULT", None)
        run_env.update(env or {})
        run_env.setdefault("PYTHONFAULTHANDLER", "1")  # a hung stop shows where (``term``)
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=run_env,
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
        """SIGTERM, and its exit code. A daemon that does not stop in ``timeout`` is
        sent SIGABRT, so the failure shows every thread's stack (faulthandler)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            raise AssertionError(f"the daemon did not stop {timeout} s after SIGTERM; its "
                                 f"log:\n{self.log_text()[-20000:]}") from None

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
