"""The real Gemini CLI (``@google/gemini-cli``, pinned in ``.ci/agents.sh``) under the real
daemon, in the product's default sandbox (bwrap), for every claim of the README's
compatibility table. Only the model API is faked — :mod:`tests.realcli.fake_gemini`, on
127.0.0.1, reached by name through the egress proxy (:mod:`tests.realcli.net`), as the
CLI's documented ``GOOGLE_GEMINI_BASE_URL`` names it — and every
token count tether records is checked against what that server served.

Interactive sessions are driven through the exec's real terminal (the attach protocol, as
``tether attach`` does). "kill -9" is a SIGKILL of the CLI's node processes inside the
sandbox (as the OOM killer would), not of the daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tether as tether_pkg
from tests.harness import TETHER, DaemonProc, remove_home, wait_for
from tests.realcli import cli
from tests.realcli.fake_gemini import (
    DAILY_QUOTA_EXHAUSTED,
    HOST,
    MODEL,
    Answer,
    FakeGemini,
    Served,
    cli_env,
    seed_home,
)
from tests.realcli.net import resolve_env
from tether.client.blocking import Client
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = [pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")]

WINDOW = 1_048_576  # gemini-2.5-flash's, as the CLI itself uses it (tokenLimit)
PROMPT_READY = b"Type your message"  # the CLI's input box, once it can take a prompt


@dataclass
class Rig:
    """A daemon in the default sandbox (bwrap), a fake Gemini API, a user's HOME seeded
    for the CLI, and a project directory to run it in."""

    d: DaemonProc
    api: FakeGemini
    home: Path
    work: Path
    env: dict[str, str]
    gemini: Path
    attached: list[Any] = field(default_factory=list)

    def tether(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*TETHER, "--home", str(self.d.home), *args], cwd=self.work,
                              env=self.env, capture_output=True, timeout=timeout)

    def client(self) -> Client:
        return self.d.client()

    def run(self, *gemini_args: str, opts: tuple[str, ...] = (), tty: bool = False,
            name: str = "g", allowed: bool = True) -> tuple[str, str]:
        """``tether run -d [-it] --name NAME --allow-domain API OPTS -- gemini ARGS``: (exec
        id, lineage). ``allowed=False``: without the fake API in its policy."""
        allow = self.api.api.flags() if allowed else ()
        r = self.tether("run", "-d", *(["-t", "-i"] if tty else []), "--name", name, *allow,
                        *opts, "--", str(self.gemini), "-m", MODEL, *gemini_args)
        assert r.returncode == 0, r.stderr.decode()
        exec_id = r.stdout.decode().strip()
        lineage = self.client().exec_get(exec_id).lineage
        assert lineage, r.stderr.decode()
        return exec_id, lineage

    def lineage(self, lineage: str) -> Any:
        return self.client().lineage_get(lineage)

    def events(self, lineage: str, kind: str | None = None) -> list[Any]:
        evs = [e for e in self.client().events_list(limit=10_000).events
               if (e.data or {}).get("lineage") == lineage]
        return [e for e in evs if kind is None or e.type == kind]

    def wait_lineage(self, lineage: str, pred: Any, timeout: float = 60, what: str = "") -> Any:
        box: list[Any] = []

        def check() -> bool:
            box[:] = [self.lineage(lineage)]
            return bool(pred(box[0]))
        try:
            wait_for(check, timeout, interval=0.1, what=what)
        except AssertionError:
            raise AssertionError(f"{what}: lineage is {box[0] if box else None}\n"
                                 f"{self.d.log_text()[-3000:]}") from None
        return box[0]

    def attach(self, exec_id: str) -> Any:
        term = self.client().attach(exec_id)
        term.__enter__()
        self.attached.append(term)
        return term

    def kill9_agent(self, exec_id: str) -> list[int]:
        """SIGKILL the CLI's node processes in the exec's sandbox."""
        child = self.d.handles(exec_id)["child"]["pid"]
        victims = [p for p in _descendants(child) if b"gemini" in _cmdline(p)
                   and _cmdline(p).split(b"\0")[0].endswith(b"node")]
        assert victims, f"no gemini process under {child}"
        for p in victims:
            os.kill(p, signal.SIGKILL)
        return victims


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    gemini = cli("gemini")
    home = tmp_path / "user"
    work = tmp_path / "work"
    work.mkdir()
    seed_home(home, trusted=[work])
    # The sandbox's own /tmp is root's and 0755; a tether home anywhere else (a user's,
    # or here /var/tmp, 1777) is what the CLI's root-ownership check sees as it is.
    tether_home = Path(tempfile.mkdtemp(prefix="tg", dir=getattr(request, "param", "/tmp")))
    with FakeGemini(log=tmp_path / "api.jsonl") as api:
        # CI=true as in a CI job's shell, which `tether run` forwards: the CLI reads it as
        # headless even on a terminal; a session with one is started without it.
        env = {**os.environ, **cli_env(api.base_url, home), **resolve_env([api.api]),
               "CI": "true", "GITHUB_ACTIONS": "true",
               "TETHER_DEFAULT_RUNTIME": "auto", "TETHER_AGENT_TICK": "0.2",
               "TETHER_TEST_CLOCK": str(tmp_path / "clock")}
        d = DaemonProc(tether_home, env=env)
        d.start()
        r = Rig(d=d, api=api, home=home, work=work, env=d.env, gemini=gemini)
        try:
            assert r.client().sandbox_get("default").spec.runtime == "bwrap"
            yield r
        finally:
            for term in r.attached:
                term.__exit__(None, None, None)
            d.cleanup()
            remove_home(tether_home)


def tokens_of(served: list[Served]) -> dict[str, int]:
    """What tether must have recorded for these responses (README: Gemini's usage): input
    is the uncached prompt, cache reads the cached part, output the answer and thoughts."""
    u = [s.usage for s in served]
    return {"input_tokens": sum(x.get("promptTokenCount", 0)
                                - x.get("cachedContentTokenCount", 0) for x in u),
            "output_tokens": sum(x.get("candidatesTokenCount", 0)
                                 + x.get("thoughtsTokenCount", 0) for x in u),
            "cache_read_tokens": sum(x.get("cachedContentTokenCount", 0) for x in u),
            "cache_creation_tokens": 0}


def context_pct(s: Served) -> float:
    return 100.0 * (s.usage["promptTokenCount"] + s.usage["candidatesTokenCount"]) / WINDOW


# ---------------------------------------------------------------------- headless
@pytest.mark.parametrize("rig", ["/var/tmp"], indirect=True)
def test_headless_turn_hooks_session_tokens_and_context(rig: Rig) -> None:
    """``gemini -p`` with a tool call: its hooks fire in the sandbox, one turn is counted
    for two API calls, the session id is learned, the tokens equal what was served.

    The tether home is not root's alone (every user's is not): Gemini CLI 0.61.0 skips a
    system defaults file there ("is writable by group or others"), so tether's hooks
    reach it in the view of the user's own settings."""
    out = rig.work / "out.txt"
    rig.api.script(
        Answer(call=("write_file", {"file_path": str(out), "content": "written\n"}),
               prompt_tokens=12_000, output_tokens=31),
        Answer(text="I wrote out.txt.", prompt_tokens=12_100, output_tokens=9,
               cached_tokens=8_000, thoughts_tokens=120))
    x, lin = rig.run("--approval-mode", "auto_edit", "-p", "write out.txt")
    c = rig.client()
    assert c.exec_wait(x, timeout=60).exit_code == 0, c.exec_logs(x, stream="stderr")
    assert out.read_text() == "written\n"  # the real tool ran, in the sandbox's workspace
    rec = rig.wait_lineage(lin, lambda r: r.status == "FINISHED", what="finished")
    served = rig.api.conversation()
    assert len(served) == 2 and all(s.scripted for s in served)
    assert rec.turns == 1 and len(rig.events(lin, "agent.turn")) == 1
    assert rec.usage == tokens_of(served)
    assert rec.usage == {"input_tokens": 16_100, "output_tokens": 160,
                         "cache_read_tokens": 8_000, "cache_creation_tokens": 0}
    assert rec.model == MODEL
    assert rec.context_pct == pytest.approx(context_pct(served[-1]))
    # The session id: the one the CLI wrote its session file under.
    (chat,) = rig.home.glob(".gemini/tmp/*/chats/session-*.jsonl")
    assert rec.provider_session_id == json.loads(chat.read_text().splitlines()[0])["sessionId"]
    kinds = [e.data.get("source") for e in rig.events(lin, "agent.session")]
    assert kinds == ["startup"]
    assert rec.exit_reason == "finished"


def test_the_api_is_reached_only_because_the_policy_allows_it(rig: Rig) -> None:
    """Issue 21: the CLI in the default sandbox reaches the fake API (``fake-gemini.test``,
    which only the egress proxy resolves) only because its policy names that host and
    port, as every test here does. Without the entry its requests are denied
    (``agent.egress_denied`` with the host), the fake gets none; with it, they arrive by
    that name."""
    x, lin = rig.run("-p", "say hi", allowed=False, opts=("--max-revivals", "0"))
    wait_for(lambda: rig.events(lin, "agent.egress_denied"), 90, what="a denial")
    denied = [(e.data["host"], e.data["port"]) for e in rig.events(lin, "agent.egress_denied")]
    assert (HOST, rig.api.port) in denied
    assert rig.api.served == []
    assert rig.api.api.entry not in rig.lineage(lin).egress.allow
    rig.tether("kill", x)

    rig.api.script(Answer(text="Hi.", prompt_tokens=2_000, output_tokens=5))
    x, lin = rig.run("-p", "say hi", name="allowed")
    assert rig.client().exec_wait(x, timeout=90).exit_code == 0
    rec = rig.wait_lineage(lin, lambda r: r.status == "FINISHED", what="finished")
    assert rec.egress.network == "proxy" and rig.api.api.entry in rec.egress.allow
    assert rec.usage == tokens_of(rig.api.conversation())
    assert {s.host for s in rig.api.served} == {rig.api.api.entry}  # by name, via the proxy


def test_headless_killed_mid_turn_is_resumed_headless(rig: Rig) -> None:
    """kill -9 of ``gemini -p`` while its turn is in progress: the revival resumes the
    same session headless, with a continuation prompt (``gemini --resume ID`` alone, with
    no terminal, fails: "No input provided via stdin", exit 42)."""
    held = threading.Event()
    rig.api.script(Answer(text="never sent", hold=held),
                   Answer(text="Finished the task.", prompt_tokens=7_000, output_tokens=11))
    # The held answer is released only at the end: through the egress proxy, writing it
    # after the CLI was killed still "succeeds" (into the proxy's half-closed tunnel), so
    # the fake would count as served what the CLI never got.
    try:
        x1, lin = rig.run("-p", "refactor the parser")
        wait_for(lambda: rig.api.conversation(answered=False), 60, what="the first request")
        sid = rig.wait_lineage(lin, lambda r: r.provider_session_id,
                               what="session id").provider_session_id
        rig.kill9_agent(x1)
        rec = rig.wait_lineage(lin, lambda r: r.status == "FINISHED", 90, what="finished")
        assert rec.attempt == 2 and rec.exit_reason == "finished", rec
        c = rig.client()
        x2 = rec.exec
        assert x2 != x1 and c.exec_get(x2).exit_code == 0
        argv = c.exec_get(x2).spec.argv
        assert argv[1:5] == ["-m", MODEL, "--resume", sid] or argv[1:3] == ["--resume", sid], \
            argv
        assert "-p" in argv and "refactor the parser" in argv[argv.index("-p") + 1]
        # The resumed request carries the session's history and the continuation prompt.
        last = rig.api.conversation()[-1]
        texts = last.user_texts()
        assert "refactor the parser" in texts and "interrupted" in texts[-1]
        assert rec.turns == 1 and rec.usage == tokens_of(rig.api.conversation())
        assert rec.provider_session_id == sid
    finally:
        held.set()


def test_revival_before_the_first_prompt_starts_afresh(rig: Rig) -> None:
    """kill -9 of an interactive session that had no prompt yet: there is nothing to
    resume ("No previous sessions found for this project", exit 42), so it starts afresh."""
    rig.api.script(Answer(text="Hello after the restart.", prompt_tokens=3_000,
                          output_tokens=6))
    x1, lin = rig.run(tty=True)
    term = rig.attach(x1)
    term.read_until(PROMPT_READY, 60)
    sid1 = rig.wait_lineage(lin, lambda r: r.provider_session_id,
                            what="session id").provider_session_id
    rig.kill9_agent(x1)
    rec = rig.wait_lineage(lin, lambda r: r.attempt == 2 and r.exec != x1
                           and r.status == "ACTIVE", 60, what="revived")
    x2 = rec.exec
    assert "--resume" not in rig.client().exec_get(x2).spec.argv
    term2 = rig.attach(x2)
    term2.read_until(PROMPT_READY, 60)
    rec = rig.wait_lineage(lin, lambda r: r.provider_session_id not in (None, sid1),
                           what="the new session")
    type_prompt(term2, "hello again")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 1, what="turn 1")
    assert rec.usage == tokens_of(rig.api.conversation()) and rec.status == "ACTIVE"
    assert rig.client().exec_get(x2).state == "RUNNING"


def type_prompt(term: Any, text: str) -> None:
    """Type a prompt into the CLI's input box and submit it once the box shows it (Enter
    apart from the text, as a person types: in one write the CLI takes it for a paste).
    Keys typed before its input is live are dropped, not echoed: typed again then."""
    for _ in range(6):
        term.write(text)
        try:
            term.read_until(text.encode(), 10)  # shown: the box took it
            break
        except TimeoutError:
            continue
    else:
        raise AssertionError(f"the CLI never took {text!r}")
    time.sleep(0.2)
    term.write("\r")


def settle(term: Any) -> None:
    """Drop what the terminal has shown so far (a later marker is then newer)."""
    while term.read(0.3):
        pass


def test_daily_quota_waits_for_the_reset_then_resumes(rig: Rig, tmp_path: Path) -> None:
    """The API's daily-quota 429 (RESOURCE_EXHAUSTED, a per-day QuotaFailure): the CLI
    gives up ("You have exhausted your daily quota on this model.") and takes the failed
    prompt back out of its session; the lineage waits (WAITING_LIMIT, no revival spent)
    and, once the daemon's clock passes the reset (30 minutes: the CLI prints none),
    runs its command again (nothing to resume) and finishes."""
    rig.api.script(Answer(error=(429, DAILY_QUOTA_EXHAUSTED)),
                   Answer(text="Done after the reset.", prompt_tokens=5_000, output_tokens=8))
    x1, lin = rig.run("-p", "summarise the changes")
    rec = rig.wait_lineage(lin, lambda r: r.status == "WAITING_LIMIT", 90, what="limited")
    assert rec.exit_reason == "usage_limited" and rec.limit_waits == 1, rec
    assert rec.revive_at is not None and 1700 < rec.revive_at - time.time() < 1900
    assert rig.client().exec_get(x1).exit_code == 1
    assert len(rig.api.conversation(answered=False)) == 1  # nothing tried meanwhile
    (tmp_path / "clock").write_text("1860")  # the daemon's clock: 31 minutes on
    rec = rig.wait_lineage(lin, lambda r: r.status == "FINISHED", 90, what="finished")
    assert (rec.attempt, rec.revivals, rec.exit_reason) == (2, 0, "finished"), rec
    assert rig.client().exec_get(rec.exec).spec.argv == rig.client().exec_get(x1).spec.argv
    assert "summarise the changes" in rig.api.conversation()[-1].user_texts()
    assert rec.usage == tokens_of(rig.api.conversation())


# ---------------------------------------------------------------------- interactive
def test_interactive_turns_idle_clear_and_revival(rig: Rig) -> None:
    """An interactive session: one turn per prompt with exactly the tokens served; idle
    at its prompt three times longer than ``--crashed-after`` and not killed; ``/clear``
    forks the lineage onto the new session; kill -9, and the revival resumes that new
    session (``--resume ID``, at its prompt: no ``-p``) with its conversation."""
    rig.api.script(Answer(text="First answer.", prompt_tokens=4_000, output_tokens=20),
                   Answer(text="Second answer.", prompt_tokens=4_100, output_tokens=30,
                          cached_tokens=3_000),
                   Answer(text="Third answer.", prompt_tokens=900, output_tokens=10),
                   Answer(text="Fourth answer.", prompt_tokens=1_000, output_tokens=12))
    x1, lin = rig.run(tty=True, opts=("--stale-after", "1", "--crashed-after", "2"))
    term = rig.attach(x1)
    term.read_until(PROMPT_READY, 60)
    rig.wait_lineage(lin, lambda r: r.provider_session_id, what="session id")
    type_prompt(term, "first question")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 1, what="turn 1")
    assert rec.usage == tokens_of(rig.api.conversation())
    assert rec.context_pct == pytest.approx(context_pct(rig.api.conversation()[-1]))
    time.sleep(6)  # idle at its prompt: three times --crashed-after
    rec = rig.lineage(lin)
    assert (rec.attempt, rec.exec, rec.status) == (1, x1, "ACTIVE"), rec
    assert rig.client().exec_get(x1).state == "RUNNING"
    type_prompt(term, "second question")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 2, what="turn 2")
    assert rec.usage == tokens_of(rig.api.conversation())
    sid1 = rec.provider_session_id
    type_prompt(term, "/clear")
    rec = rig.wait_lineage(lin, lambda r: r.provider_session_id != sid1, what="/clear fork")
    fork = rig.events(lin, "agent.session")[-1]
    assert fork.data["fork"] and fork.data["from"] == sid1 and fork.data["source"] == "clear"
    sid2 = rec.provider_session_id
    type_prompt(term, "third question")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 3, what="turn 3")
    assert len(rig.events(lin, "agent.turn")) == 3
    sessions = len(rig.events(lin, "agent.session"))
    rig.kill9_agent(x1)
    rec = rig.wait_lineage(lin, lambda r: r.attempt == 2 and r.status == "ACTIVE"
                           and r.exec != x1, 60, what="revived")
    x2 = rec.exec
    argv = rig.client().exec_get(x2).spec.argv
    assert argv[1:3] == ["--resume", sid2] and "-p" not in argv, argv
    term2 = rig.attach(x2)
    wait_for(lambda: len(rig.events(lin, "agent.session")) > sessions, 60,
             what="the resumed session's SessionStart")
    assert rig.events(lin, "agent.session")[-1].data["source"] == "resume"
    # Its input box is drawn before the session is resumed ("Resuming session...", the
    # SessionStart hook); keys typed then are dropped, and type_prompt types them again.
    settle(term2)
    type_prompt(term2, "fourth question")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 4, what="turn 4")
    texts = rig.api.conversation()[-1].user_texts()
    assert "third question" in texts and "fourth question" in texts
    assert "first question" not in texts  # the cleared conversation is not resumed
    assert rec.usage == tokens_of(rig.api.conversation())
    assert rec.provider_session_id == sid2
    assert not [e for e in rig.events(lin) if "hung" in (e.reason or "")]


# ---------------------------------------------------------------------- fencing
def test_dying_fences_the_real_tool_call_then_dead_is_reaped(rig: Rig) -> None:
    """A turn that leaves 91.6 % of the window used makes the lineage DYING: of the next
    turn's tool calls the CLI's BeforeTool hook lets one through (the finalization call)
    and denies the next, which the CLI reports to the model; at that turn's end it is
    DEAD, reaped, and its exit reason is ``out_of_context``."""
    a, b = rig.work / "handoff.md", rig.work / "more.txt"
    rig.api.script(
        Answer(text="Read it all.", prompt_tokens=960_000, output_tokens=100),
        Answer(call=("write_file", {"file_path": str(a), "content": "notes\n"})),
        Answer(call=("write_file", {"file_path": str(b), "content": "more\n"})),
        Answer(text="Stopping here."))
    x, lin = rig.run("--approval-mode", "auto_edit", tty=True)
    term = rig.attach(x)
    term.read_until(PROMPT_READY, 60)
    rig.wait_lineage(lin, lambda r: r.provider_session_id, what="session id")
    type_prompt(term, "read the whole repository")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 1, what="turn 1")
    assert rec.lifecycle == "DYING" and rec.context_pct == pytest.approx(
        100 * 960_100 / WINDOW)
    type_prompt(term, "write your handoff")
    rec = rig.wait_lineage(lin, lambda r: r.status == "FINISHED", 60, what="reaped")
    assert a.read_text() == "notes\n" and not b.exists()  # the real tool, fenced
    fenced = rig.events(lin, "agent.fenced")
    assert len(fenced) == 1 and fenced[0].data["tool"] == "write_file"
    denied = [s for s in rig.api.conversation() if "finalization call was already used"
              in json.dumps(s.body)]
    assert denied, "the CLI did not tell the model the call was denied"
    assert rec.lifecycle == "DEAD" and rec.turns == 2
    assert rec.exit_reason == "out_of_context", rec


def test_budget_pause_denies_the_real_tool_call(rig: Rig) -> None:
    """A budget reached by a turn's tokens (priced as gemini-2.5-flash): the next tool
    call is denied by the BeforeTool hook, naming the budget; the file is not written."""
    out = rig.work / "out.txt"
    rig.api.script(
        Answer(text="Thinking big.", prompt_tokens=20_000, output_tokens=100),
        Answer(call=("write_file", {"file_path": str(out), "content": "x\n"})),
        Answer(text="I cannot write it."))
    x, lin = rig.run("--approval-mode", "auto_edit", tty=True, opts=("--budget", "0.001"))
    term = rig.attach(x)
    term.read_until(PROMPT_READY, 60)
    rig.wait_lineage(lin, lambda r: r.provider_session_id, what="session id")
    type_prompt(term, "think")
    rig.wait_lineage(lin, lambda r: r.turns == 1, what="turn 1")
    assert [e.type for e in rig.events(lin, "agent.budget")] == ["agent.budget"]
    type_prompt(term, "now write out.txt")
    rec = rig.wait_lineage(lin, lambda r: r.turns == 2, what="turn 2")
    assert not out.exists()
    (fenced,) = rig.events(lin, "agent.fenced")
    assert fenced.data["budget"] and fenced.reason.startswith("budget: ")
    assert any("budget" in json.dumps(s.body) for s in rig.api.conversation()[-1:])
    assert rec.status == "ACTIVE" and rec.usage == tokens_of(rig.api.conversation())


# ---------------------------------------------------------------------- a regular user
OTHER = "tetherx"  # the second user tests/e2e/test_home_trust.py makes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run tether as a regular user")
def test_hooks_fire_for_a_regular_user() -> None:
    """tether run as a regular user (the README's advice), Gemini in the default sandbox:
    the CLI loads a system defaults file only where root owns it and every directory above
    it — never under a user's tether home — so tether's hooks reach it only through the
    view of the user's own settings. (As root, the sandbox's root-owned /tmp hides this.)"""
    gemini = cli("gemini")
    if subprocess.run(["id", "-u", OTHER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", OTHER], check=True)
    uid = int(subprocess.run(["id", "-u", OTHER], capture_output=True, check=True).stdout)
    gid = int(subprocess.run(["id", "-g", OTHER], capture_output=True, check=True).stdout)
    top = Path(tempfile.mkdtemp(prefix="tg", dir="/tmp"))  # tmp_path is root's, 0700
    home, work, th = top / "user", top / "work", top / "t"
    work.mkdir()
    seed_home(home, trusted=[work])
    for p in (top, *top.rglob("*")):
        os.chown(p, uid, gid)
    top.chmod(0o755)
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    # The test's interpreter may live where the user cannot read (pyenv under /root): the
    # system's, with this checkout's tether and the test venv's packages.
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if python is None or subprocess.run(
            [*as_user, python, "-c", "import sys; assert sys.version_info[:2] == "
             f"{tuple(sys.version_info[:2])}"], capture_output=True).returncode != 0:
        pytest.skip("no system python3 of this version for a regular user")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    paths = [str(Path(tether_pkg.__file__).parent.parent), site]
    if subprocess.run([*as_user, python, "-c", "import tether.cli.main"],
                      env={"PYTHONPATH": ":".join(paths)}, capture_output=True).returncode:
        # A checkout the user cannot read (cloned into a 0700 directory): a copy it can,
        # hard-linked where it may be (one second for the venv, not a 385 MB copy).
        paths = [_readable_copy(Path(p), top / f"py{i}") for i, p in enumerate(paths)]
    pythonpath = ":".join(paths)
    with FakeGemini() as api:
        api.script(Answer(text="Done as a user.", prompt_tokens=6_000, output_tokens=14))
        env = {"PATH": os.environ["PATH"], **cli_env(api.base_url, home),
               **resolve_env([api.api]), "PYTHONPATH": pythonpath, "TETHER_DEFAULT_RUNTIME": "auto",
               "TETHER_AGENT_TICK": "0.2"}

        def tether(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*as_user, python, "-m", "tether.cli.main", "--home",
                                   str(th), *args], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=90)
        try:
            r = tether("run", "-d", *api.api.flags(), "--", str(gemini), "-m", MODEL, "-p",
                       "say done")
            assert r.returncode == 0, r.stderr
            assert tether("wait", r.stdout.strip()).returncode == 0
            assert "bwrap" in tether("sandbox", "ls").stdout
            rec: dict[str, Any] = {}

            def finished() -> bool:
                rec.update(_only_lineage(tether("lineage", "ls", "-a", "--json")))
                return rec.get("status") == "FINISHED"
            wait_for(finished, 30, interval=0.3, what="the lineage to finish")
            assert rec["turns"] == 1, rec
            assert rec["usage"] == tokens_of(api.conversation()), rec
        finally:
            tether("daemon", "stop")
            DaemonProc(th).cleanup()
            shutil.rmtree(top, ignore_errors=True)


def _readable_copy(src: Path, dst: Path) -> str:
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:  # another file system
            shutil.copy2(a, b)
    shutil.copytree(src, dst, copy_function=link, ignore=shutil.ignore_patterns("__pycache__"))
    for d in (dst, *(p for p in dst.rglob("*") if p.is_dir())):
        d.chmod(0o755)
    return str(dst)


def _only_lineage(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    rows = json.loads(r.stdout or "[]")
    assert len(rows) <= 1, rows
    return rows[0] if rows else {}
