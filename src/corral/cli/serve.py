"""``corral serve``: the HTTP API, events, metrics and MCP over one cluster."""

from __future__ import annotations

import errno
import logging
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import Any

import click

from corral.cli._common import client
from corral.cli.workers import run_workers
from corral.errors import CorralError

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
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes sharing the port (each with its own store connection; one "
    "monitor leads among them). See docs/server.md for when to raise it.",
)
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
    workers: int,
    log_level: str,
    access_log: bool,
) -> None:
    """Serve the cluster over HTTP: /v1 JSON API, /v1/events (SSE), /metrics, /mcp."""
    try:
        import uvicorn  # noqa: F401  # installed? (the server runs it in _serve_one)

        from corral.cluster import Cluster
    except ImportError as exc:
        raise click.ClickException(
            f"the server is not installed ({exc}); pip install 'corral[server]'"
        ) from None
    if token_file is not None and not token_file.is_file():
        raise click.BadParameter(f"{token_file} does not exist", param_hint="--token-file")
    # A token file named is read before the port is bound (reading changes nothing), so
    # a bad one is reported as such whatever else holds the port; the default file may
    # be created, so it waits for the port: a taken port changes nothing, not even files.
    token = None if token_file is None else _read_token(token_file)
    sock = _listen(host, port)
    if token is None:
        try:
            token = _read_token(None)
        except click.ClickException:
            sock.close()
            raise
    cluster = client(ctx, create=True)
    if not isinstance(cluster, Cluster):
        raise click.UsageError("corral serve needs a sqlite:// or postgresql:// --url")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    bound = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    options = {
        "token": token,
        "metrics_auth": metrics_auth,
        "monitor": not no_monitor,
        "host": host,
        "log_level": log_level,
        "access_log": access_log,
    }
    if workers == 1:
        click.echo(f"corral serving {cluster.url} on http://{where}:{bound}", err=True)
        _serve_one(cluster, sock, options, signalled=True)
        return
    # Several workers: each forked process opens its own connection (never one shared
    # across fork); this one only migrated the store, and watches them.
    url = str(cluster.url)
    cluster.close()
    if ":memory:" in url:
        raise click.BadParameter(
            "several workers need a database they can share (not :memory:)",
            param_hint="--workers",
        )
    click.echo(f"corral serving {url} on http://{where}:{bound} ({workers} workers)", err=True)
    stopped_by = run_workers(workers, lambda: _worker(url, sock, options))
    sock.close()
    if stopped_by is not None:
        signal.signal(stopped_by, signal.SIG_DFL)
        signal.raise_signal(stopped_by)
    raise _Unavailable("no worker could start; see the log above")


def _worker(url: str, sock: socket.socket, options: dict[str, Any]) -> int:
    """One worker of ``--workers``: its own client, app and uvicorn; its exit status."""
    from corral.client import connect

    try:
        cluster = connect(url)
    except CorralError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    try:
        _serve_one(cluster, sock, options, signalled=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    finally:
        cluster.close()
    return 0


def _serve_one(
    cluster: Any, sock: socket.socket, options: dict[str, Any], *, signalled: bool
) -> None:
    """Serve ``cluster`` on ``sock`` until stopped. ``signalled``: a process stopped by
    SIGINT/SIGTERM dies by it (a worker leaves that to its parent)."""
    import uvicorn

    from corral.server import create_app

    app = create_app(
        cluster,
        token=options["token"],
        metrics_auth=options["metrics_auth"],
        monitor=options["monitor"],
        host=options["host"],
    )
    config = uvicorn.Config(
        app,
        log_level=options["log_level"].lower(),
        access_log=options["access_log"],
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    stopped_by = _run_until_stopped(server, sock)
    if stopped_by is not None:
        # Die by the signal, as a process stopped by it should (exit status -SIGTERM),
        # without joining the threads of claims still waiting: the process's own
        # files go first, since ``atexit`` handlers do not run then.
        cluster.store.close_listeners()
        if signalled:
            signal.signal(stopped_by, signal.SIG_DFL)
            signal.raise_signal(stopped_by)
        return
    if not server.started:
        raise _Unavailable("the server did not start; see the log above")


def _read_token(token_file: Path | None) -> str:
    """The operator token (``load_token``); a click error naming what is wrong."""
    from corral.server.auth import load_token

    try:
        return load_token(token_file)
    except (OSError, ValueError) as exc:
        if token_file is not None:
            raise click.BadParameter(str(exc), param_hint="--token-file") from None
        raise click.ClickException(f"cannot read the token: {exc}") from None


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
