"""``corral worker``: any program as a worker.

    corral worker --id W1 --role developer -- ./handle-task.sh

runs the command once per claimed task, with the task as JSON on stdin and in
``$CORRAL_TASK`` (plus ``$CORRAL_TASK_ID``, ``$CORRAL_TASK_EPOCH`` (also
``$CORRAL_EPOCH``), ``$CORRAL_ATTEMPT``, ``$CORRAL_SESSION_ID`` (the task's session,
the same on every attempt) and ``$CORRAL_NODE_ID``). Exit 0 completes the task
(stdout is the result: JSON if it parses, else ``{"stdout": …}``); any other exit
fails it with the stderr tail. Each line the command prints (stdout or stderr) is
progress on the task, reported at most once a second (a task with no progress for its
``progress_timeout`` is stuck). The worker heartbeats, goes idle and retires like any
``corral.Worker``; SIGTERM stops the command (SIGTERM to its process group, SIGKILL
after 5 s) and returns the task. A task the operator cancels, or the cluster takes
back (a stuck task requeued or failed), is stopped the same way as soon as a
heartbeat (or a refused progress report) says so; its completion is then refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import IO, TYPE_CHECKING, Any

import click

from corral.cli._common import Seconds

if TYPE_CHECKING:
    from corral.worker import Worker

__all__ = ["register"]

_TAIL = 4000


def _result(stdout: bytes) -> Any:
    text = stdout.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"stdout": text[-_TAIL:]}


def _pump(stream: IO[bytes], into: list[bytes], on_line: Callable[[str], object] | None) -> None:
    """Read ``stream`` to its end a line at a time, keeping every byte in ``into`` and
    calling ``on_line`` with each line (a reader thread per stream: a child's output is
    never held back by the worker)."""
    for line in iter(stream.readline, b""):
        into.append(line)
        if on_line is not None:
            text = line.decode("utf-8", "replace").strip()
            if text:
                on_line(text)
    stream.close()


def _feed(stream: IO[bytes], data: bytes) -> None:
    """Write the task to the child's stdin and close it (a child that exits without
    reading it is fine)."""
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.close()


def command_handler(
    command: tuple[str, ...],
    node_id: str,
    *,
    timeout: float | None = None,
    worker: Worker | None = None,
) -> Any:
    """A ``Worker.run`` handler that runs ``command`` once per task; with ``worker``,
    a task the operator cancels (or the cluster takes back) has its command stopped
    (``Worker.on_cancel``), and each line the command prints (stdout or stderr) is
    progress on the task (``Worker.progress``, at most one report a second)."""
    from contextlib import nullcontext

    from corral.worker import TaskFailed, stop_child

    def handle(task: Any) -> Any:
        task_json = json.dumps(task.to_dict(), ensure_ascii=False)
        env = {
            **os.environ,
            "CORRAL_TASK": task_json,
            "CORRAL_TASK_ID": str(task.id),
            "CORRAL_TASK_EPOCH": str(task.epoch),
            "CORRAL_EPOCH": str(task.epoch),
            "CORRAL_ATTEMPT": str(task.attempts),
            "CORRAL_SESSION_ID": task.session_id or "",
            "CORRAL_NODE_ID": node_id,
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
            raise TaskFailed(f"cannot run {command[0]}: {exc}") from None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        progress = None if worker is None else partial(worker.progress, task_id=task.id)
        out: list[bytes] = []
        err: list[bytes] = []
        threads = [
            threading.Thread(target=_feed, args=(proc.stdin, task_json.encode()), daemon=True),
            threading.Thread(target=_pump, args=(proc.stdout, out, progress), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, err, progress), daemon=True),
        ]
        for thread in threads:
            thread.start()
        watch = (
            nullcontext() if worker is None else worker.on_cancel(task.id, lambda: stop_child(proc))
        )
        try:
            with watch:
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_child(proc)
            raise TaskFailed(f"{command[0]} timed out after {timeout}s") from None
        except BaseException:  # a shutdown signal: stop the command, then unwind
            stop_child(proc)
            raise
        for thread in threads:
            thread.join()
        if proc.returncode == 0:
            return _result(b"".join(out))
        tail = b"".join(err).decode("utf-8", "replace").strip()[-_TAIL:]
        raise TaskFailed(f"{command[0]} exited with {proc.returncode}: {tail}".strip())

    return handle


def _check_command(command: tuple[str, ...]) -> None:
    """Refuse a COMMAND that cannot be executed before anything is claimed: every task
    would fail with it."""
    program = command[0]
    if shutil.which(program) is not None:
        return
    if os.sep not in program:
        why = "not found on $PATH"
    elif not os.path.exists(program):
        why = "no such file"
    elif os.path.isdir(program):
        why = "is a directory"
    else:
        why = "is not executable"
    raise click.BadParameter(f"{program}: {why}", param_hint="'COMMAND'")


def _tolerance(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--outage-tolerance``: seconds from 0 up to how long the store keeps a claim's
    idempotency key."""
    from corral.errors import InvalidInputError
    from corral.outage import MAX_OUTAGE_TOLERANCE, check_tolerance

    try:
        return check_tolerance(value)
    except InvalidInputError:
        raise click.BadParameter(
            f"must be a number of seconds from 0 up to {MAX_OUTAGE_TOLERANCE:g}; got {value:g}",
            ctx,
            param,
        ) from None


def outage_option(fn: Any) -> Any:
    """The ``--outage-tolerance`` option (``corral worker``, ``corral runner``)."""
    from corral.outage import OUTAGE_TOLERANCE

    return click.option(
        "--outage-tolerance",
        type=Seconds(zero_ok=True),
        default=OUTAGE_TOLERANCE,
        show_default=True,
        callback=_tolerance,
        help="Seconds to ride out an unreachable store (retrying with backoff, the "
        "running task left running) before exiting with code 3; 0 exits at once.",
    )(fn)


def _node_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from corral.errors import InvalidInputError
    from corral.validation import check_id

    try:
        return check_id(value)
    except InvalidInputError as exc:
        raise click.BadParameter(exc.message, ctx, param) from None


@click.command(context_settings={"ignore_unknown_options": False})
@click.option(
    "--id",
    "node_id",
    required=True,
    callback=_node_id,
    envvar="CORRAL_AGENT_ID",
    help="This worker's node id (env CORRAL_AGENT_ID: a pool member's).",
)
@click.option(
    "--role",
    required=True,
    envvar="CORRAL_ROLE",
    help="The role to register and claim for (env CORRAL_ROLE).",
)
@click.option("--model", default=None, help="Model name (sets the node's strength).")
@click.option(
    "--heartbeat-interval",
    type=Seconds(),
    default=5.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--idle-timeout",
    type=Seconds(),
    default=None,
    help="Seconds to keep trying to claim when idle before retiring "
    "(default: the cluster's idle_timeout_seconds).",
)
@click.option(
    "--task-timeout",
    type=Seconds(),
    default=None,
    help="Fail a task whose command runs longer than this (seconds).",
)
@click.option(
    "--max-tasks", type=click.IntRange(min=1), default=None, help="Exit after this many tasks."
)
@click.option(
    "--webhook",
    "webhooks",
    multiple=True,
    metavar="URL",
    help="Also POST each heartbeat's JSON here (repeatable).",
)
@click.option(
    "--metrics-keep",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Keep a heartbeat metrics series in the store (newest N points).",
)
@click.option(
    "--github-repo",
    default=None,
    metavar="OWNER/NAME",
    help="Comment each heartbeat on a GitHub issue ($GITHUB_TOKEN).",
)
@click.option(
    "--github-issue",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The issue number for --github-repo.",
)
@click.option(
    "--retry-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Attempts per heartbeat destination.",
)
@click.option(
    "--retry-delay",
    type=Seconds(zero_ok=True),
    default=5.0,
    show_default=True,
    help="Seconds between attempts.",
)
@outage_option
@click.option("-q", "--quiet", is_flag=True, help="Log warnings only.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def worker(
    ctx: click.Context,
    node_id: str,
    role: str,
    model: str | None,
    heartbeat_interval: float,
    idle_timeout: float | None,
    task_timeout: float | None,
    max_tasks: int | None,
    webhooks: tuple[str, ...],
    metrics_keep: int | None,
    github_repo: str | None,
    github_issue: int | None,
    retry_attempts: int,
    retry_delay: float,
    outage_tolerance: float,
    quiet: bool,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND once per claimed task (put it after --).

    The task is JSON on stdin and in $CORRAL_TASK; exit 0 completes it (stdout is
    the result), any other exit fails it with the stderr tail. Every option and
    COMMAND itself (found and executable) are checked before anything is claimed.

    Exit codes: 0 retired, shut down or --max-tasks done; 1 terminated by the cluster
    (or registration refused at capacity); 2 bad arguments (one line naming the
    option); 3 store unavailable for longer than --outage-tolerance.
    """
    from corral.worker import Worker
    from corral.worker.destinations import (
        Destination,
        GitHubDestination,
        MetricsDestination,
        RetryPolicy,
        WebhookDestination,
    )

    if (github_repo is None) != (github_issue is None):
        raise click.UsageError("--github-repo and --github-issue go together")
    _check_command(command)
    extra: list[Destination] = []
    for url in webhooks:
        try:
            extra.append(WebhookDestination(url))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--webhook'") from None
    if github_repo is not None and github_issue is not None:
        try:
            extra.append(GitHubDestination(github_repo, github_issue))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--github-repo'") from None
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format=f"corral-worker {node_id}: %(message)s",
        stream=sys.stderr,
    )
    from corral.client import connect

    root = ctx.find_root()
    cluster = connect(root.obj.get("url") if isinstance(root.obj, dict) else None)
    if metrics_keep is not None:
        extra.append(MetricsDestination(cluster, keep=metrics_keep))
    try:
        w = Worker(
            node_id,
            role,
            cluster=cluster,
            model=model,
            heartbeat_interval=heartbeat_interval,
            idle_timeout_seconds=idle_timeout,
            destinations=extra,
            retry=RetryPolicy(retry_attempts=retry_attempts, retry_delay=retry_delay),
            outage_tolerance=outage_tolerance,
        )
        handler = command_handler(command, node_id, timeout=task_timeout, worker=w)
        return w.run(handler, max_tasks=max_tasks)
    finally:
        cluster.close()


def register(group: click.Group) -> None:
    group.add_command(worker)
