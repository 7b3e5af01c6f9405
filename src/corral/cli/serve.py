"""``corral serve``: the HTTP API, events, metrics and MCP over one cluster."""

from __future__ import annotations

import errno
import logging
import signal
import socket
from pathlib import Path
from types import FrameType

import click

from corral.cli._common import client

__all__ = ["register"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=7070,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to bind (0: any free port, printed at start).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File holding the operator token (default: $CORRAL_TOKEN, else .corral/token, "
    "created mode 0600 if missing).",
)
@click.option(
    "--metrics-auth/--no-metrics-auth",
    default=True,
    show_default=True,
    help="Require the bearer token on /metrics.",
)
@click.option("--no-monitor", is_flag=True, help="Do not run the monitor in this process.")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug", "trace"], False),
    default="info",
    show_default=True,
    help="uvicorn's log level.",
)
@click.option(
    "--access-log/--no-access-log",
    default=False,
    show_default=True,
    help="Log each request (uvicorn's access log; off by default, for speed).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    token_file: Path | None,
    metrics_auth: bool,
    no_monitor: bool,
    log_level: str,
    access_log: bool,
) -> None:
    """Serve the cluster over HTTP: /v1 JSON API, /v1/events (SSE), /metrics, /mcp."""
    try:
        import uvicorn

        from corral.cluster import Cluster
        from corral.server.app import create_app
        from corral.server.auth import load_token
    except ImportError as exc:
        raise click.ClickException(
            f"the server is not installed ({exc}); pip install 'corral[server]'"
        ) from None
    if token_file is not None and not token_file.is_file():
        raise click.BadParameter(f"{token_file} does not exist", param_hint="--token-file")
    sock = _listen(host, port)  # first: a taken port changes nothing, not even files
    try:
        token = load_token(token_file)
    except (OSError, ValueError) as exc:
        if token_file is not None:
            raise click.BadParameter(str(exc), param_hint="--token-file") from None
        raise click.ClickException(f"cannot read the token: {exc}") from None
    cluster = client(ctx, create=True)
    if not isinstance(cluster, Cluster):
        raise click.UsageError("corral serve needs a sqlite:// or postgresql:// --url")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = create_app(
        cluster, token=token, metrics_auth=metrics_auth, monitor=not no_monitor, host=host
    )
    bound = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    click.echo(f"corral serving {cluster.url} on http://{where}:{bound}", err=True)
    config = uvicorn.Config(
        app, log_level=log_level.lower(), access_log=access_log, timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    stopped_by = _run_until_stopped(server, sock)
    if stopped_by is not None:
        # Die by the signal, as a process stopped by it should (exit status -SIGTERM),
        # without joining the threads of claims still waiting: the process's own
        # files go first, since ``atexit`` handlers do not run then.
        cluster.store.close_listeners()
        signal.signal(stopped_by, signal.SIG_DFL)
        signal.raise_signal(stopped_by)
    if not server.started:
        raise _Unavailable("the server did not start; see the log above")


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _run_until_stopped(server: object, sock: socket.socket) -> int | None:
    """Run uvicorn; the signal that stopped it, or None. uvicorn shuts down
    gracefully on SIGINT/SIGTERM, then re-raises the signal to the handler that was
    there before it: this one, which notes it (and stops the server, for a signal
    that comes before uvicorn's handlers are in place)."""
    caught: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        server.should_exit = True  # type: ignore[attr-defined]  # (before uvicorn's own)

    previous = {sig: signal.signal(sig, note) for sig in _STOP_SIGNALS}
    try:
        server.run(sockets=[sock])  # type: ignore[attr-defined]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return caught[-1] if caught else None


class _Unavailable(click.ClickException):
    exit_code = 3


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts: a taken port or an address
    this machine does not have fails at once with one line, the monitor never run."""
    if not host.strip():
        raise click.BadParameter(
            "must name an address (0.0.0.0 to listen on every interface)", param_hint="--host"
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.BadParameter(
            f"cannot resolve {host!r}: {exc.strerror}", param_hint="--host"
        ) from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            raise click.BadParameter(
                f"{host} is not an address of this machine", param_hint="--host"
            ) from None
        hint = " (is another corral serve running?)" if exc.errno == errno.EADDRINUSE else ""
        raise _Unavailable(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
    return sock


def register(cli: click.Group) -> None:
    cli.add_command(serve)
