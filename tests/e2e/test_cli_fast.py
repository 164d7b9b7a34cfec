"""The console script's fast path (``tether.cli.fast``): ``ps``, ``status`` and ``logs``
print the same bytes as the click commands, with the same exit codes, and without
loading click, rich, msgspec or yaml; anything it does not handle reaches click.

Each pair runs for real against one real daemon: ``python -m tether.cli.fast`` (what the
installed ``tether`` script runs) beside ``python -m tether.cli.main`` (click only).
No timings (``python -m bench --only cli`` measures them).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.test_cli_imports import _imports, _loaded, _scrubbed
from tests.harness import DaemonProc, wait_for

FAST = [sys.executable, "-m", "tether.cli.fast"]
CLICK = [sys.executable, "-m", "tether.cli.main"]
HEAVY = {"click", "rich", "msgspec", "yaml", "tether.client.blocking", "tether.cli.main",
         "tether.cli.output", "tether.cli.commands", "asyncio", "subprocess"}


def _both(d: DaemonProc, *args: str, **env: str
          ) -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes]]:
    """Both paths' runs of ``tether ARGS``, which must match. The daemon's state may move
    between the two runs (a runtime probed meanwhile), so a mismatch is tried again."""
    e = _scrubbed(**env)
    for _ in range(5):
        fast, slow = (subprocess.run([*base, "--home", str(d.home), *args],
                                     capture_output=True, env=e, timeout=60)
                      for base in (FAST, CLICK))
        seen = [(p.returncode, _steady(p.stdout), p.stderr) for p in (fast, slow)]
        if seen[0] == seen[1]:
            return fast, slow
        time.sleep(0.5)
    assert seen[0] == seen[1], args
    raise AssertionError(args)


def _steady(out: bytes) -> bytes:
    """``status``'s uptime moves between the two runs; nothing else may differ."""
    return re.sub(rb"^(daemon   pid \d+, \w+, up )\d+s", rb"\1Ns", out)


def _agent(d: DaemonProc, tmp: Path) -> None:
    creds = tmp / "creds"
    d.client().agent_start(["sh", "-c", f"touch {creds}; exec sleep 60"],
                           provider="generic", cwd=str(tmp), revival="reap")
    wait_for(creds.exists, 10, what="the agent")


def test_fast_and_click_print_the_same_bytes(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    done = c.exec_start(["sh", "-c", "echo out; echo err >&2; exit 3"], name="three")
    c.exec_wait(done.id, timeout=10)
    c.exec_start(["sleep", "60"], name="napper")
    cases: list[tuple[str, ...]] = [
        ("ps",), ("ps", "-a"), ("ps", "--all", "--json"), ("ps", "--json"), ("status",),
        ("logs", done.id), ("logs", "--stderr", done.id), ("logs", "--stdout", done.id),
        ("logs", "--stdout", "--stderr", done.id), ("logs", done.id[:6]),
        ("logs", "nosuch"), ("ps", "--bogus"), ("logs", "-f", done.id), ("ps", "--help")]
    for args in cases:
        _both(daemon, *args)
    fast, _ = _both(daemon, "logs", done.id)
    assert (fast.stdout, fast.stderr) == (b"out\n", b"err\n")  # each to its own stream
    fast, _ = _both(daemon, "logs", "--stderr", done.id)
    assert (fast.stdout, fast.stderr) == (b"err\n", b"")  # the one asked for, to stdout
    fast, _ = _both(daemon, "logs", "nosuch")
    assert fast.returncode == 1 and fast.stderr.startswith(b"tether: ")
    _agent(daemon, tmp_path)  # the agent columns
    marked = c.exec_start(["echo", "[bold]not markup[/] :smile:"], name="marked")
    c.exec_wait(marked.id, timeout=10)
    for args in (("ps",), ("ps", "-a"), ("ps", "-a", "--json")):
        fast, _ = _both(daemon, *args)
        assert b"LIFECYCLE" in fast.stdout or b'"agent": {' in fast.stdout
    fast, _ = _both(daemon, "ps", FORCE_COLOR="1")  # rich colours on request: click draws
    assert b"\x1b[" in fast.stdout


def test_no_daemon_reaches_the_full_client(stopped_daemon: DaemonProc) -> None:
    """The fast path never starts a daemon: the click path's client does, as before."""
    fast = subprocess.run([*FAST, "--home", str(stopped_daemon.home), "status"],
                          capture_output=True, env=_scrubbed(), timeout=60)
    assert fast.returncode == 0, fast.stderr.decode()[-2000:]
    assert fast.stdout.startswith(b"daemon   pid ")
    assert (stopped_daemon.home / "daemon.lock").exists()
    subprocess.run([*CLICK, "--home", str(stopped_daemon.home), "daemon", "stop"],
                   capture_output=True, env=_scrubbed(), timeout=60)


def test_fast_path_loads_no_click_rich_or_msgspec(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["echo", "hello"], name="hi")
    c.exec_wait(x.id, timeout=10)
    for args in (["ps"], ["ps", "-a"], ["ps", "-a", "--json"], ["status"], ["logs", x.id]):
        names, p = _imports([*FAST, "--home", str(daemon.home), *args], _scrubbed())
        assert p.returncode == 0, (args, p.stderr.decode()[-2000:])
        assert _loaded(names, HEAVY | {"typing", "pathlib", "dataclasses"}) == [], args
        assert "tether.client.oneshot" in names
    names, p = _imports([*FAST, "--home", str(daemon.home), "ps", "--sandbox", "default"],
                        _scrubbed())
    assert p.returncode == 0 and "click" in names  # not a form it knows: click's


def test_ps_shows_a_sandbox_by_its_name_in_both_paths(daemon: DaemonProc) -> None:
    """People name sandboxes; `ps` showed the id. `--json` keeps the id (a stable ref)."""
    c = daemon.client()
    sb = c.sandbox_create("mybox", runtime="process")
    c.exec_start(["sleep", "60"], sandbox="mybox")
    fast, _ = _both(daemon, "ps")
    row = fast.stdout.decode().splitlines()[1].split()
    assert row[1:3] == ["-", "mybox"], fast.stdout
    fast, _ = _both(daemon, "ps", "--json")
    assert json.loads(fast.stdout)[0]["sandbox"] == sb.id != "mybox"
