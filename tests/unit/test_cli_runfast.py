"""The lean ``run``'s command-line reading (``tether.cli.runfast``) agrees with the click
command's, and its constants (and the lean attach's) with the modules they must not import."""

from __future__ import annotations

import pytest

from tether.cli.fast import Decline
from tether.cli.runfast import AGENT_COMMANDS, KILL_GRACE, exit_code, parse_run

ACCEPTED = [
    ["--", "true"], ["true"], ["-d", "--", "sleep", "1"], ["--detach", "x", "-d"],
    ["--name", "n", "--sandbox", "sb", "--", "a"], ["--name=n", "--sandbox=sb", "a", "--"],
    ["-e", "A=1", "-eB=2", "--env", "C=3", "--env=D=4=5", "--", "env"],
    ["-de", "A=1", "x"], ["-deA=1", "x"], ["-it", "--", "cat"], ["-dit", "cat"],
    ["--cwd", "/", "--timeout", "1.5", "--clean-env", "--no-agent", "--", "pwd"],
    ["--timeout=2", "-t", "-i", "--tty", "--interactive", "x"],
    ["--", "-d", "--name", "x"], ["prog", "-d", "--name", "x"], ["-", "x"],
    ["--name", "a", "--name", "b", "x"], ["--timeout", "1e3", "x"],
]
DECLINED = [
    [], ["--"], ["-d"], ["--bogus", "x"], ["-x", "x"], ["-dx", "x"], ["--name"],
    ["--name", "-d", "x"], ["--name=", "x"], ["--timeout", "abc", "x"],
    ["--timeout", "nan", "x"], ["--timeout", "inf", "x"], ["--detach=1", "x"],
    ["--runtime", "process", "x"], ["--agent", "claude", "x"], ["-h"], ["--help", "x"],
    ["--detach-keys", "ctrl-p", "x"], ["--workdir", "/", "x"], ["-e"],
]


def _click(args: list[str]) -> dict[str, object]:
    from tether.cli.commands.execs import run

    ctx = run.make_context("run", list(args))
    return ctx.params


@pytest.mark.parametrize("args", ACCEPTED, ids=" ".join)
def test_accepted_lines_read_as_click_reads_them(args: list[str]) -> None:
    opts, argv = parse_run(args)
    p = _click(args)
    assert tuple(argv) == p["argv"]
    assert bool(opts.get("detach")) == p["detach"]
    assert bool(opts.get("tty")) == p["use_tty"]
    assert bool(opts.get("interactive")) == p["interactive"]
    assert bool(opts.get("clean_env")) == p["clean_env"]
    assert bool(opts.get("no_agent")) == p["no_agent"]
    assert opts.get("name") == p["name"]
    assert opts.get("sandbox", "default") == p["sandbox"]
    assert tuple(opts["env"]) == p["envs"]
    assert opts.get("cwd") == p["cwd"]
    assert opts.get("timeout") == p["timeout"]


@pytest.mark.parametrize("args", DECLINED, ids=" ".join)
def test_other_lines_are_clicks(args: list[str]) -> None:
    with pytest.raises(Decline):
        parse_run(args)


def test_constants_match_what_the_lean_path_does_not_import() -> None:
    from tether.agent.providers import REGISTRY
    from tether.cli.terminal import exit_code as terminal_exit_code
    from tether.model.records import KILL_GRACE as RECORDS_GRACE

    assert {c for p in REGISTRY.values() for c in p.commands} == AGENT_COMMANDS
    assert RECORDS_GRACE == KILL_GRACE
    for state, code, sig in (("FINISHED", 3, None), ("CANCELLED", None, 15),
                             ("FAILED", None, None), ("FINISHED", 0, None),
                             ("CANCELLED", 137, None)):
        assert exit_code({"state": state, "exit_code": code, "signal": sig}) == \
            terminal_exit_code(state, code, sig)


def test_the_lean_attach_constants_match() -> None:
    from tether.cli import attachfast
    from tether.cli.terminal import DEFAULT_DETACH_KEYS, parse_detach_keys
    from tether.monitor.attachproto import DEFAULT_REPLAY

    assert attachfast.DEFAULT_REPLAY == DEFAULT_REPLAY
    assert parse_detach_keys(DEFAULT_DETACH_KEYS) == attachfast.DEFAULT_KEYS
