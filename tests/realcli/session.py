"""What the real-CLI tests share: a user home seeded so a CLI skips its onboarding, a real
daemon whose default sandbox is the product default (``auto`` → bwrap) with that home as
``HOME``, whose agents reach their fake model API by name through the egress proxy
(:mod:`tests.realcli.net`), and a terminal to drive an interactive session through its monitor.

The terminal (:class:`Screen`) is a client attached to the exec's monitor; it feeds what it
reads to a ``pyte`` screen (so a test reads what a person would see) and answers the
terminal queries a TUI makes (cursor position, device attributes) as a terminal would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyte

from tests.harness import TETHER, DaemonProc, new_home, remove_home, wait_for
from tests.realcli.net import Api, allow_flags, resolve_env
from tether.client.attach import Attachment

ROWS, COLS = 40, 120
#: Fast agent ticks; the agent daemons of these tests use the product's default sandbox.
DAEMON_ENV = {"TETHER_DEFAULT_RUNTIME": "auto", "TETHER_AGENT_TICK": "0.2"}


class Home:
    """A user's home for one test (``HOME`` of the daemon, the CLI and the agents), its
    project directory (a git repository) and a daemon; :meth:`close` ends them."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None, *,
                 apis: tuple[Api, ...] = ()) -> None:
        self.user = tmp_path / "home"
        self.user.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=Dev", "-C",
               str(self.work)]
        subprocess.run([*git, "init", "-q"], check=True)
        (self.work / "README.md").write_text("# demo\n")
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
        (self.user / ".gitconfig").write_text("[user]\n\temail = dev@example.com\n"
                                              "\tname = Dev\n")
        self.clock = tmp_path / "clock"
        #: The fake model APIs its agents are allowed to reach (by name, through the proxy).
        self.apis = apis
        self.env = {**DAEMON_ENV, "HOME": str(self.user), "TETHER_TEST_CLOCK": str(self.clock),
                    **resolve_env(apis), **(env or {})}
        self.daemon = DaemonProc(new_home("tr"), env=self.env)
        self.screens: list[Screen] = []

    def start(self) -> None:
        self.daemon.start()

    def close(self) -> None:
        for s in self.screens:
            s.close()
        self.daemon.cleanup()
        remove_home(self.daemon.home)

    # ------------------------------------------------------------------ the CLI
    def tether(self, *args: str, timeout: float = 120, check: bool = True,
               ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*TETHER, "--home", str(self.daemon.home), *args], cwd=self.work,
                           capture_output=True, text=True, timeout=timeout, env=self.daemon.env)
        if check:
            assert r.returncode == 0, (args, r.returncode, r.stdout[-2000:], r.stderr[-4000:])
        return r

    def run(self, *argv: str, tty: bool = False, flags: tuple[str, ...] = (),
            allowed: bool = True) -> tuple[str, str]:
        """``tether run -d [-t -i] --allow-domain API… FLAGS -- ARGV``: the exec id and its
        lineage. ``allowed=False``: without the fake APIs in its policy."""
        allow = allow_flags(self.apis) if allowed else ()
        r = self.tether("run", "-d", *(("-t", "-i") if tty else ()), *allow, *flags, "--",
                        *argv)
        exec_id = r.stdout.strip()
        lineage = self.daemon.client().exec_get(exec_id).lineage
        assert lineage is not None, r.stderr
        return exec_id, lineage

    def lineage(self, lineage: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(
            self.tether("lineage", "inspect", "--json", lineage).stdout)
        return out

    def events(self, lineage: str | None = None) -> list[dict[str, Any]]:
        """The journal's agent and lineage events (of one lineage)."""
        out = []
        for line in self.tether("events", "--json").stdout.splitlines():
            e = json.loads(line)
            data = e.get("data") or {}
            if lineage is None or data.get("lineage") == lineage:
                out.append(e)
        return out

    def wait_lineage(self, lineage: str, pred: Callable[[dict[str, Any]], bool],
                     timeout: float = 60, what: str = "") -> dict[str, Any]:
        got: dict[str, Any] = {}

        def check() -> bool:
            nonlocal got
            got = self.lineage(lineage)
            return pred(got)
        try:
            wait_for(check, timeout, interval=0.2, what=what)
        except AssertionError:
            raise AssertionError(f"{what}: lineage is {got}\n{self.daemon.log_text()[-3000:]}"
                                 ) from None
        return got

    def kill9_agent(self, lineage: str) -> str:
        """SIGKILL the current attempt's whole process group (the CLI, its sandbox);
        returns the killed exec's id."""
        exec_id = self.lineage(lineage)["exec"]
        os.killpg(self.daemon.handles(exec_id)["child"]["pid"], 9)
        return str(exec_id)

    def screen(self, exec_id: str) -> Screen:
        s = Screen(self.daemon.client().attach(exec_id, rows=ROWS, cols=COLS, replay=1 << 20))
        self.screens.append(s)
        return s

    def move_clock(self, seconds: float) -> None:
        """Move the daemon's wall clock (TETHER_TEST_CLOCK) forward."""
        try:
            now = float(self.clock.read_text() or 0)
        except FileNotFoundError:
            now = 0.0
        self.clock.write_text(str(now + seconds))


# A terminal's answers: cursor position report, primary device attributes.
_DSR = re.compile(rb"\x1b\[\??6n")
_DA1 = re.compile(rb"\x1b\[0?c")


class Screen:
    """An attached terminal: what it shows (pyte), keys typed into it."""

    def __init__(self, att: Attachment) -> None:
        self.att = att
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()

    def pump(self, seconds: float = 0.2) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            data = self.att.read(left)
            if not data:
                if self.att.closed:
                    return
                continue
            self.raw += data
            for _ in _DSR.finditer(data):
                # pyte's cursor is where the program put it.
                y, x = self.screen.cursor.y + 1, self.screen.cursor.x + 1
                self.att.write(f"\x1b[{y};{x}R".encode())
            for _ in _DA1.finditer(data):
                self.att.write(b"\x1b[?62;22c")
            self.stream.feed(data)

    def text(self) -> str:
        self.pump(0.05)
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait(self, pred: Callable[[str], bool] | str, timeout: float = 60) -> str:
        check = (lambda t: pred in t) if isinstance(pred, str) else pred
        deadline = time.monotonic() + timeout
        while True:
            self.pump(0.2)
            text = "\n".join(line.rstrip() for line in self.screen.display)
            if check(text):
                return text
            if time.monotonic() > deadline or self.att.closed:
                raise AssertionError(f"the screen never showed {pred!r}:\n{text}")

    def type(self, text: str) -> None:
        """Type ``text`` and, once the program has shown it (so it has read it), Enter on
        its own: a TUI takes keys that arrive in one burst with an Enter among them for a
        paste, whose newline does not submit (seen under load)."""
        if text:
            self.att.write(text.encode())
            self.wait(lambda shown: text in shown, timeout=30)
            self.pump(0.4)
        self.att.write(b"\r")
        self.pump(0.1)

    def close(self) -> None:
        self.att.detach()
