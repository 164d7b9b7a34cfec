"""What the root group hands every command module: the home and its ``Client`` (made on
first use, so ``--help`` and usage errors never connect), and the CLI's way to fail."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from tether.cli import output as out

if TYPE_CHECKING:
    from tether.client.blocking import Client


class Ctx:
    def __init__(self, home: Path) -> None:
        self.home = home
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
