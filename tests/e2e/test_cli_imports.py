"""Every command and the hook program load only what they use: start-up time is mostly
imports, and the hook program runs on every tool call an agent makes.

Each command runs for real against a real daemon with a scrubbed environment; the
modules it imported are listed from ``sys.modules`` as it exits. No timings are
asserted here (``python -m bench --only cli`` measures them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, wait_for

# Never needed by a command that only asks the daemon and prints: the spec parser, the
# docker SDK, the daemon's own packages, the event loop.
NEVER = {"yaml", "docker", "asyncio", "tether.daemon", "tether.store", "tether.runtime",
         "tether.spec", "tether.rpc"}
# Only ``run``, ``attach`` and the agent commands need these.
NOT_FOR_READS = NEVER | {"tether.cli.foreground",
                         "tether.cli.terminal", "tether.cli.commands.agent",
                         "tether.cli.commands.sandbox", "tether.agent", "tether.client.attach",
                         "subprocess"}
# rich renders tables and errors; a command that prints neither never loads it.
RICH = {"rich"}


def _scrubbed(**extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return {**env, **extra}


# Runs a module as ``python -m`` would and lists ``sys.modules`` at exit (whatever the
# exit): ``-X importtime`` misses modules loaded with ``importlib.import_module``.
PROBE = """\
import atexit, runpy, sys
out, mod = sys.argv[1], sys.argv[2]
sys.argv = [mod, *sys.argv[3:]]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
runpy.run_module(mod, run_name="__main__", alter_sys=True)
"""


def _imports(argv: list[str], env: dict[str, str], stdin: bytes = b""
             ) -> tuple[set[str], subprocess.CompletedProcess[bytes]]:
    """The modules ``argv`` (``python -m MODULE ARGS``) imported, and how it ended."""
    assert argv[:2] == [sys.executable, "-m"]
    with tempfile.NamedTemporaryFile(prefix="tether-imports-") as f:
        p = subprocess.run([sys.executable, "-c", PROBE, f.name, *argv[2:]], input=stdin,
                           capture_output=True, env=env, timeout=60)
        names = set(Path(f.name).read_text().split())
    assert "tether" in names, p.stderr.decode()[-2000:]
    return names, p


def _loaded(names: set[str], packages: set[str]) -> list[str]:
    """The modules of ``names`` that are one of ``packages`` or inside one."""
    return sorted(n for n in names if n in packages or n.split(".")[0] in packages
                  or any(n.startswith(p + ".") for p in packages))


def _tether(d: DaemonProc, *args: str) -> tuple[set[str], subprocess.CompletedProcess[bytes]]:
    return _imports([*TETHER, "--home", str(d.home), *args], _scrubbed())


def test_reads_load_neither_run_nor_agent_nor_rich(daemon: DaemonProc) -> None:
    c = daemon.client()
    x = c.exec_start(["echo", "hello"])
    c.exec_wait(x.id, timeout=10)
    for args in (["status"], ["logs", x.id], ["ps", "--json"],
                 ["events", "--since", "0"]):
        names, p = _tether(daemon, *args)
        assert p.returncode == 0, (args, p.stderr.decode()[-2000:])
        assert _loaded(names, NOT_FOR_READS | RICH) == [], args
    names, p = _tether(daemon, "logs", x.id)
    assert p.stdout == b"hello\n"


def test_tables_load_rich_but_not_run(daemon: DaemonProc) -> None:
    c = daemon.client()
    c.exec_start(["sleep", "60"], name="napper")
    names, p = _tether(daemon, "ps")
    assert p.returncode == 0 and b"napper" in p.stdout
    assert "rich.table" in names
    assert _loaded(names, NOT_FOR_READS) == []


def test_an_error_still_renders(daemon: DaemonProc) -> None:
    """Errors go through rich, loaded then: same message, same exit code."""
    names, p = _tether(daemon, "logs", "nosuch")
    assert p.returncode == 1
    assert p.stderr.decode().splitlines()[-1].startswith("tether: ")
    assert _loaded(names, NEVER) == []


def test_help_lists_every_command(daemon: DaemonProc) -> None:
    _names, p = _tether(daemon, "--help")
    assert p.returncode == 0
    text = p.stdout.decode()
    for cmd in ("run", "attach", "ps", "logs", "wait", "kill", "events", "sandbox", "cp",
                "lineage", "reap", "agent", "status", "daemon"):
        assert f"  {cmd} " in text, cmd
    _names, p = _tether(daemon, "lgos")  # a typo: click still suggests among them all
    assert p.returncode == 2
    assert "No such command 'lgos'. Did you mean 'logs'?" in p.stderr.decode()


@pytest.mark.parametrize("provider", ["claude", "codex"])
def test_hook_loads_no_provider_and_no_cli(daemon: DaemonProc, tmp_path: Path,
                                            provider: str) -> None:
    creds = tmp_path / "creds"
    lin = daemon.client().agent_start(
        ["sh", "-c", f'echo "$TETHER_SESSION $TETHER_TOKEN" > {creds}.tmp; '
                     f"mv {creds}.tmp {creds}; exec sleep 60"],
        provider="generic", cwd=str(tmp_path), revival="reap")
    wait_for(lambda: creds.exists(), 10, what="the agent's credentials")
    session, token = creds.read_text().split()
    assert session == lin.id
    env = _scrubbed(TETHER_HOME=str(daemon.home), TETHER_SESSION=session, TETHER_TOKEN=token)
    payload = json.dumps({"session_id": "s", "hook_event_name": "PreToolUse",
                          "tool_name": "Bash", "tool_input": {"command": "ls"}})
    argv = [sys.executable, "-m", "tether.agent.hook", "--home", str(daemon.home), provider]
    if provider == "claude":
        names, p = _imports([*argv, "PreToolUse"], env, payload.encode())
    else:
        names, p = _imports([*argv, "notify", json.dumps({"type": "other"})], env)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert b"not delivered" not in p.stderr and b"ignored" not in p.stderr
    # The daemon answers at once: one call with the standard library, no msgspec, no
    # full client (that is the fallback when the daemon is away or stopping), no
    # provider module (the hook knows which read their payload from argv), and not even
    # typing, pathlib, dataclasses, json (re) or socket (enum): each costs every tool call
    # a millisecond or more (client.wirejson drives _json, and _socket serves).
    heavy = NEVER | RICH | {"click", "tether.cli", "tether.client.attach",
                            "tether.hostio.untrusted", "subprocess", "msgspec",
                            "tether.client.blocking", "tether.client.errors",
                            "tether.agent.session", "tether.model", "typing", "pathlib",
                            "dataclasses", "base64", "json", "socket", "re", "enum"}
    heavy |= {f"tether.agent.providers.{n}" for n in ("base", "generic", "claude", "codex")}
    assert _loaded(names, heavy) == []


def test_hook_without_a_daemon_falls_back_to_the_full_client(stopped_daemon: DaemonProc
                                                              ) -> None:
    """No daemon answers the one-shot call: the full client retries for its budget, and
    (an agent never starting a daemon, issue 11 #11) then says so; the agent goes on."""
    env = _scrubbed(TETHER_HOME=str(stopped_daemon.home), TETHER_SESSION="nosuch",
                    TETHER_TOKEN="wrong")
    names, p = _imports([sys.executable, "-m", "tether.agent.hook", "claude", "Stop"], env,
                        b"{}")
    assert p.returncode == 0
    err = p.stderr.decode().strip()
    assert err.startswith("tether: hook Stop not delivered: no tether daemon answers on "), err
    assert "an agent never starts a daemon" in err
    assert "tether.client.blocking" in names
    assert not (stopped_daemon.home / "daemon.lock").exists()  # none was started
