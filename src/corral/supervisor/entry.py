"""The ``corral supervise`` process.

:func:`serve` runs a manifest's supervisor with its control socket until it stops;
the CLI command calls it. Run as the ``corral`` program, the command first
re-executes itself (``execv``: same pid, same process group and session, same
standard streams and environment) as :func:`main` in an interpreter started by
:func:`corral.supervisor.boot.argv`, which loads only what supervision needs: not
the package ``corral``'s ``__init__`` (the client, the cluster, the store), not the
rest of the CLI, not ``click``. The supervisor is a process that stays up; those
megabytes are not carried for its lifetime. With ``--url`` (the supervisor talks to
the cluster, so loads the client anyway) it runs in the CLI's process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError, InvalidInputError

if TYPE_CHECKING:
    from corral.supervisor.manifest import Manifest

__all__ = ["load", "main", "serve"]


def load(manifest: str) -> Manifest:
    """The manifest at ``manifest``; a bad one is an ``InvalidInputError`` whose one
    line names the file, the agent and the field."""
    from corral.supervisor.manifest import ManifestError, load_manifest

    try:
        return load_manifest(manifest)
    except ManifestError as exc:
        raise InvalidInputError(exc.message) from None


def serve(spec: Manifest, state_dir: Path, client: Any = None, output: str = "text") -> None:
    """Run the supervisor of ``spec`` over ``state_dir``, answering ``corral ctl`` on
    ``STATE_DIR/control.sock``, until it shuts down (SIGTERM, SIGINT, ``ctl
    shutdown``). ``output``: a timestamped line on stderr per state change
    (``text``), warnings only (``quiet``) or JSON objects (``json``)."""
    from corral import daemonlog

    daemonlog.configure("corral-supervise", quiet=output == "quiet", as_json=output == "json")
    try:
        from corral.supervisor.supervisor import Supervisor
    except ModuleNotFoundError as exc:
        if exc.name != "corral.supervisor.supervisor":
            raise
        raise CorralError(
            "this corral has no supervisor runtime (corral.supervisor.supervisor is missing)"
        ) from None
    sup = Supervisor(spec, state_dir=state_dir, client=client)
    asyncio.run(_serve(sup, state_dir))


async def _serve(sup: Any, state_dir: Path) -> None:
    """Run ``sup`` with the control socket open for as long as it runs, each state
    change echoed as a log line the moment it is recorded (no polling: an idle
    supervisor does not wake up)."""
    from corral.supervisor.commands import dispatcher
    from corral.supervisor.control import ControlServer

    sup.listeners.append(_echo)
    server = ControlServer(state_dir / "control.sock", dispatcher(sup))
    await server.start()
    try:
        await sup.run()
    finally:
        await server.close()  # answers a shutdown in flight before the socket goes


def _echo(rec: dict[str, Any]) -> None:
    """One ``state.log`` record as a ``corral.supervisor.state`` log line."""
    import logging

    from corral.daemonlog import event, state_line

    log = logging.getLogger("corral.supervisor.state")
    level, text = state_line(rec)
    if not log.isEnabledFor(level):
        return
    record = log.makeRecord(
        log.name, level, "state.log", 0, "%s", (text,), None, extra=event("state", **rec)
    )
    if isinstance(rec.get("ts"), int | float):
        record.created = float(rec["ts"])
    log.handle(record)


def main(argv: list[str]) -> int:
    """``[MANIFEST, STATE_DIR, OUTPUT]``: :func:`serve`, with the errors reported as
    the ``corral`` command reports them (one ``error:`` line, the error's exit code)."""
    manifest, state_dir, *output = argv
    try:
        serve(load(manifest), Path(state_dir), output=output[0] if output else "text")
    except CorralError as exc:
        message = exc.message.removeprefix("ERROR: ")
        where = f"{exc.field}: " if exc.field and exc.exit_code == 2 else ""
        print(f"error: {where}{message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 0
