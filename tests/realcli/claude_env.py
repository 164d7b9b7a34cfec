"""The real Claude Code under the real daemon, in the default sandbox (bwrap), against the
fake Anthropic API (:mod:`tests.realcli.fake_anthropic`).

What Claude Code needs to start without a person (read from the CLI's behaviour, 2.1.332):

* ``~/.claude.json`` with ``hasCompletedOnboarding`` (no theme and login screens), the
  API key's last 20 characters in ``customApiKeyResponses.approved`` (no "Detected a
  custom API key … Do you want to use this API key?" dialog) and the project's
  ``hasTrustDialogAccepted`` (no workspace trust dialog); and a ``~/.claude`` directory.
  The daemon runs with that ``HOME``, so the sandbox binds those two (tether's agent
  config paths) read-write, as it would a user's.
* ``ANTHROPIC_BASE_URL`` (the fake, by its name: the CLI reaches it through tether's
  egress proxy, allowed by the lineage's ``allow_domains``, :mod:`tests.realcli.net`)
  and ``ANTHROPIC_API_KEY``; or, for the form Claude
  Code shows a subscription's limits in, an ``ANTHROPIC_AUTH_TOKEN`` that is a JWT for
  ``aud: claude-gateway`` (its enterprise gateway's login: Claude Code then reads the
  ``anthropic-ratelimit-unified-*`` headers and says "You've hit your … limit · resets …").
* ``CLAUDE_CODE_MAX_RETRIES=0``: a 429 is shown at once instead of after ten retries
  (about 3 minutes).
* ``--permission-mode acceptEdits``: file edits need no permission prompt (its default
  mode, "auto", asks a classifier model about each tool call).

At start it asks the server ``HEAD /api/hello``; per turn ``POST /v1/messages`` (the
conversation, streamed, with its tools), interactively also one request without tools
(the session's title) and ``POST /v1/messages/count_tokens`` for ``/context``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tests.realcli import cli
from tests.realcli.fake_anthropic import FakeAnthropic
from tests.realcli.net import resolve_env
from tether.client.attach import Attachment
from tether.client.blocking import Client
from tether.client.replies import LineageView

KEY = "sk-ant-api03-tether-test-0123456789abcdefghijklmn"
#: The daemon's agent tick (seconds).
TICK = "0.2"
PROMPT = "\u276f".encode()  # its input box (U+276F)


def gateway_token() -> str:
    """An (unsigned) JWT whose audience is Claude Code's gateway: Claude Code shows the
    server's 429 as a subscription's usage limit."""
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return (f"{part({'alg': 'none', 'typ': 'JWT'})}."
            f"{part({'aud': 'claude-gateway', 'sub': 'tether-test', 'exp': 4102444800})}.x")


class ClaudeUnderTether:
    """A seeded home, a project, a daemon on the default sandbox, the real CLI."""

    def __init__(self, tmp: Path, api: FakeAnthropic, *, subscription: bool = False) -> None:
        self.claude = str(cli("claude"))
        self.api = api
        self.home = new_home("rch")  # the user's HOME (short: socket paths under it)
        self.project = tmp / "project"
        self.project.mkdir()
        self.clock = tmp / "clock"
        self.clock.write_text("0")
        (self.home / ".claude").mkdir()
        (self.home / ".claude.json").write_text(json.dumps({
            "hasCompletedOnboarding": True, "theme": "dark",
            "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
            "projects": {str(self.project): {"hasTrustDialogAccepted": True,
                                             "hasCompletedProjectOnboarding": True}},
        }))
        self.agent_env = {
            "HOME": str(self.home), "PATH": os.environ["PATH"], "TERM": "xterm-256color",
            "ANTHROPIC_BASE_URL": api.base_url, "CLAUDE_CODE_MAX_RETRIES": "0",
            # (a tether checkout run from its source tree, e.g. an older one to compare)
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
            **({"ANTHROPIC_AUTH_TOKEN": gateway_token()} if subscription
               else {"ANTHROPIC_API_KEY": KEY}),
        }
        self.daemon = DaemonProc(new_home(), env={
            "HOME": str(self.home), "TETHER_DEFAULT_RUNTIME": "auto",
            "TETHER_AGENT_TICK": TICK, "TETHER_TEST_CLOCK": str(self.clock),
            **resolve_env([api.api])})
        self.daemon.start()
        self.c: Client = self.daemon.client()
        assert self.c.sandbox_get("default").spec.runtime == "bwrap"

    def close(self) -> None:
        self.daemon.cleanup()
        remove_home(self.daemon.home)
        remove_home(self.home)

    # ------------------------------------------------------------------ agents
    def start(self, *args: str, tty: bool = False, allowed: bool = True,
              **params: Any) -> LineageView:
        """``claude --permission-mode acceptEdits ARGS`` as an agent lineage, allowed to
        reach the fake API (``allowed=False``: without it in its policy)."""
        params.setdefault("revival", "revive")
        return self.c.agent_start([self.claude, "--permission-mode", "acceptEdits", *args],
                                  provider="claude", env=self.agent_env, cwd=str(self.project),
                                  tty=tty, allow_domains=[self.api.api.entry] if allowed
                                  else None, **params)

    def get(self, lineage: str) -> LineageView:
        return self.c.lineage_get(lineage)

    def wait(self, lineage: str, what: str, pred: Any, timeout: float = 60.0) -> LineageView:
        def check() -> LineageView | None:
            rec = self.get(lineage)
            return rec if pred(rec) else None
        got: LineageView = wait_for(check, timeout, interval=0.1, what=what)
        return got

    def events(self, lineage: str, *types: str) -> list[Any]:
        return [e for e in self.c.events_list(limit=10000).events
                if (not types or e.type in types) and (e.data or {}).get("lineage") == lineage]

    def argv(self, exec_id: str) -> list[str]:
        return list(self.c.exec_get(exec_id).spec.argv)

    def kill9(self, lineage: str) -> str:
        """SIGKILL the agent's sandbox (its whole process group); returns the exec."""
        x = self.get(lineage).exec or ""
        os.killpg(self.daemon.handles(x)["child"]["pid"], 9)
        return x

    def wait_transcript_prompt(self, sid: str, timeout: float = 30.0) -> None:
        """Until the CLI's transcript of session ``sid`` holds a prompt. Claude Code
        writes it behind its API calls: a kill -9 before it has is a session with nothing
        to resume (``ClaudeProvider.can_resume``), which starts afresh."""
        def check() -> bool:
            return any(b'"type":"user"' in f.read_bytes()
                       for f in (self.home / ".claude" / "projects").glob(f"*/{sid}.jsonl"))
        wait_for(check, timeout, interval=0.1, what=f"session {sid}'s prompt in its transcript")

    def move_clock(self, to: float) -> None:
        """The daemon's clock reads ``to`` (epoch seconds) from now on."""
        self.clock.write_text(str(to - time.time()))

    # ------------------------------------------------------------------ a terminal
    def terminal(self, lineage: str) -> Terminal:
        """Attached to the lineage's current attempt, once its input box shows."""
        rec = self.wait(lineage, "a session", lambda r: r.provider_session_id is not None
                        and r.exec is not None)
        t = Terminal(self.c.attach(rec.exec or "", rows=40, cols=120, replay=1 << 20))
        t.expect(PROMPT)
        return t


class Terminal:
    """Keys typed into the CLI's real terminal (the attach protocol, as `tether attach`)."""

    def __init__(self, att: Attachment) -> None:
        self.att = att
        self.seen = bytearray()

    def expect(self, marker: bytes, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            if time.monotonic() > deadline or self.att.closed:
                raise AssertionError(f"{marker!r} not seen; last: {bytes(self.seen[-400:])!r}")
            self.seen += self.att.read(0.2)

    def drain(self) -> None:
        self.seen += self.att.read(0.1)

    def type(self, text: str) -> None:
        """Type ``text``, then Enter on its own (a burst ending in CR reads as a paste)."""
        self.att.write(text.encode())
        time.sleep(0.4)
        self.att.write(b"\r")

    def close(self) -> None:
        self.att.detach()
