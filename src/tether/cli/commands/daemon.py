"""Daemon commands: ``tether status``, ``tether daemon`` (the daemon in the foreground) and
``tether daemon stop``."""

from __future__ import annotations

import os
import sys

import click

from tether.cli import output as out
from tether.cli.context import check_fleet, client, die, kv
from tether.client import daemonctl


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
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
    for warning in st.warnings:
        click.echo(f"warning  {warning}")


@click.group(invoke_without_command=True)
@click.option("--pool", type=click.IntRange(0, 64), default=2, show_default=True,
              help="idle monitors kept ready to start execs")
@click.option("--default-runtime", type=click.Choice(["auto", "bwrap", "process"]),
              default=None, help="runtime of the default sandbox (default: "
              "$TETHER_DEFAULT_RUNTIME, else auto: bwrap when it works here)")
@click.option("--recover-store", is_flag=True,
              help="the store is missing, empty or corrupt: move it aside, make a new one "
              "and re-adopt the running execs from their monitors' files")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="log lines as text or JSON lines with exec, sandbox and lineage fields "
              "(default: $TETHER_LOG_FORMAT, else text)")
@click.option("--keep-logs", metavar="AGE", help="remove ended execs' logs after AGE "
              "(default: $TETHER_KEEP_LOGS, else 14d)")
@click.option("--logs-max", metavar="SIZE", help="remove the oldest ended execs' logs while "
              "logs/ is above SIZE (default: $TETHER_LOGS_MAX, else 2G)")
@click.option("--keep-events", metavar="AGE", help="compact journal events older than AGE "
              "(default: $TETHER_KEEP_EVENTS, else 30d)")
@click.option("--fleet", "fleet_url", default=None, metavar="URL",
              help="join the fleet whose PostgreSQL is URL (after `tether fleet init`); "
              "or TETHER_FLEET_URL, or --fleet-url-file: a password here is on the command "
              "line, where every local user can read it")
@click.option("--fleet-url-file", default=None, metavar="FILE",
              help="fleet: read the URL from FILE (yours, mode 600)")
@click.option("--host-name", default=None, help="fleet: this host's name (default: hostname)")
@click.option("--capacity", type=click.IntRange(0, 10000), default=4, show_default=True,
              help="fleet: placements this host runs at once")
@click.option("--label", "labels", multiple=True, help="fleet: KEY=VALUE placement may ask for")
@click.pass_context
def daemon(ctx: click.Context, pool: int, default_runtime: str | None,
           recover_store: bool, log_format: str | None, keep_logs: str | None,
           logs_max: str | None, keep_events: str | None, fleet_url: str | None,
           fleet_url_file: str | None, host_name: str | None, capacity: int,
           labels: tuple[str, ...]) -> None:
    """Run the daemon in the foreground (systemd Type=notify friendly)."""
    if ctx.invoked_subcommand is not None:
        check_fleet(ctx)
        return
    # The daemon's own lean entry point in this very process (same pid for systemd, and
    # its signals and exit codes), so the CLI never imports the daemon.
    argv = [sys.executable, "-m", "tether.daemon", "--home", str(ctx.obj.home),
            "--pool", str(pool)]
    if default_runtime is not None:
        argv += ["--default-runtime", default_runtime]
    if recover_store:
        argv.append("--recover-store")
    if log_format is not None:
        argv += ["--log-format", log_format]
    for flag, value in (("--keep-logs", keep_logs), ("--logs-max", logs_max),
                        ("--keep-events", keep_events)):
        if value is not None:
            argv += [flag, value]
    from tether.fleet import url as fleet

    try:
        own = fleet.resolve(fleet_url, fleet_url_file, {})
    except (ValueError, fleet.SecretFileError) as e:
        raise click.UsageError(str(e)) from None
    if fleet_url and (warning := fleet.warn_argv(fleet_url)):
        out.note(warning)
    fleet_url = own or ctx.obj.fleet
    _check_fleet_options(ctx, fleet_url, host_name, labels)
    # Never on the daemon's command line: in its environment (only its user reads that).
    env = {k: v for k, v in os.environ.items() if k not in (fleet.ENV, fleet.FILE_ENV)}
    if fleet_url:
        env[fleet.ENV] = fleet_url
        argv += ["--capacity", str(capacity)]
        argv += ["--host-name", host_name] if host_name else []
        for label in labels:
            argv += ["--label", label]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def _check_fleet_options(ctx: click.Context, url: str | None, host_name: str | None,
                         labels: tuple[str, ...]) -> None:
    """Fleet options are usage errors to fix before a daemon starts (exit 2): given
    without --fleet they would be ignored, and a bad one would only show in its log."""
    given = [f"--{p.replace('_', '-')}" for p in ("host_name", "capacity", "labels")
             if ctx.get_parameter_source(p) is not click.core.ParameterSource.DEFAULT]
    if not url:
        if given:
            raise click.UsageError(f"{', '.join(given).replace('--labels', '--label')} "
                                   "only apply to a fleet host: add --fleet URL (or "
                                   "TETHER_FLEET_URL, or --fleet-url-file FILE)")
        return
    from tether.fleet import names

    for bad in (names.url_error(url), host_name and names.host_name_error(host_name)):
        if bad:
            raise click.UsageError(bad)
    kv(labels, "label")


@daemon.command("stop")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="seconds to wait for it to let go of the home")
@click.pass_context
def daemon_stop(ctx: click.Context, timeout: float) -> None:
    """Stop the daemon gracefully (SIGTERM). Running execs keep running."""
    try:
        pid = daemonctl.stop(ctx.obj.home, timeout)
    except TimeoutError as e:
        die(str(e), 1)
    click.echo("no daemon is running" if pid is None else f"daemon {pid} stopped")


@daemon.command("install")
@click.option("--user", "scope", flag_value="user", default=True,
              help="a user unit, ~/.config/systemd/user (the default)")
@click.option("--system", "scope", flag_value="system",
              help="a system unit, /etc/systemd/system (run as root)")
@click.option("--name", default="tether", show_default=True, help="the unit's name")
@click.option("--dry-run", is_flag=True, help="print the unit and where it would go")
@click.pass_context
def daemon_install(ctx: click.Context, scope: str, name: str, dry_run: bool) -> None:
    """Write a systemd unit for this home's daemon (Type=notify, KillMode=process)."""
    from tether.cli import unitfile

    path = unitfile.unit_path(scope, name)
    text = unitfile.render(scope, ctx.obj.home)
    if dry_run:
        click.echo(f"# {path}")
        click.echo(text, nl=False)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        die(f"cannot write {path}: {e}", 1,
            hint="use --system as root, or --user" if scope == "system" else None)
    flag = " --user" if scope == "user" else ""
    why = unitfile.systemctl(scope, "daemon-reload")
    click.echo(f"wrote {path}")
    if why is not None:
        click.echo(f"(systemctl{flag} daemon-reload: {why})")
    click.echo(f"start it with: systemctl{flag} enable --now {name}")


@daemon.command("uninstall")
@click.option("--user", "scope", flag_value="user", default=True, help="the user unit")
@click.option("--system", "scope", flag_value="system", help="the system unit")
@click.option("--name", default="tether", show_default=True, help="the unit's name")
@click.pass_context
def daemon_uninstall(ctx: click.Context, scope: str, name: str) -> None:
    """Disable and remove the unit; the daemon stops, its execs keep running."""
    from tether.cli import unitfile

    path = unitfile.unit_path(scope, name)
    if not path.exists():
        die(f"no unit at {path}", 1, hint="tether daemon install writes one")
    unitfile.systemctl(scope, "disable", "--now", f"{name}.service")
    try:
        path.unlink()
    except OSError as e:
        die(f"cannot remove {path}: {e}", 1)
    unitfile.systemctl(scope, "daemon-reload")
    click.echo(f"removed {path}")
