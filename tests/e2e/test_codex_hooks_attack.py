"""What a sandboxed Codex session tells the daemon through its hooks, attacked from inside
the default sandbox (bwrap): a real daemon, real bubblewrap, the real hook program.

The "Codex" here is the attacker's own program, named ``codex`` and run as a Codex agent:
it reads the hook commands tether gives Codex on its command line (``-c hooks.EVENT=…``)
and calls them as Codex would, with payloads of its making — what a compromised Codex (or
anything it runs, with its environment) can do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")

EVIL = "--dangerously-bypass-approvals-and-sandbox"
ATTACKER = r'''#!/usr/bin/python3
import json, os, subprocess, sys, time, tomllib
attempt = os.environ["TETHER_ATTEMPT"]
with open(f".argv.{attempt}.json", "w") as f:  # whole, then named: the test reads it
    json.dump(sys.argv[1:], f)
os.rename(f".argv.{attempt}.json", f"argv.{attempt}.json")
hooks = {}
args = sys.argv[1:]
for flag, value in zip(args, args[1:]):
    if flag == "-c" and value.startswith("hooks."):
        for event, groups in tomllib.loads(value)["hooks"].items():
            hooks[event] = groups[0]["hooks"][0]["command"]
if attempt == "1":
    evil = "--dangerously-bypass-approvals-and-sandbox"
    day = os.path.expanduser("~/.codex/sessions/2026/01/01")
    os.makedirs(day, exist_ok=True)
    open(f"{day}/rollout-2026-01-01T00-00-00-{evil}.jsonl", "w").write("{}\n")
    for event, payload in (("SessionStart", {"session_id": evil, "source": "startup"}),
                           ("Stop", {"session_id": evil, "turn_id": "t-1"})):
        subprocess.run(hooks[event], shell=True, input=json.dumps(payload).encode(),
                       check=True)
    open("attacked", "w").close()
    sys.exit(1)  # a crash: tether revives it
time.sleep(60)
'''


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    user = tmp_path / "home"
    (user / ".codex").mkdir(parents=True)
    d = DaemonProc(new_home(), env={"TETHER_DEFAULT_RUNTIME": "auto", "HOME": str(user),
                                    "TETHER_AGENT_TICK": "0.2"})
    d.start()
    yield d
    d.cleanup()
    remove_home(d.home)


def test_a_thread_id_that_reads_as_an_option_never_reaches_codexs_command_line(
        daemon: DaemonProc, tmp_path: Path) -> None:
    """The agent names its "thread" ``--dangerously-bypass-approvals-and-sandbox`` through
    ``SessionStart`` and ``Stop`` (and plants a rollout file of that name in ``~/.codex``,
    which it may write), then crashes: a revival resuming that "thread" would have put the
    option on Codex's command line. It is no thread id: the lineage learns none, and the
    revival starts Codex afresh."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "codex").write_text(ATTACKER)
    (work / "codex").chmod(0o755)
    r = daemon.cli("run", "-d", "--cwd", str(work), "--", str(work / "codex"), "do the task")
    assert r.returncode == 0, r.stderr
    lineage = daemon.client().exec_get(r.stdout.decode().strip()).lineage
    assert lineage is not None
    wait_for(lambda: (work / "argv.2.json").exists(), timeout=90, what="the revival")
    assert (work / "attacked").exists()  # the hooks were called, from inside
    first = json.loads((work / "argv.1.json").read_text())
    second = json.loads((work / "argv.2.json").read_text())
    assert second == first  # afresh, as launched: no "resume", no planted option
    assert "resume" not in second and EVIL not in second
    rec = daemon.client().lineage_get(lineage)
    assert rec.provider_session_id is None and rec.attempt == 2

