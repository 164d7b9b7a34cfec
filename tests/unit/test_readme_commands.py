"""Every `tether …` line in the README's code blocks names a real command, with options
that command has: the README is what a stranger types first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from tether.cli.main import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[list[str]]:
    """The argv of each `tether` line in a fenced block, continuations joined."""
    lines: list[list[str]] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", README.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\$ ", "", line.strip())
            if not line.startswith("tether "):
                continue
            line = line.split("  #")[0].replace("…", "X")
            lines.append(shlex.split(line)[1:])
    return lines


def resolve(argv: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command an argv reaches, the options given to it, and the path to it."""
    cmd: click.Command = cli
    path = ["tether"]
    options = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        word = argv[i]
        i += 1
        if word.startswith("-"):
            options.append(word.split("=")[0])
            param = _param(cmd, options[-1])
            if param is not None and "=" not in word and not (
                    isinstance(param, click.Option) and (param.is_flag or param.count)):
                i += 1  # its value
            continue
        sub = (cmd.get_command(click.Context(cmd), word.split("|")[0])
               if isinstance(cmd, click.Group) else None)
        if sub is None and cmd.name == "run":
            break  # the program's own words
        if sub is not None:
            cmd, path = sub, [*path, word]
    return cmd, options, path


def _param(cmd: click.Command, opt: str) -> click.Parameter | None:
    for p in cmd.get_params(click.Context(cmd)):
        if opt in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())):
            return p
    return None


def test_the_readme_shows_commands() -> None:
    assert len(readme_commands()) > 40
    cmd, options, path = resolve(["run", "--provider", "x", "--", "y", "--z"])
    assert (cmd.name, options, path) == ("run", ["--provider"], ["tether", "run"])


def test_every_readme_command_and_option_exists() -> None:
    wrong = []
    for argv in readme_commands():
        cmd, options, path = resolve(argv)
        known = {o for p in cmd.get_params(click.Context(cmd))
                 for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
        root = {"--home", "--fleet"}
        for opt in options:
            if opt not in known and opt not in root and not _cluster(opt, known):
                wrong.append(f"{' '.join(path)}: {opt} (in `tether {shlex.join(argv)}`)")
    assert not wrong, "\n".join(wrong)


def _cluster(opt: str, known: set[str]) -> bool:
    """`-it`: each letter a short option."""
    return (not opt.startswith("--") and len(opt) > 2
            and all(f"-{c}" in known for c in opt[1:]))
