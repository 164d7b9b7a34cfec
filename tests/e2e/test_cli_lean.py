"""The lean ``run``, ``wait`` and ``kill`` (``tether.cli.runfast``, reached through
``tether.cli.fast``) print the same bytes and exit with the same codes as the click
commands, over a matrix of flags, and load neither click, rich, msgspec nor the full
client when they handle the command line; whatever they do not handle reaches click.

Each pair runs for real against one real daemon: ``python -m tether.cli.fast`` (what the
installed ``tether`` script runs for these commands) beside ``python -m tether.cli.main``
(click only); the execs run in the default sandbox (bubblewrap where it works). Exec ids
and the names given differ between the two runs and are normalized. No timings
(``python -m bench --only run_cli`` measures them).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_cli_imports import _imports, _loaded, _scrubbed
from tests.harness import DaemonProc

FAST = [sys.executable, "-m", "tether.cli.fast"]
CLICK = [sys.executable, "-m", "tether.cli.main"]
HEAVY = {"click", "rich", "msgspec", "yaml", "tether.client.blocking", "tether.cli.main",
         "tether.cli.output", "tether.cli.commands", "tether.cli.foreground", "asyncio",
         "subprocess", "threading", "signal", "typing", "dataclasses", "uuid"}
ID = re.compile(rb"\b[0-9a-f]{12}\b")


def _norm(data: bytes, name: str) -> bytes:
    return ID.sub(b"<id>", data.replace(name.encode(), b"<name>"))


def _one(base: list[str], d: DaemonProc, args: tuple[str, ...], name: str, cwd: Path,
         env: dict[str, str], stdin: bytes | None, merged: bool
         ) -> tuple[int, bytes, bytes]:
    argv = [*base, "--home", str(d.home), *(a.replace("{name}", name) for a in args)]
    p = subprocess.run(argv, input=stdin if stdin is not None else b"", cwd=cwd, env=env,
                       stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT if merged else subprocess.PIPE, timeout=120)
    return p.returncode, _norm(p.stdout, name), _norm(p.stderr or b"", name)


_counter = iter(range(10**6))


def _both(d: DaemonProc, *args: str, cwd: Path, stdin: bytes | None = None,
          merged: bool = False, **env: str) -> tuple[int, bytes, bytes]:
    """``tether ARGS`` by both paths, which must agree on exit code, stdout and stderr;
    the lean run's result."""
    e = _scrubbed(**env)
    n = next(_counter)
    lean = _one(FAST, d, args, f"lean{n}", cwd, e, stdin, merged)
    slow = _one(CLICK, d, args, f"click{n}", cwd, e, stdin, merged)
    assert lean == slow, args
    return lean


def test_run_matrix_matches_click(daemon: DaemonProc, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "afile").write_text("x")
    cases: list[tuple[tuple[str, ...], dict[str, str]]] = [
        (("run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"), {}),
        (("run", "sh", "-c", "echo plain"), {}),
        (("run", "-d", "--", "sleep", "30"), {}),
        (("run", "--detach", "--name", "{name}", "--", "sleep", "30"), {}),
        (("run", "--name", "{name}", "--", "echo", "named"), {}),
        (("run", "--name={name}", "echo", "named"), {}),
        (("run", "-e", "FOO=bar", "-e", "COPIED", "--env=BAZ=a=b", "-eQ=1", "--",
          "sh", "-c", 'echo "$FOO $COPIED $BAZ $Q"'), {"COPIED": "from-shell"}),
        (("run", "--clean-env", "-e", "ONLY=1", "--", "sh", "-c",
          'env | grep -v -e ^TETHER_ -e ^PWD= -e ^SHLVL= -e ^_= | sort'), {"LEAK": "no"}),
        (("run", "--cwd", "sub", "--", "pwd"), {}),
        (("run", f"--cwd={proj / 'sub'}", "pwd"), {}),
        (("run", "--cwd", "afile", "--", "pwd"), {}),  # click.Path: a file is refused
        (("run", "--cwd", "nonexistent", "--", "pwd"), {}),
        (("run", "--workdir", str(proj / "sub"), "--", "pwd"), {}),
        (("run", "--timeout", "0.5", "--", "sleep", "10"), {}),
        (("run", "--timeout", "abc", "--", "true"), {}),
        (("run", "--", "sh", "-c", "kill -TERM $$"), {}),
        (("run", "--", "sh", "-c", "kill -KILL $$"), {}),
        (("run", "--", "sh", "-c", "exit 0"), {}),
        (("run", "--sandbox", "nosuch", "--", "true"), {}),
        (("run", "--", "no-such-command-here"), {}),
        (("run", "--", str(proj / "afile")), {}),  # not executable: 126
        (("run", "-e", "UNSET_IN_SHELL", "--", "true"), {}),
        (("run", "-e", "=x", "--", "true"), {}),
        (("run", "--bogus", "--", "true"), {}),
        (("run", "--nme", "x", "--", "true"), {}),
        (("run",), {}),
        (("run", "--"), {}),
        (("run", "--help"), {}),
        (("run", "-h"), {}),
        (("run", "-dx", "--", "true"), {}),
        (("run", "--no-agent", "--", "echo", "plain"), {}),
        (("run", "--", "printf", "\\377\\376 binary\\000 bytes"), {}),
        (("run", "--", "sh", "-c", "seq 1 100000"), {}),
        (("run", "--", "sh", "-c", "seq 1 3 | tee /dev/stderr"), {}),
        (("run", "--", "true"), {"TETHER_DETACH_KEYS": "ctrl-p,ctrl-q"}),
        (("run", "--", "true"), {"TETHER_DETACH_KEYS": "bogus-keys"}),
    ]
    for args, env in cases:
        _both(daemon, *args, cwd=proj, **env)
    code, out, err = _both(daemon, "run", "--", "sh", "-c", "echo out; echo err >&2; exit 3",
                           cwd=proj)
    assert (code, out, err) == (3, b"out\n", b"err\n")
    code, out, _ = _both(daemon, "run", "--", "sh", "-c", "kill -TERM $$", cwd=proj)
    assert code == 128 + signal.SIGTERM
    code, _, err = _both(daemon, "run", "--sandbox", "nosuch", "--", "true", cwd=proj)
    assert code == 1 and err.startswith(b"tether: no sandbox matches 'nosuch'"), err
    code, out, _ = _both(daemon, "run", "-d", "--", "sleep", "30", cwd=proj)
    assert (code, out) == (0, b"<id>\n")
    # The order of the two streams, as a `2>&1` sees it (writes apart: within one of the
    # monitor's wake-ups, they come stream by stream).
    code, out, _ = _both(daemon, "run", "--", "sh", "-c",
                         "echo 1; sleep 0.2; echo 2 >&2; sleep 0.2; echo 3; sleep 0.2; "
                         "echo 4 >&2", cwd=proj, merged=True)
    assert out == b"1\n2\n3\n4\n"
    _both(daemon, "run", "--", "true", cwd=Path("/tmp"))  # a system directory


def test_run_it_from_a_pipe_is_refused_alike(daemon: DaemonProc, tmp_path: Path) -> None:
    for args in (("run", "-it", "--", "true"), ("run", "-ti", "cat"),
                 ("run", "-t", "-i", "--", "true"), ("run", "--tty", "--interactive", "true")):
        code, out, err = _both(daemon, *args, cwd=tmp_path, stdin=b"typed\n")
        assert code == 1 and out == b"", args
        assert err.startswith(b"tether: the input device is not a TTY"), err
    assert daemon.client().exec_list(all=True) == []  # nothing was started
    code, out, _ = _both(daemon, "run", "-dit", "--", "true", cwd=tmp_path)  # -d: allowed
    assert (code, out) == (0, b"<id>\n")


def test_wait_and_kill_match_click(daemon: DaemonProc, tmp_path: Path) -> None:
    c = daemon.client()
    done = c.exec_start(["sh", "-c", "exit 7"], cwd=str(tmp_path), name="seven")
    c.exec_wait(done.id, timeout=30)
    killed = c.exec_start(["sh", "-c", "kill -KILL $$"], cwd=str(tmp_path))
    c.exec_wait(killed.id, timeout=30)
    for args in (("wait", done.id), ("wait", "seven"), ("wait", killed.id),
                 ("wait", "nosuch"), ("wait",), ("wait", "--help"), ("wait", "a", "b"),
                 ("kill", done.id), ("kill", "nosuch"), ("kill", done.id, "nosuch"),
                 ("kill",), ("kill", "--grace", "x", done.id), ("kill", "--bogus", done.id),
                 ("kill", "-s", "NOSIG", done.id)):
        _both(daemon, *args, cwd=tmp_path)
    code, out, _ = _both(daemon, "wait", done.id, cwd=tmp_path)
    assert (code, out) == (7, b"7\n")
    code, out, _ = _both(daemon, "wait", killed.id, cwd=tmp_path)
    assert (code, out) == (137, b"137\n")
    for how in (("-s", "KILL"), ("-sINT",), ("--signal=TERM", "--grace", "1"), ()):
        pair = [c.exec_start(["sleep", "60"], cwd=str(tmp_path)).id for _ in range(2)]
        for base, ref in zip((FAST, CLICK), pair, strict=True):
            p = subprocess.run([*base, "--home", str(daemon.home), "kill", *how, ref],
                               capture_output=True, env=_scrubbed(), timeout=60)
            assert (p.returncode, p.stdout, p.stderr) == (0, f"{ref}\n".encode(), b"")
        ends = [c.exec_wait(ref, timeout=30) for ref in pair]
        assert ends[0].state == ends[1].state == "CANCELLED"
        assert ends[0].signal == ends[1].signal and ends[0].reason == ends[1].reason


def test_ctrl_c_cancels_alike(daemon: DaemonProc, tmp_path: Path) -> None:
    """Ctrl-C: SIGTERM to the command (it ends 128+15); a second one: SIGKILL."""
    for base in (FAST, CLICK):
        for trap, signals, want in (("", 1, 143), ("trap '' TERM;", 2, 137)):
            p = subprocess.Popen([*base, "--home", str(daemon.home), "run", "--", "sh", "-c",
                                  f"{trap} echo ready; sleep 30"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, cwd=tmp_path, env=_scrubbed())
            assert p.stdout is not None
            assert p.stdout.readline() == b"ready\n"
            for _ in range(signals):
                p.send_signal(signal.SIGINT)
                time.sleep(0.3)
            out, err = p.communicate(timeout=60)
            assert (p.returncode, out, err) == (want, b"", b""), (base, trap)


def test_lean_run_survives_a_daemon_sigkill(stopped_daemon: DaemonProc, tmp_path: Path
                                           ) -> None:
    """The daemon is SIGKILLed while the lean run follows: it carries on with the full
    client from the byte it reached, so each line shows once, and the real exit code."""
    d = stopped_daemon
    d.start()
    go = tmp_path / "go"
    p = subprocess.Popen([*FAST, "--home", str(d.home), "run", "--", "sh", "-c",
                          f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; "
                          "echo after; exit 5"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                         env=_scrubbed())
    assert p.stdout is not None
    assert p.stdout.readline() == b"before\n"
    d.kill9()
    go.touch()
    d.start()
    out, err = p.communicate(timeout=90)
    assert (p.returncode, out) == (5, b"after\n"), err.decode()[-2000:]


def test_lean_paths_load_no_click_rich_or_msgspec(daemon: DaemonProc, tmp_path: Path
                                                 ) -> None:
    x = daemon.client().exec_start(["true"], cwd=str(tmp_path))
    daemon.client().exec_wait(x.id, timeout=30)
    for args in (["run", "--", "true"], ["run", "-d", "--", "true"],
                 ["run", "-e", "A=1", "--name", "n", "--cwd", str(tmp_path), "--", "true"],
                 ["wait", x.id], ["kill", x.id]):
        names, p = _imports([*FAST, "--home", str(daemon.home), *args], _scrubbed())
        assert p.returncode == 0, (args, p.stderr.decode()[-2000:])
        assert _loaded(names, HEAVY) == [], args
        assert "tether.cli.runfast" in names
    for args in (["run", "--runtime", "process", "--", "true"], ["run", "claude", "-p"],
                 ["run", "-t", "--", "true"]):
        names, p = _imports([*FAST, "--home", str(daemon.home), *args], _scrubbed())
        assert "click" in names, args  # not a form it handles: click's


def test_a_provider_profile_or_agent_command_goes_to_click(daemon: DaemonProc,
                                                           tmp_path: Path) -> None:
    """`tether run claude` and a command a profile in <home>/providers claims start an
    agent session: the click command's, never a plain exec from the lean path."""
    providers = daemon.home / "providers"
    providers.mkdir()
    (providers / "mine.toml").write_text('commands = ["mycli"]\n')
    names, _ = _imports([*FAST, "--home", str(daemon.home), "run", "--", "true"],
                        _scrubbed())
    assert "click" in names
    names, p = _imports([*FAST, "--home", str(daemon.home), "run", "--no-agent", "--",
                         "true"], _scrubbed())
    assert p.returncode == 0 and "click" not in names


@pytest.mark.parametrize("var", ["TETHER_FLEET_URL", "TETHER_FLEET_URL_FILE"])
def test_fleet_mode_is_clicks(daemon: DaemonProc, tmp_path: Path, var: str) -> None:
    """The root group's fleet variables send ps, run, wait and kill to the fleet: the lean
    paths step aside (they spoke to this machine's daemon before)."""
    value = "postgresql://nobody@127.0.0.1:1/none" if var == "TETHER_FLEET_URL" else str(
        tmp_path / "nofile")
    for args in (("ps",), ("run", "--", "true"), ("wait", "x"), ("kill", "x")):
        names, _ = _imports([*FAST, "--home", str(daemon.home), *args],
                            _scrubbed(**{var: value}))
        assert "click" in names, args
