"""A lineage's id or name reaches its current attempt (issue 20, finding 10): after a
revival the agent runs as a new exec, and ``tether attach|logs|kill|wait LINEAGE`` must
find it. And a terminal query in the replay an attaching client is shown is not answered
into the program's input. Real daemon, real monitors, a real terminal (tmux)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import DaemonProc, wait_for

FAST = {"TETHER_AGENT_TICK": "0.2"}
# Asks its terminal for DA2 and XTVERSION at start (as agent CLIs do), then echoes lines.
ECHO = ("printf 'ready\\033[>c\\033[>0q\\n'; "
        "while IFS= read -r l; do printf 'GOT[%s]\\n' \"$l\" | od -c | head -3; done")


@pytest.fixture
def fast(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env=FAST)
    return stopped_daemon


def revived_agent(d: DaemonProc, name: str) -> tuple[str, str, str]:
    """A terminal agent killed once and revived: (lineage, first exec, current exec)."""
    c = d.client()
    lin = c.agent_start(["/bin/sh", "-c", ECHO], provider="generic", name=name, tty=True,
                        env={"PATH": os.environ["PATH"]}, revival="revive")
    first = lin.exec or ""
    wait_for(lambda: b"ready" in d.cli("logs", first).stdout, what="attempt 1 ready")
    os.killpg(d.handles(first)["child"]["pid"], signal.SIGKILL)
    wait_for(lambda: c.lineage_get(lin.id).attempt == 2
             and c.lineage_get(lin.id).status == "ACTIVE", what="the revival")
    now = c.lineage_get(lin.id).exec or ""
    assert now != first
    wait_for(lambda: b"ready" in d.cli("logs", now).stdout, what="attempt 2 ready")
    return lin.id, first, now


def test_lineage_id_and_name_reach_the_current_attempt(fast: DaemonProc) -> None:
    d = fast
    lineage, first, now = revived_agent(d, "bob")
    for ref in (lineage, lineage[:6], "bob"):
        r = d.cli("logs", ref)
        assert r.returncode == 0 and b"ready" in r.stdout, (ref, r.stderr)
        assert d.client().exec_get(ref).id == now, ref
    # The SDK's attach (as `tether attach`) reaches the revived exec by the lineage id.
    with d.client().attach(lineage) as a:
        a.write(b"hi\r")
        assert b"G   O   T   [   h   i   ]" in a.read_until(b"]", timeout=10)
    r = d.cli("kill", lineage)
    assert r.returncode == 0 and r.stdout.decode().strip() == now, r.stderr
    r = d.cli("wait", "bob")
    assert r.returncode == 143 and r.stdout.strip() == b"143", (r.stdout, r.stderr)
    wait_for(lambda: d.client().lineage_get(lineage).status == "FINISHED")
    # An exec id still means that exec, a lineage's old attempt included.
    assert d.client().exec_get(first).id == first
    r = d.cli("logs", "nosuch")
    assert r.returncode == 1 and b"no exec matches 'nosuch'" in r.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_replayed_terminal_query_is_not_answered_into_the_input(fast: DaemonProc,
                                                                   tmp_path: Path) -> None:
    """tmux answers DA2 and XTVERSION queries it sees; shown again in a replay, they were
    answered into the revived agent's input (`>|tmux 3.3a1;2c` in its prompt)."""
    d = fast
    lineage, _, now = revived_agent(d, "ann")
    time.sleep(0.5)  # the queries are history now: only a replay shows them again
    server = f"tt-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", server, "-f", "/dev/null"]
    env = {**d.env, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    cmd = f"{' '.join(d_argv(d))} attach {lineage}"
    subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", cmd], env=env,
                   check=True)
    try:
        wait_for(lambda: b"ready" in subprocess.run(
            [*tmux, "capture-pane", "-p"], capture_output=True, env=env).stdout,
            what="the replay in tmux")
        time.sleep(0.5)  # tmux has answered whatever it was asked by now
        subprocess.run([*tmux, "send-keys", "hello", "Enter"], env=env, check=True)
        wait_for(lambda: b"G   O   T" in d.cli("logs", now).stdout, what="the echo")
        out = d.cli("logs", "--plain", now).stdout.decode()
        got = out[out.index("G   O   T"):]
        assert got.startswith("G   O   T   [   h   e   l   l   o   ]"), got[:200]
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)


def d_argv(d: DaemonProc) -> list[str]:
    from tests.harness import TETHER

    return [*TETHER, "--home", str(d.home)]


def test_an_attached_client_follows_its_agent_to_the_revived_attempt(
        fast: DaemonProc, tmp_path: Path) -> None:
    """Issue 23 item 9: kill -9 of an `-it` agent left its user at the shell while the
    lineage was revived. The client says so in one line and attaches to the new attempt."""
    import pexpect

    d = fast
    env = {**d.env, "TERM": "xterm"}
    for stale in ("LINES", "COLUMNS"):
        env.pop(stale, None)
    argv = [*d_argv(d), "run", "-it", "--name", "cat", "--agent", "generic", "--",
            "/bin/sh", "-c", "echo attempt-$TETHER_ATTEMPT; exec cat"]
    child = pexpect.spawn(argv[0], argv[1:], env=env, timeout=30, cwd=str(tmp_path),
                          dimensions=(24, 80))
    try:
        child.expect_exact("attempt-1")
        lineage = d.client().lineage_list()[0].id
        first = d.client().lineage_get(lineage).exec or ""
        os.killpg(d.handles(first)["child"]["pid"], signal.SIGKILL)
        child.expect("agent cat was revived \\(attempt 2, exec [0-9a-f]{12}\\); attached to "
                     "it again")
        child.expect_exact("attempt-2")
        child.send("hello\r")
        child.expect_exact("hello\r\nhello")  # typed, then echoed back by cat
        child.send("\x1c")  # detach
        child.expect(pexpect.EOF)
        assert d.client().lineage_get(lineage).attempt == 2
    finally:
        child.close(force=True)


def test_tether_attach_follows_its_agent_to_the_revived_attempt(
        fast: DaemonProc, tmp_path: Path) -> None:
    """Issue 23 item 9, through `tether attach` from a terminal (which attaches without
    click for a plain exec): attached to an agent by its name, the client follows the
    lineage to its next attempt when the first is killed, as `run -it` does."""
    import pexpect

    d = fast
    r = d.cli("run", "-d", "-t", "--name", "dog", "--agent", "generic", "--cwd", str(tmp_path),
              "--", "/bin/sh", "-c", "echo attempt-$TETHER_ATTEMPT; exec cat")
    assert r.returncode == 0, r.stderr
    lineage = d.client().lineage_list()[0].id
    env = {**d.env, "TERM": "xterm"}
    for stale in ("LINES", "COLUMNS"):
        env.pop(stale, None)
    # the console script (tether.cli.entry), whose `attach` from a terminal is lean
    argv = [str(Path(sys.executable).with_name("tether")), "--home", str(d.home), "attach",
            "dog"]
    child = pexpect.spawn(argv[0], argv[1:], env=env, timeout=30, cwd=str(tmp_path),
                          dimensions=(24, 80))
    try:
        child.expect_exact("attempt-1")
        first = d.client().lineage_get(lineage).exec or ""
        os.killpg(d.handles(first)["child"]["pid"], signal.SIGKILL)
        child.expect("agent dog was revived \\(attempt 2, exec [0-9a-f]{12}\\); attached to "
                     "it again")
        child.expect_exact("attempt-2")
        child.send("hello\r")
        child.expect_exact("hello\r\nhello")
        child.send("\x1c")  # detach
        child.expect(pexpect.EOF)
        assert d.client().lineage_get(lineage).attempt == 2
    finally:
        child.close(force=True)
