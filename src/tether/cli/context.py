"""What the root group hands every command module: the home and its ``Client`` (made on
first use, so ``--help`` and usage errors never connect), and the CLI's way to fail."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from tether.cli import output as out

if TYPE_CHECKING:
    from tether.client.blocking import Client


class Ctx:
    def __init__(self, home: Path, fleet: str | None = None) -> None:
        self.home = home
        self.fleet = fleet  # --fleet URL: the fleet's PostgreSQL
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            from tether.client.blocking import Client

            self._client = Client(self.home)
        return self._client


#: What ``--fleet URL`` reaches: these commands act on the fleet (every host's placements)
#: — a group, only the subcommands listed (``daemon`` alone: this host joins the fleet).
#: Every other command would act on this machine's daemon, so it refuses ``--fleet``
#: (exit 2) instead of ignoring it.
FLEET_COMMANDS: dict[str, frozenset[str] | None] = {
    "run": None, "ps": None, "logs": None, "wait": None, "kill": None, "attach": None,
    "events": None, "rm": None, "hosts": None, "drain": None, "undrain": None,
    "forget": None, "fleet": None, "lineage": frozenset({"ls", "inspect", "resolve"}),
    "daemon": frozenset()}


def check_fleet(ctx: click.Context) -> None:
    """In a group's callback: refuse ``--fleet`` for a subcommand that does not act on a
    fleet (``--help`` still shows its help)."""
    obj: Ctx | None = ctx.find_object(Ctx)
    sub = ctx.invoked_subcommand
    if obj is None or not obj.fleet or sub is None:
        return
    words = ctx.find_root().meta.get("tether.args") or []
    if len(words) <= 3 and words[-1:] in (["-h"], ["--help"]) and not any(
            w.startswith("-") for w in words[:-1]):
        return  # `tether --fleet URL sandbox [ls] --help`: its help, which acts on nothing
    group = ctx.command_path.split(" ", 1)[1] if " " in ctx.command_path else None
    allowed = FLEET_COMMANDS.get(group) if group else None
    if group is None and sub in FLEET_COMMANDS:
        return
    if group is not None and allowed is not None and sub in allowed:
        return
    fleet_ok = ", ".join(k if v is None else f"{k} {'|'.join(sorted(v))}" if v else k
                         for k, v in FLEET_COMMANDS.items())
    die(f"--fleet: `{ctx.command_path} {sub}` acts on this machine's daemon only, not on "
        "a fleet", 2, hint=f"leave out --fleet to run it here (or run it on the host "
        f"itself); with --fleet: {fleet_ok}")


def client(ctx: click.Context) -> Client:
    obj: Ctx = ctx.obj
    return obj.client()


def die(message: str, code: int = 1, hint: str | None = None) -> NoReturn:
    out.fail(message, hint)
    sys.exit(code)


def kv(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    """``KEY=VALUE`` options; for ``env``, a bare ``KEY`` copies this shell's value."""
    result: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            if what == "env" and p in os.environ:
                result[p] = os.environ[p]
                continue
            raise click.BadParameter(f"{p!r} is not KEY=VALUE", param_hint=what)
        k, v = p.split("=", 1)
        result[k] = v
    return result


def listing(group: click.Group, *, ls_help: str, inspect_help: str, all_help: str,
            fetch: Callable[[Client, bool], Sequence[Any]], get: Callable[[Client, str], Any],
            table: Callable[[Any], None]) -> None:
    """``ls [-a] [--json]`` and ``inspect REF`` for one kind of record: the same two
    commands for sandboxes and lineages, written once."""

    @group.command("ls", help=ls_help)
    @click.option("-a", "--all", "all_", is_flag=True, help=all_help)
    @click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
    @click.pass_context
    def ls(ctx: click.Context, all_: bool, as_json: bool) -> None:
        rows = fetch(client(ctx), all_)
        if as_json:
            out.emit_json(rows)
        else:
            table(rows)

    @group.command("inspect", help=inspect_help)
    @click.argument("ref")
    @click.pass_context
    def inspect(ctx: click.Context, ref: str) -> None:
        out.emit_json(get(client(ctx), ref))
