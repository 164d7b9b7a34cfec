"""``tether``: run commands under a daemon that can crash without losing them.

The root group (``--home``, ``--version``), the errors every command may raise, and the
command modules' registration; the commands live in ``tether.cli.commands``.

Exit codes: a command's own exit code for ``run``/``wait`` (128+N when killed by
signal N); 1 for a tether error (message on stderr); 2 for a usage error;
125 when the daemon cannot be reached; 126/127 when a command cannot start; 77 when the
home could be written by another user (``hostio/trust.py``; the message says how to
fix it); ``tether daemon``: 75 when another daemon holds the home, 77 for an untrusted
home, 1 for any other startup error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tether import __version__
from tether.cli.commands import agent, daemon, events, execs, sandbox
from tether.cli.context import Ctx, die
from tether.client.daemonctl import resolve_home
from tether.client.errors import DaemonUnavailable, HomeUntrusted, TetherError
from tether.model.layout import HOME_UNTRUSTED_EXIT


class TetherGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DaemonUnavailable as e:
            die(str(e), 125)
        except HomeUntrusted as e:
            die(e.message, HOME_UNTRUSTED_EXIT)
        except TetherError as e:
            die(e.message, 1)


@click.group(cls=TetherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="tether home (default: $TETHER_HOME or ~/.local/state/tether)")
@click.version_option(__version__, prog_name="tether")
@click.pass_context
def cli(ctx: click.Context, home: Path | None) -> None:
    """tether — a durable supervisor for AI coding agents and long-running commands."""
    ctx.obj = Ctx(resolve_home(home))


for command in (execs.run, execs.attach, execs.ps, execs.logs, execs.wait, execs.kill,
                events.events, sandbox.sandbox, sandbox.cp, agent.lineage, agent.reap,
                agent.agent, daemon.status, daemon.daemon):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="tether")


if __name__ == "__main__":
    main()
