"""The README's commands as a stranger types them, against the real daemon: what reaches
the command, what is a usage error (exit 2), and what a terminal of unknown size gets."""

from __future__ import annotations

import shlex
from pathlib import Path

import pexpect

from tests.harness import TETHER, DaemonProc
from tests.rawrpc import RawConn


def test_options_after_the_command_are_the_commands(daemon: DaemonProc) -> None:
    # `tether run claude -d` must give claude its -d, not detach tether.
    r = daemon.cli("run", "echo", "-d", "--name", "x", "hi")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == b"-d --name x hi"


def test_an_unknown_option_before_the_command_is_a_usage_error(daemon: DaemonProc) -> None:
    for args in (("run", "--nme", "x", "--", "true"), ("run", "-x", "true"),
                 ("schedule", "add", "j", "--evry", "1h", "--", "true")):
        r = daemon.cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert b"No such option" in r.stderr, r.stderr
    with daemon.client() as c:
        assert c.exec_list(all=True) == []
        assert c.schedule_list() == []


def test_schedule_add_passes_the_commands_own_options(daemon: DaemonProc) -> None:
    r = daemon.cli("schedule", "add", "j", "--every", "1h", "echo", "--tz", "x")
    assert r.returncode == 0, r.stderr
    with daemon.client() as c:
        [job] = c.schedule_list()
        assert job.spec.tz == "UTC"
        assert job.spec.exec.argv == ["echo", "--tz", "x"]


def test_run_it_on_a_terminal_of_unknown_size(daemon: DaemonProc, tmp_path: Path) -> None:
    # A pty nobody sized (a serial console, `script` in a pipe) says 0x0.
    child = pexpect.spawn(TETHER[0], [*TETHER[1:], "--home", str(daemon.home), "run", "-it",
                                      "--", "sh", "-c", "stty size; exit 3"],
                          env=daemon.env, dimensions=(0, 0), timeout=20, cwd=str(tmp_path))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3, child.before
    assert b"invalid params" not in child.before


def test_messages_are_printed_as_written(daemon: DaemonProc, tmp_path: Path) -> None:
    # `tether cost` tells you to add a [[price]]; a name may hold brackets too.
    r = daemon.cli("wait", "[bold]x")
    assert r.returncode == 1
    assert b"no exec matches '[bold]x'" in r.stderr, r.stderr
    agent = tmp_path / "agent"
    agent.write_text(f"#!/bin/sh\n{shlex.join(TETHER)} agent turn --model llama-local-7b\n")
    agent.chmod(0o755)
    r = daemon.cli("run", "--agent", "generic", "--", str(agent))
    assert r.returncode == 0, r.stderr
    r = daemon.cli("cost")
    assert b"add a [[price]] for it to" in r.stderr, r.stderr


def test_the_readmes_socket_example_runs_in_its_project_directory(
        stopped_daemon: DaemonProc, tmp_path: Path) -> None:
    # README, "Any language": exec.start with argv and cwd runs there, sandboxed where
    # bwrap works; without a cwd the default sandbox has no project directory to give it,
    # and a raw caller is refused rather than run unsandboxed.
    daemon = stopped_daemon
    daemon.start(env={"TETHER_DEFAULT_RUNTIME": "auto"})
    app = tmp_path / "app"
    app.mkdir()
    with RawConn(daemon.socket) as conn:
        x = conn.result("exec.start", {"argv": ["pwd"], "cwd": str(app)})
        bare = conn.call("exec.start", {"argv": ["pwd"]})
    with daemon.client() as c:
        assert c.exec_wait(x["id"]).exit_code == 0
        assert b"".join(c.read_logs(x["id"])) == f"{app}\n".encode()
        assert c.exec_get(x["id"]).notice is None
        bwrap = c.status().runtimes["bwrap"].available
    if bwrap:
        assert bare["error"]["data"]["code"] == "CANNOT_SANDBOX_HERE", bare
        assert "give cwd: a project directory" in bare["error"]["message"], bare


def test_hook_add_says_what_is_wrong_with_a_url(daemon: DaemonProc) -> None:
    r = daemon.cli("hook", "add", "x", "--on", "exec.*", "--url", "ftp://x")
    assert r.returncode == 2, r.stderr
    assert b"'ftp://x' is not an http:// or https:// URL" in r.stderr, r.stderr
    r = daemon.cli("hook", "add", "p", "--on", "agent.waiting", "--exec", "--",
                   "notify-send", "an agent needs you")
    assert r.stdout == b"hook p: agent.waiting -> exec: notify-send 'an agent needs you'\n"
