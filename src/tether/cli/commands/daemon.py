"""Daemon commands: ``tether status``, ``tether daemon`` (the daemon in the foreground) and
``tether daemon stop``."""

from __future__ import annotations

import os
import sys

import click

from tether.cli import output as out
from tether.cli.context import client, die
from tether.client import daemonctl


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the daemon's status."""
    st = client(ctx).status()
    if as_json:
        out.emit_json(st)
        return
    counts = st.counts
    execs = ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.execs.items())) or "none"
    click.echo(f"daemon   pid {st.pid}, {st.state}, up {st.uptime:.0f}s, "
               f"version {st.version}")
    click.echo(f"home     {st.home}")
    for name, rt in st.runtimes.items():
        ok = rt.available
        detail = rt.version or ""
        if not ok and rt.reason:
            detail = rt.reason
        mark = {True: "available", False: "unavailable", None: "not probed"}[ok]
        click.echo(f"{name:<8} {mark}" + (f" ({detail})" if detail else ""))
    click.echo(f"execs    {execs} (watched {counts.watched})")
    click.echo(f"sandboxes {counts.sandboxes}, clients {counts.connections}")


@click.group(invoke_without_command=True)
@click.option("--pool", type=click.IntRange(0, 64), default=2, show_default=True,
              help="idle monitors kept ready to start execs")
@click.option("--default-runtime", type=click.Choice(["auto", "bwrap", "process"]),
              default=None, help="runtime of the default sandbox (default: "
              "$TETHER_DEFAULT_RUNTIME, else auto: bwrap when it works here)")
@click.option("--recover-store", is_flag=True,
              help="the store is missing, empty or corrupt: move it aside, make a new one "
              "and re-adopt the running execs from their monitors' files")
@click.option("--fleet", "fleet_url", default=None, metavar="URL",
              help="join the fleet whose PostgreSQL is URL (after `tether fleet init URL`)")
@click.option("--host-name", default=None, help="fleet: this host's name (default: hostname)")
@click.option("--capacity", type=click.IntRange(0, 10000), default=4, show_default=True,
              help="fleet: placements this host runs at once")
@click.option("--label", "labels", multiple=True, help="fleet: KEY=VALUE placement may ask for")
@click.pass_context
def daemon(ctx: click.Context, pool: int, default_runtime: str | None,
           recover_store: bool, fleet_url: str | None, host_name: str | None, capacity: int,
           labels: tuple[str, ...]) -> None:
    """Run the daemon in the foreground (systemd Type=notify friendly)."""
    if ctx.invoked_subcommand is not None:
        return
    # The daemon's own lean entry point in this very process (same pid for systemd, and
    # its signals and exit codes), so the CLI never imports the daemon.
    argv = [sys.executable, "-m", "tether.daemon", "--home", str(ctx.obj.home),
            "--pool", str(pool)]
    if default_runtime is not None:
        argv += ["--default-runtime", default_runtime]
    if recover_store:
        argv.append("--recover-store")
    fleet_url = fleet_url or ctx.obj.fleet
    if fleet_url:
        argv += ["--fleet", fleet_url, "--capacity", str(capacity)]
        argv += ["--host-name", host_name] if host_name else []
        for label in labels:
            argv += ["--label", label]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


@daemon.command("stop")
@click.option("--timeout", type=float, default=30.0, show_default=True)
@click.pass_context
def daemon_stop(ctx: click.Context, timeout: float) -> None:
    """Stop the daemon gracefully (SIGTERM). Running execs keep running."""
    try:
        pid = daemonctl.stop(ctx.obj.home, timeout)
    except TimeoutError as e:
        die(str(e), 1)
    click.echo("no daemon is running" if pid is None else f"daemon {pid} stopped")
