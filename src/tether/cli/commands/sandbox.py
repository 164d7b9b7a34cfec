"""Sandbox commands: ``tether sandbox create|ls|inspect|stop|start|rm`` and ``tether cp``."""

from __future__ import annotations

import os
from typing import Any

import click

from tether.cli import output as out
from tether.cli.context import client, die, kv, listing
from tether.cli.sandboxflags import create_params, sandbox_flags
from tether.client.errors import TetherError
from tether.model.records import KILL_GRACE


@click.group()
def sandbox() -> None:
    """Create and manage sandboxes."""


@sandbox.command("create")
@sandbox_flags(for_run=False)
@click.option("-e", "--env", "envs", multiple=True, help="KEY=VALUE (or KEY to copy)")
@click.argument("name")
@click.pass_context
def sandbox_create(ctx: click.Context, /, envs: tuple[str, ...], name: str,
                   **flags: Any) -> None:
    """Create a sandbox, from flags or from a spec file (-f spec.yaml --set k=v)."""
    c = client(ctx)
    try:
        sb = c.sandbox_create(**create_params(name, flags, kv(envs, "env")))
    except TetherError as e:
        die(e.message, 2 if e.code in ("INVALID_SPEC", "INVALID_PARAMS") else 1)
    click.echo(sb.id)
    reason = sb.reason or ""
    if "fell back" in reason:
        out.fail(reason)


listing(sandbox, ls_help="List sandboxes.", inspect_help="Show a sandbox as JSON.",
        all_help="include deleted sandboxes",
        fetch=lambda c, all_: c.sandbox_list(all=all_), get=lambda c, ref: c.sandbox_get(ref),
        table=lambda rows: out.sandbox_table(rows))


@sandbox.command("stop")
@click.option("--grace", type=float, default=KILL_GRACE, show_default=True,
              help="seconds from SIGTERM to SIGKILL for its execs")
@click.argument("ref")
@click.pass_context
def sandbox_stop(ctx: click.Context, grace: float, ref: str) -> None:
    """Stop a sandbox (cancels its execs)."""
    click.echo(client(ctx).sandbox_stop(ref, grace=grace).state)


@sandbox.command("start")
@click.argument("ref")
@click.pass_context
def sandbox_start(ctx: click.Context, ref: str) -> None:
    """Start a stopped sandbox again."""
    click.echo(client(ctx).sandbox_start(ref).state)


@sandbox.command("rm")
@click.option("--grace", type=float, default=KILL_GRACE, show_default=True,
              help="seconds from SIGTERM to SIGKILL for its execs")
@click.option("--force", is_flag=True,
              help="docker: record it deleted even if dockerd cannot remove its containers "
                   "now (they are removed when it answers again)")
@click.argument("ref")
@click.pass_context
def sandbox_rm(ctx: click.Context, grace: float, force: bool, ref: str) -> None:
    """Delete a sandbox (cancels its execs; keeps their logs)."""
    click.echo(client(ctx).sandbox_delete(ref, grace=grace, force=force).state)


@click.command("cp")
@click.argument("src")
@click.argument("dst")
@click.pass_context
def cp(ctx: click.Context, src: str, dst: str) -> None:
    """Copy between the host and a sandbox: tether cp SANDBOX:PATH HOSTPATH, or the
    other way round. Into DST if it is a directory, else as DST (like docker cp)."""
    s_sb, s_path = _sandbox_path(src)
    d_sb, d_path = _sandbox_path(dst)
    if (s_sb is None) == (d_sb is None):
        raise click.UsageError("exactly one of SRC and DST must be SANDBOX:PATH")
    c = client(ctx)
    try:
        if d_sb is not None:
            r = c.sandbox_copy(d_sb, "in", os.path.abspath(src), d_path)
        else:
            assert s_sb is not None
            r = c.sandbox_copy(s_sb, "out", s_path, os.path.abspath(dst))
    except TetherError as e:
        # A path that cannot be used is a bad invocation (2); the copy failing, or a
        # source that is not there (as for cp and docker cp), is 1.
        die(e.message, 1 if e.code in ("COPY_FAILED", "SANDBOX_NOT_READY", "SANDBOX_NOT_FOUND",
                                         "DOCKER_UNAVAILABLE", "RUNTIME_UNAVAILABLE",
                                         "PATH_NOT_FOUND") else 2)
    click.echo(f"copied {r.bytes} byte{'' if r.bytes == 1 else 's'}")


def _sandbox_path(arg: str) -> tuple[str | None, str]:
    """``NAME:PATH`` names a path in a sandbox; a host path with a colon can be
    written ``./a:b`` (docker cp's rule)."""
    head, sep, tail = arg.partition(":")
    if not sep or not head or "/" in head or arg.startswith("."):
        return None, arg
    return head, tail

