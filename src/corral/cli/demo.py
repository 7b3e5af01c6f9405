"""``corral demo``: the scripted fleet run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

__all__ = ["register"]


@click.command()
@click.option("--keep", is_flag=True, help="Keep the demo's database (path is printed).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON at the end.")
@click.pass_context
def demo(ctx: click.Context, keep: bool, as_json: bool) -> None:
    """Run a short scripted fleet on a fresh SQLite cluster (about ten seconds).

    A manager fills the board and spawns developers up to the cap, one developer
    crashes mid-task and the monitor recovers its lease, the rest finish the work,
    go idle and retire. Uses its own database, never the one --url names.
    """
    from corral.client import connect
    from corral.demo import demo_ok, run_demo

    folder = Path(tempfile.mkdtemp(prefix="corral-demo-"))
    url = f"sqlite:///{folder / 'demo.db'}"
    click.echo(f"corral demo on {url}\n")
    summary = run_demo(lambda: connect(url), click.echo)
    click.echo("")
    click.echo(
        f"{summary['tasks_done']}/{summary['tasks_total']} tasks done, "
        f"{summary['refused_registrations']} registration refused at capacity, "
        f"{summary['lease_recoveries']} lease recovered, "
        f"{summary['retired']} nodes retired, in {summary['seconds']}s"
    )
    if as_json:
        click.echo(json.dumps(summary))
    if keep:
        click.echo(f"database kept at {folder / 'demo.db'}")
    else:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    if not demo_ok(summary):
        raise click.ClickException("the demo did not finish as scripted")


def register(cli: click.Group) -> None:
    cli.add_command(demo)
