"""Every option of every ``tether`` command says what it does in ``--help``: a newcomer
met ``--json``, ``--sandbox`` and ``--max-revivals`` with no word of explanation."""

from __future__ import annotations

import click

from tether.cli.main import cli


def _silent(cmd: click.Command, path: str, ctx: click.Context) -> list[str]:
    found = [f"{path} {'/'.join(p.opts)}" for p in cmd.params
             if isinstance(p, click.Option) and not p.hidden and not p.help]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            found += _silent(sub, f"{path} {name}", ctx)
    return found


def test_every_option_has_help() -> None:
    assert _silent(cli, "tether", click.Context(cli)) == []
