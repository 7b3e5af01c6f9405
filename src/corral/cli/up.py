"""``corral up [MANIFEST]``: the coordinator, its HTTP server, the monitor and the
supervisor with its pools, in one command (see ``corral.fleet.up``)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import click

from corral.cli._common import CONTEXT_SETTINGS
from corral.errors import InvalidInputError

__all__ = ["register"]


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("manifest", default="corral.toml", metavar="[MANIFEST]")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=7070,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to bind (0: any free port).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def up(ctx: click.Context, manifest: str, host: str, port: int, as_json: bool) -> None:
    """Run a whole fleet: MANIFEST's agents and pools (default corral.toml), the
    cluster they work for, its HTTP server (API, /mcp, /metrics) and the monitor.

    Prints what it started and where, then one line per fleet event (spawned,
    ready, claimed, finished, retired, restarted, scaled); --json for machines.
    Ctrl-C or SIGTERM stops everything in reverse order, leases handed back.
    State lives in .corral/ of the current directory: a second corral up there
    fails at once, and `corral ctl` there reaches this one's supervisor.
    """
    from corral.fleet.manifest import check_commands, load_fleet
    from corral.supervisor.manifest import ManifestError

    try:
        fleet = load_fleet(manifest)
        check_commands(fleet)  # a member that could never start: refused before anything
    except ManifestError as exc:
        raise InvalidInputError(exc.message) from None
    from corral.fleet.up import Lock

    directory = Path.cwd()
    root = ctx.find_root()
    url = fleet.cluster_url or (root.obj or {}).get("url")
    if url is not None and url.startswith(("http://", "https://")):
        if root.get_parameter_source("url") is click.core.ParameterSource.COMMANDLINE:
            raise click.BadParameter(
                "corral up serves its own cluster: give a sqlite:// or postgresql:// url",
                param_hint="'--url'",
            )
        url = None  # $CORRAL_URL names another cluster's server (inside an agent, say)
    if url is None:
        url = f"sqlite:///{directory / '.corral' / 'corral.db'}"
    lock = Lock(directory)
    lock.acquire()  # first: a second corral up changes nothing
    try:
        _run(fleet, url, directory, host, port, as_json)
    finally:
        lock.release()


def _run(fleet: Any, url: str, directory: Path, host: str, port: int, as_json: bool) -> None:
    try:
        from corral.server import create_app, load_token
        from corral.server.auth import default_token_path
    except ImportError as exc:
        raise click.ClickException(f"the server is not installed ({exc})") from None
    from corral.cli.serve import _listen
    from corral.client import connect
    from corral.fleet.manifest import check_roles
    from corral.fleet.up import STATE_DIR, ServerThread, apply_settings, seed_board

    sock = _listen(host, port)
    # A stop signal from here on is kept and acted on once the supervisor runs.
    caught: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda n, _f: caught.append(n))
    token = load_token(None)
    cluster: Any = connect(url)
    try:
        apply_settings(cluster, fleet)
        check_roles(fleet, cluster.settings().roles)  # before any member could be refused
        seeded = seed_board(cluster, fleet)
        app = create_app(cluster, token=token, monitor=True, host=host)
        server = ServerThread(app, sock)
        server.start()
        where = f"[{host}]" if ":" in host else host
        http = f"http://{where}:{sock.getsockname()[1]}"
        _banner(fleet, url, http, default_token_path(), directory / STATE_DIR, seeded, as_json)
        try:
            asyncio.run(
                _supervise(fleet, cluster, http, token, directory / STATE_DIR, as_json, caught)
            )
        finally:
            server.stop()
    finally:
        cluster.close()
    if not as_json:
        click.echo("corral up: stopped", err=True)


def _banner(
    fleet: Any, url: str, http: str, token_file: Path, state: Path, seeded: int, as_json: bool
) -> None:
    import json

    info = {
        "event": "up",
        "manifest": fleet.path,
        "cluster": url,
        "http": http,
        "mcp": f"{http}/mcp",
        "metrics": f"{http}/metrics",
        "token_file": str(token_file),
        "state_dir": str(state),
        "agents": list(fleet.supervisor.ids),
        "pools": {
            p.id: {
                "role": p.role,
                "scale": p.limits.scale,
                "min": p.limits.min,
                "max": p.limits.max,
            }
            for p in fleet.pools
        },
        "seeded": seeded,
    }
    if as_json:
        click.echo(json.dumps(info))
        return
    lines = [
        f"corral up {fleet.path}",
        f"  cluster  {url}",
        f"  http     {http}  (API /v1, MCP /mcp, /metrics)",
        f"  token    {token_file}",
        f"  state    {state}  (corral ctl status)",
    ]
    if fleet.supervisor.ids:
        lines.append(f"  agents   {', '.join(fleet.supervisor.ids)}")
    for p in fleet.pools:
        lim = p.limits
        lines.append(f"  pool     {p.id}: {p.role}, {lim.scale}, {lim.min}..{lim.max} members")
    if seeded:
        lines.append(f"  board    {seeded} tasks from {fleet.seed}")
    lines.append("Ctrl-C stops the fleet.")
    click.echo("\n".join(lines))


async def _supervise(
    fleet: Any, cluster: Any, http: str, token: str, state: Path, as_json: bool, caught: list[int]
) -> None:
    from corral.fleet.pools import FleetSupervisor
    from corral.fleet.up import EventPrinter
    from corral.supervisor.commands import dispatcher
    from corral.supervisor.control import ControlServer

    sup = FleetSupervisor(fleet, state_dir=state, client=cluster, url=http, token=token)
    printer = EventPrinter(cluster, lambda s: click.echo(s), as_json=as_json)
    stop = asyncio.Event()
    control = ControlServer(state / "control.sock", dispatcher(sup))
    await control.start()
    printing = asyncio.ensure_future(printer.run(stop))
    running = asyncio.ensure_future(sup.run())
    await asyncio.sleep(0)  # run() has put its own signal handlers in place
    if caught:
        await sup.shutdown()
    try:
        await running
    finally:
        stop.set()
        await printing
        await control.close()
        sys.stdout.flush()


def register(group: click.Group) -> None:
    group.add_command(up)
