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
