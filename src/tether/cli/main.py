"""``tether``: run commands under a daemon that can crash without losing them.

The root group (``--home``, ``--version``), the errors every command may raise, and the
command modules' registration; the commands live in ``tether.cli.commands``.

Exit codes: a command's own exit code for ``run``/``wait`` (128+N when killed by
signal N); 1 for a tether error (message on stderr); 2 for a usage error;
125 when the daemon cannot be reached; 126/127 when a command cannot start; 77 when the
home could be written by another user (``hostio/trust.py``; the message says how to
fix it); ``tether daemon``: 75 when another daemon holds the home, 77 for an untrusted
home, 2 for a malformed flag or ``TETHER_*`` setting, 1 for any other startup error.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import click

from tether import __version__
from tether.cli.context import Ctx, check_fleet, die
from tether.client.daemonctl import resolve_home
from tether.client.errors import DaemonUnavailable, HomeUntrusted, TetherError
from tether.model.layout import HOME_UNTRUSTED_EXIT

#: Fleet mode without its extra (``pip install`` of tether without ``[fleet]``): one line
#: that says what to install, instead of a traceback. (tether is not on PyPI: it installs
#: from a clone, README "Install".)
FLEET_EXTRA_MISSING = (
    "fleet mode needs PostgreSQL's driver (psycopg), from tether's `fleet` extra, which "
    "this installation lacks: in your clone of tether run `uv tool install --force "
    "'.[fleet]'` (or `pipx install --force '.[fleet]'`; in a venv, `pip install -e "
    "'.[fleet]'`)")

#: Every command, by name: ``module:attribute`` under ``tether.cli.commands``. A command's
#: module is imported only when that command runs (or ``--help`` lists them all), so
#: ``tether ps`` never pays for ``run``'s sandbox flags or the agent commands.
COMMANDS = {
    "run": "execs:run", "attach": "execs:attach", "ps": "execs:ps", "logs": "execs:logs",
    "wait": "execs:wait", "kill": "execs:kill", "events": "events:events",
    "sandbox": "sandbox:sandbox", "cp": "sandbox:cp", "lineage": "agent:lineage",
    "reap": "agent:reap", "agent": "agent:agent", "status": "daemon:status",
    "daemon": "daemon:daemon", "digest": "digest:digest", "hook": "hook:hook",
    "web": "web:web", "mcp": "mcp:mcp", "metrics": "metrics:metrics",
    "schedule": "schedule:schedule", "scheduler": "schedule:scheduler",
    "rm": "prune:rm", "prune": "prune:prune", "df": "prune:df",
    "fleet": "fleet:fleet", "hosts": "fleet:hosts", "drain": "fleet:drain",
    "undrain": "fleet:undrain", "forget": "fleet:forget",
    "cost": "cost:cost", "budget": "cost:budget",
}


class TetherGroup(click.Group):
    """The root group: commands loaded on first use (click's "lazy group" pattern), and
    the errors every command may raise turned into messages and exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(f"tether.cli.commands.{module}"), attr)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        ctx.meta["tether.args"] = list(args)  # for check_fleet: a plain `CMD [SUB] --help`
        if args and args[0] not in COMMANDS:
            # Not a command: load them all, so click's "Did you mean" sees every name.
            for name in COMMANDS:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DaemonUnavailable as e:
            die(str(e), 125)
        except HomeUntrusted as e:
            die(e.message, HOME_UNTRUSTED_EXIT)
        except TetherError as e:
            die(e.message, 1)
        except ModuleNotFoundError as e:
            if (e.name or "").partition(".")[0] != "psycopg":
                raise
            die(FLEET_EXTRA_MISSING, 1)


@click.group(cls=TetherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="tether home (default: $TETHER_HOME or ~/.local/state/tether)")
@click.option("--fleet", default=None, metavar="URL", envvar="TETHER_FLEET_URL",
              show_envvar=True,
              help="the fleet's PostgreSQL (postgresql://USER@HOST/DB): run, ps, logs, wait, "
              "kill, attach, events, rm and lineage ls|inspect|resolve act on every host's "
              "placements; other commands refuse it. Keep its password out of command lines: "
              "use the variable, --fleet-url-file or ~/.pgpass")
@click.option("--fleet-url-file", default=None, metavar="FILE",
              envvar="TETHER_FLEET_URL_FILE", show_envvar=True,
              help="read the fleet's URL from FILE (yours, mode 600) instead of --fleet")
@click.version_option(__version__, prog_name="tether")
@click.pass_context
def cli(ctx: click.Context, home: Path | None, fleet: str | None,
        fleet_url_file: str | None) -> None:
    """tether — a durable supervisor for AI coding agents and long-running commands."""
    if fleet or fleet_url_file:  # (the fleet package only with a fleet)
        from tether.cli import output as out
        from tether.fleet import url as fleet_url

        on_argv = ctx.get_parameter_source("fleet") is click.core.ParameterSource.COMMANDLINE
        try:
            fleet = fleet_url.resolve(fleet, fleet_url_file, {})
        except (ValueError, fleet_url.SecretFileError) as e:
            raise click.UsageError(str(e)) from None
        if on_argv and (warning := fleet_url.warn_argv(fleet)):
            out.note(warning)
    ctx.obj = Ctx(resolve_home(home), fleet)
    check_fleet(ctx)


def main() -> None:
    cli(prog_name="tether")


if __name__ == "__main__":
    main()
