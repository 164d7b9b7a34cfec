"""``tether web``: the live dashboard, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

import click

from tether.cli.context import Ctx


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@click.command()
@click.option("--listen", default="127.0.0.1", show_default=True,
              help="address to listen on; anything but loopback exposes the dashboard "
              "(still behind its token) to the network")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
              help="0: any free port (the URL printed says which)")
@click.option("--unix", "unix_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="serve on this Unix socket instead (for a reverse proxy)")
@click.option("--read-only", is_flag=True, help="show everything, change nothing")
@click.pass_obj
def web(obj: Ctx, listen: str, port: int, unix_path: Path | None, read_only: bool) -> None:
    """Serve the dashboard: what needs you, agents with their timelines, execs with
    filters and paging, logs (stdout beside stderr) and a terminal in the browser, live.
    Prints the URL with its token once; the page swaps it for a session key."""
    from tether.web import auth, server
    from tether.web.app import create_app

    obj.client().health()  # starts the daemon if none runs, as every command does
    token = auth.load_or_make(obj.home)
    if unix_path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix_path.unlink(missing_ok=True)
        sock.bind(str(unix_path))
        unix_path.chmod(0o600)
        where = f"unix:{unix_path} (send Authorization: Bearer <{obj.home / auth.TOKEN_FILE}>)"
        loopback = False  # a reverse proxy in front says which Host it serves
    else:
        family = socket.AF_INET6 if ":" in listen else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listen, port))
        except OSError as e:
            raise click.ClickException(f"cannot listen on {listen}:{port}: {e.strerror}; "
                                       "pick another --port (0: any free one)") from None
        host, bound = sock.getsockname()[:2]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        where = f"http://{shown}:{bound}/?token={token}"
        loopback = _loopback(listen)
        if not loopback:
            click.echo(f"tether web: warning: listening on {listen}, reachable from the "
                       "network; anyone with the URL's token can act on this home", err=True)
    app = create_app(obj.home, token, read_only=read_only, loopback_only=loopback)
    sock.listen(128)
    click.echo(f"tether web: {where}" + (" (read-only)" if read_only else ""))
    sys.stdout.flush()
    server.serve(app, sock)
