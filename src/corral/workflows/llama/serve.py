"""``corral workflows serve MODULE:ATTR``: load a Workflow instance and host it."""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
from collections.abc import Mapping

from workflows import Workflow

from corral.errors import InvalidInputError
from corral.types import Client
from corral.workflows.llama.host import LlamaHost, Served

__all__ = ["load_workflow", "serve"]


def load_workflow(target: str) -> Workflow:
    """The ``Workflow`` instance named by ``module:attr`` (the current directory is
    importable); ``InvalidInputError`` naming ``MODULE:ATTR`` otherwise."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInputError(f"expected MODULE:ATTR, got {target!r}", field="MODULE:ATTR")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(
            f"cannot import {module_name}: {exc}", field="MODULE:ATTR"
        ) from None
    found = getattr(module, attr, None)
    if not isinstance(found, Workflow):
        raise InvalidInputError(
            f"{target} is not a Workflow instance ({type(found).__name__})", field="MODULE:ATTR"
        )
    return found


def serve(
    client: Client,
    workflows: Mapping[str, tuple[Workflow, float | None]],
    *,
    host: str | None = None,
    poll_interval: float = 0.05,
) -> None:
    """Host ``workflows`` (name -> (workflow, its release delay)) until SIGINT or
    SIGTERM; idle runs are released on the way out."""
    served = {name: Served(w, after) for name, (w, after) in workflows.items()}

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await LlamaHost(client, served, host=host, poll_interval=poll_interval).run(stop)

    asyncio.run(main())
