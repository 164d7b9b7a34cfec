"""``tether metrics``: the daemon's Prometheus metrics, as ``/metrics`` serves them."""

from __future__ import annotations

import click

from tether.cli.context import client


@click.command()
@click.pass_context
def metrics(ctx: click.Context) -> None:
    """Print the daemon's metrics (Prometheus text format)."""
    click.echo(client(ctx).metrics().text, nl=False)
