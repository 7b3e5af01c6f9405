"""The ``corral`` command.

Each module in this package that defines ``register(group)`` adds its commands, so a
new part of corral adds a file here and edits nothing else. Helpers shared by the
commands live in ``corral.cli._common``.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys

import click

import corral
from corral.cli._common import CONTEXT_SETTINGS, run_main
from corral.cli._operations import OperationsGroup

__all__ = ["cli", "main"]


@click.group(cls=OperationsGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--url",
    envvar="CORRAL_URL",
    default=None,
    metavar="URL",
    help="Cluster URL: sqlite:///PATH, postgresql://… or http://HOST:PORT "
    "(env CORRAL_URL; default sqlite:///.corral/corral.db).",
)
@click.version_option(version=corral.__version__, package_name="corral")  # the one place
@click.pass_context
def cli(ctx: click.Context, url: str | None) -> None:
    """corral keeps a fleet of agents alive, busy and bounded."""
    ctx.ensure_object(dict)
    ctx.obj["url"] = url
    if ctx.invoked_subcommand not in _LONG_RUNNING:
        # A one-shot command reports an unreachable database in its one error line;
        # the pool's own warnings about each failed attempt would come first.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


# Commands that run until stopped: their logs are the operator's view of retries.
_LONG_RUNNING = frozenset({"serve", "monitor", "worker", "mcp", "up"})


def _load_commands() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(cli)


_load_commands()


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_main(cli, argv))
