"""``corral mcp``: the MCP server over stdio (``claude mcp add corral -- corral mcp``)."""

from __future__ import annotations

import logging
import sys

import click

from corral.cli._common import client

__all__ = ["register"]


@click.command("mcp")
@click.option(
    "--monitor/--no-monitor",
    default=None,
    help="Run the monitor in this process (default: on for sqlite:// and postgresql:// "
    "URLs, off for http://, where the server runs it).",
)
@click.pass_context
def mcp_command(ctx: click.Context, monitor: bool | None) -> None:
    """Serve corral's MCP tools and prompts over stdio for the cluster at --url."""
    try:
        from corral.mcp import build_server
    except ImportError as exc:  # the server extra is missing
        raise click.ClickException(f"{exc}; install corral[server]") from None

    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    c = client(ctx, create=True)
    url = getattr(c, "url", None) or ""
    if monitor is None:
        monitor = not url.startswith(("http://", "https://"))
    watcher = None
    if monitor:
        from corral.monitor import Monitor

        watcher = Monitor(c, alerts=True)  # it alerts while it leads (docs/alerts.md)
        watcher.start_thread()
    try:
        build_server(c).run("stdio")
    finally:
        if watcher is not None:
            watcher.stop()


def register(cli: click.Group) -> None:
    cli.add_command(mcp_command)
