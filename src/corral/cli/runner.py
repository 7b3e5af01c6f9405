"""``corral runner``: any program as a runner of the activation scheduler.

    corral runner --id runner-1 --mode hybrid -- ./activate.sh

runs the command once per assignment, with the assignment as JSON on stdin and in
``$CORRAL_ASSIGNMENT`` (plus ``$CORRAL_AGENT_ID``, ``$CORRAL_ACTIVATION_KIND`` and
``$CORRAL_RUNNER_ID``). The last line of its stdout, when it is a JSON object, is the
activation's outcome (``{"posts": 1}``); a non-zero exit is recorded in it
(``exit_code``, the stderr tail). The mode is ``--mode`` or ``$CORRAL_RUNNER_MODE``
(default hybrid). The runner heartbeats, goes idle and retires like any worker
(``--no-retire`` keeps it, for a pool); SIGTERM lets the current activation finish.

It prints a timestamped line on stderr per activation begun and released (``-q``:
warnings only; ``--json``: JSON objects), and the command's output is kept: each line
it wrote (stderr, and stdout but its outcome line) is logged under the activation.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
from typing import Any

import click

from corral.cli._common import Seconds
from corral.cli.worker import _check_command, _node_id, outage_option

__all__ = ["command_outcome", "register"]

_TAIL = 2000
_OUTPUT_LINES = 200  # the most lines of a command's output logged per stream
log = logging.getLogger("corral.runner")


def _log_output(a: Any, stream: str, lines: list[str]) -> None:
    """The command's output for activation ``a``, one log line per line (the last
    :data:`_OUTPUT_LINES`)."""
    from corral.daemonlog import event

    if len(lines) > _OUTPUT_LINES:
        log.info(
            "activation %s %s: (%d earlier lines not shown)",
            a.id,
            stream,
            len(lines) - _OUTPUT_LINES,
        )
    for line in lines[-_OUTPUT_LINES:]:
        log.info(
            "activation %s %s: %s",
            a.id,
            stream,
            line,
            extra=event("activation_output", assignment=a.id, stream=stream),
        )


def command_outcome(command: tuple[str, ...], runner_id: str, timeout: float | None = None) -> Any:
    """A handler running ``command`` once per assignment; its outcome is the last
    JSON object line of its stdout."""

    def handle(a: Any) -> dict[str, Any]:
        doc = json.dumps(a.to_dict(), ensure_ascii=False)
        env = {
            **os.environ,
            "CORRAL_ASSIGNMENT": doc,
            "CORRAL_AGENT_ID": a.agent_id,
            "CORRAL_ACTIVATION_KIND": a.kind,
            "CORRAL_RUNNER_ID": runner_id,
        }
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return {"error": f"cannot run {command[0]}: {exc}"}
        from corral.worker.child import stop_child

        try:
            out, err = proc.communicate(doc.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_child(proc)
            return {"error": f"{command[0]} timed out after {timeout}s"}
        except BaseException:
            stop_child(proc)
            raise
        outcome: dict[str, Any] = {}
        lines = out.decode("utf-8", "replace").strip().splitlines()
        if lines:
            try:
                last = json.loads(lines[-1])
                if isinstance(last, dict):
                    outcome = last
                    lines = lines[:-1]
            except ValueError:
                pass
        _log_output(a, "stdout", lines)
        _log_output(a, "stderr", err.decode("utf-8", "replace").rstrip().splitlines())
        if proc.returncode != 0:
            outcome["exit_code"] = proc.returncode
            outcome["stderr"] = err.decode("utf-8", "replace").strip()[-_TAIL:]
        return outcome

    return handle


@click.command()
@click.option(
    "--id",
    "runner_id",
    default=None,
    callback=lambda c, p, v: v and _node_id(c, p, v),
    help="This runner's node id (default: runner-HOST-PID).",
)
@click.option(
    "--mode",
    type=click.Choice(["notification", "exploration", "hybrid"]),
    envvar="CORRAL_RUNNER_MODE",
    default="hybrid",
    show_default=True,
    help="notification (inbox only), exploration (no inbox) or hybrid (env CORRAL_RUNNER_MODE).",
)
@click.option(
    "--heartbeat-interval",
    type=Seconds(),
    default=5.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--poll-interval",
    type=Seconds(),
    default=1.0,
    show_default=True,
    help="Seconds between asks while there is nothing to do.",
)
@click.option(
    "--idle-timeout",
    type=Seconds(),
    default=None,
    help="Seconds idle before retiring (default: the cluster's).",
)
@click.option("--no-retire", is_flag=True, help="Never retire for lack of work (a pool).")
@click.option(
    "--timeout",
    "activation_timeout",
    type=Seconds(),
    default=None,
    help="Stop a command that runs longer than this (seconds).",
)
@click.option(
    "--max-activations",
    type=click.IntRange(min=1),
    default=None,
    help="Exit after this many activations.",
)
@outage_option
@click.option("-q", "--quiet", is_flag=True, help="Log warnings only.")
@click.option("--json", "as_json", is_flag=True, help="Log JSON objects, one per line.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def runner(
    ctx: click.Context,
    runner_id: str | None,
    mode: str,
    heartbeat_interval: float,
    poll_interval: float,
    idle_timeout: float | None,
    no_retire: bool,
    activation_timeout: float | None,
    max_activations: int | None,
    outage_tolerance: float,
    quiet: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND once per activation (put it after --).

    Exit codes: 0 retired, stopped or --max-activations done; 1 terminated by the
    cluster (or registration refused); 2 bad arguments; 3 store unavailable for
    longer than --outage-tolerance.
    """
    from corral.client import connect
    from corral.outage import tolerant
    from corral.scheduler.runner import Runner

    _check_command(command)
    rid = runner_id or f"runner-{socket.gethostname()}-{os.getpid()}"[:64]
    from corral.daemonlog import configure

    configure(f"corral-runner {rid}", quiet=quiet, as_json=as_json)
    root = ctx.find_root()
    cluster = connect(root.obj.get("url") if isinstance(root.obj, dict) else None)
    handle = command_outcome(command, rid, activation_timeout)
    # The runner's calls ride out an unreachable store (its heartbeats are not
    # retried: they count failures and alert); a stop ends a wait at once.
    stopping = threading.Event()
    try:
        r = Runner(
            rid,
            mode,
            on_inbox=handle,
            on_discovery=handle,
            on_scheduled=handle,
            cluster=tolerant(cluster, outage_tolerance, sleep=stopping.wait),
            heartbeat_interval=heartbeat_interval,
            poll_interval=poll_interval,
            idle_timeout_seconds=idle_timeout,
            retire=not no_retire,
            handle_signals=False,  # ours: they also end a wait for the store
        )

        def on_signal(signum: int, frame: Any) -> None:
            stopping.set()
            r.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        return r.run(max_activations=max_activations)
    finally:
        cluster.close()


def register(group: click.Group) -> None:
    group.add_command(runner)
