"""``corral workflows``: workflow runs tracked by the cluster, and the host that runs
them.

    corral workflows list [--status S] [--idle|--busy] [--idle-duration-gt SECONDS]
                          [--workflow W] [--host H] [--limit N] [--json]
    corral workflows show HANDLER_ID [--json]
    corral workflows run WORKFLOW [--kwargs JSON] [--json]
    corral workflows send HANDLER_ID EVENT_TYPE [--data JSON] [--wait SECONDS] [--json]
    corral workflows release HANDLER_ID [--json]
    corral workflows resume HANDLER_ID [--wait SECONDS] [--json]
    corral workflows serve MODULE:ATTR [--name NAME] [--idle-release-after SECONDS]
                           [--host H] [-q] [--json]

``serve`` hosts a LlamaIndex ``Workflow`` instance (the ``corral[llama]`` extra) on
the cluster given by the global ``--url``, until interrupted.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from corral.cli._common import CONTEXT_SETTINGS, Seconds, client, emit, json_option
from corral.errors import InvalidInputError
from corral.workflows.model import HANDLER_STATUSES, Handler

__all__ = ["register"]

SEND_WAIT = 10.0  # seconds `send` waits for a released run to be resumed
SEND_POLL = 0.05  # seconds between two reads of the run while it waits


def _line(h: Handler) -> str:
    d = h.to_dict()
    waits = ",".join(sorted({str(w.get("event_type")) for w in h.active_waiters})) or "-"
    idle = d["idle_since"] or "-"
    return (
        f"{h.handler_id:<34} {h.workflow:<20} {h.status:<10} {h.host or '-':<20} {idle:<33} {waits}"
    )


def _table(hs: list[Handler]) -> str:
    if not hs:
        return "(no workflow runs)"
    head = (
        f"{'HANDLER':<34} {'WORKFLOW':<20} {'STATUS':<10} {'HOST':<20} {'IDLE SINCE':<33} WAITS FOR"
    )
    return "\n".join([head, *map(_line, hs)])


def _json_object(value: str | None, option: str) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise InvalidInputError(f"{option} must be a JSON object: {exc}", field=option) from None
    if not isinstance(parsed, dict):
        raise InvalidInputError(f"{option} must be a JSON object", field=option)
    return parsed


@click.group(context_settings=CONTEXT_SETTINGS)
def workflows() -> None:
    """Workflow runs: list idle ones, start, send events, host a workflow."""


@workflows.command("list")
@click.option("--status", type=click.Choice(HANDLER_STATUSES), default=None)
@click.option("--idle/--busy", "idle", default=None, help="Only idle runs, or only busy ones.")
@click.option(
    "--idle-duration-gt",
    type=Seconds(zero_ok=True),
    default=None,
    help="Only runs idle for more than this many seconds.",
)
@click.option("--workflow", default=None, help="Only this workflow's runs.")
@click.option("--host", default=None, help="Only this host's runs.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option
@click.pass_context
def workflows_list(
    ctx: click.Context,
    status: str | None,
    idle: bool | None,
    idle_duration_gt: float | None,
    workflow: str | None,
    host: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List workflow runs: idle ones longest idle first, with what they wait for."""
    found = client(ctx).list_handlers(status, idle, idle_duration_gt, workflow, host, limit)
    emit(found, as_json, _table)


@workflows.command("show")
@click.argument("handler_id")
@json_option
@click.pass_context
def workflows_show(ctx: click.Context, handler_id: str, as_json: bool) -> None:
    """One run: status, idle since, waits, result or error."""
    emit(client(ctx).get_handler(handler_id), as_json, lambda h: _table([h]))


@workflows.command("run")
@click.argument("workflow")
@click.option("--kwargs", "kwargs", default=None, help="The start event's fields, a JSON object.")
@json_option
@click.pass_context
def workflows_run(ctx: click.Context, workflow: str, kwargs: str | None, as_json: bool) -> None:
    """Start a run of WORKFLOW on a host serving it; prints its handler id."""
    fields = _json_object(kwargs, "--kwargs")
    emit(client(ctx).run_workflow(workflow, **fields), as_json, str)


@workflows.command("send")
@click.argument("handler_id")
@click.argument("event_type")
@click.option("--data", default=None, help="The event's fields, a JSON object.")
@click.option(
    "--wait",
    type=Seconds(zero_ok=True),
    default=SEND_WAIT,
    show_default=True,
    help="Seconds to wait for a released run to be resumed by a host (0: do not wait).",
)
@json_option
@click.pass_context
def workflows_send(
    ctx: click.Context,
    handler_id: str,
    event_type: str,
    data: str | None,
    wait: float,
    as_json: bool,
) -> None:
    """Send EVENT_TYPE (the event class's name) to a run and print the run. A
    released run resumes on a host serving its workflow: the run is printed once
    resumed (up to --wait seconds; still released then, a line on stderr says so)."""
    fields = _json_object(data, "--data")
    c = client(ctx)
    h = c.send_event(handler_id, event_type, fields)
    if h.status == "released":
        h = _resumed(c, h, wait)
        if h.status == "released":
            click.echo(
                f"corral workflows send: run {h.handler_id} still released after {wait:g} s: "
                f"it resumes when a host serving {h.workflow} takes it",
                err=True,
            )
    emit(h, as_json, lambda x: _table([x]))


@workflows.command("release")
@click.argument("handler_id")
@json_option
@click.pass_context
def workflows_release(ctx: click.Context, handler_id: str, as_json: bool) -> None:
    """Ask that an idle run be released now, whatever its release delay: its host
    checkpoints it and lets it go at its next poll. Refused (exit 1) for a run that is
    not idle on a host or is kept resident. Prints the run."""
    emit(client(ctx).release_workflow(handler_id), as_json, lambda h: _table([h]))


@workflows.command("resume")
@click.argument("handler_id")
@click.option(
    "--wait",
    type=Seconds(zero_ok=True),
    default=SEND_WAIT,
    show_default=True,
    help="Seconds to wait for a host to restore the run (0: do not wait).",
)
@json_option
@click.pass_context
def workflows_resume(ctx: click.Context, handler_id: str, wait: float, as_json: bool) -> None:
    """Resume a released run now, without an event: a host serving its workflow
    restores it. The run is printed once restored (up to --wait seconds; still
    released then, a line on stderr says so). Refused (exit 1) for a run that is not
    released."""
    c = client(ctx)
    h = _resumed(c, c.resume_workflow(handler_id), wait)
    if h.status == "released":
        click.echo(
            f"corral workflows resume: run {h.handler_id} still released after {wait:g} s: "
            f"it resumes when a host serving {h.workflow} takes it",
            err=True,
        )
    emit(h, as_json, lambda x: _table([x]))


def _resumed(c: Any, h: Handler, wait: float) -> Handler:
    """``h`` once a host has taken it back (no longer released), or as it is at the
    deadline."""
    deadline = time.monotonic() + wait
    while h.status == "released" and time.monotonic() < deadline:
        time.sleep(min(SEND_POLL, max(0.0, deadline - time.monotonic())))
        h = c.get_handler(h.handler_id)
    return h


@workflows.command("serve")
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--name", default=None, help="The workflow's name in the cluster (default: ATTR).")
@click.option(
    "--idle-release-after",
    type=Seconds(),
    default=None,
    help="This workflow's release delay here (default: the cluster's idle_release_after).",
)
@click.option("--host", default=None, help="This host's id (default: HOSTNAME-PID).")
@click.option("-q", "--quiet", is_flag=True, help="Print warnings only (failed runs).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON objects, one per line.")
@click.pass_context
def workflows_serve(
    ctx: click.Context,
    target: str,
    name: str | None,
    idle_release_after: float | None,
    host: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Run the LlamaIndex Workflow instance MODULE:ATTR for the cluster until interrupted.

    Prints a timestamped line on stderr per run's step (started or restored, idle and
    what it waits for, released, finished); -q warnings only, --json objects."""
    try:
        from corral.workflows.llama.serve import load_workflow, serve
    except ImportError as exc:
        raise click.ClickException(
            f"corral workflows serve needs the llama extra (pip install 'corral[llama]'): {exc}"
        ) from None

    from corral.daemonlog import configure

    workflow = load_workflow(target)
    attr = target.rpartition(":")[2]
    configure("corral-workflows", quiet=quiet, as_json=as_json)
    serve(client(ctx), {name or attr: (workflow, idle_release_after)}, host=host)


def register(group: click.Group) -> None:
    group.add_command(workflows)
