"""The cluster core's commands: init, status, node, task, assess, monitor, config."""

from __future__ import annotations

import json
import logging
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import click

from corral.cli._common import Seconds, client, emit, json_option
from corral.cli._operations import RuleType, operation_command
from corral.model import Node, Task
from corral.validation import USAGE

__all__ = ["register"]


_NODE_HEAD = f"{'NODE':<24} {'ROLE':<18} {'STATUS':<10} {'STRENGTH':<8} TASK"
_TASK_HEAD = f"{'ID':>6}  {'STATUS':<11} {'PRIO':<6} TITLE @HOLDER"


def _node_line(n: Node) -> str:
    task = f" task-{n.current_task_id}" if n.current_task_id is not None else ""
    return f"{n.id:<24} {n.role:<18} {n.status:<10} {n.strength or '-':<8}{task}"


def _task_line(t: Task) -> str:
    who = f" @{t.assigned_to}" if t.assigned_to else ""
    return f"{t.id:>6}  {t.status:<11} {t.priority:<6} {t.title}{who}"


def _table(head: str, lines: list[str], empty: str) -> str:
    """A header line over the rows, or ``empty``."""
    return "\n".join([head, *lines]) if lines else empty


def _task_detail(t: Task) -> str:
    lines = [f"task {t.id}: {t.title}"]
    for key in ("status", "priority", "assigned_to", "epoch", "attempts", "max_attempts"):
        lines.append(f"  {key}: {getattr(t, key)}")
    lines.append(f"  roles: {', '.join(t.roles) or '-'}")
    if t.description:
        lines.append(f"  description: {t.description}")
    if t.result is not None:
        lines.append(f"  result: {json.dumps(t.result)}")
    if t.error:
        lines.append(f"  error: {t.error}")
    return "\n".join(lines)


def _node_detail(n: Node) -> str:
    keys = (
        "role",
        "status",
        "model",
        "strength",
        "current_task_id",
        "idle_since",
        "last_activity",
        "last_heartbeat",
        "heartbeat_interval",
        "health",
        "host",
        "pid",
    )
    return "\n".join([f"node {n.id}", *(f"  {k}: {getattr(n, k)}" for k in keys)])


@click.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create the cluster's store (and .corral/) if it does not exist, and the
    server's bearer token (.corral/token, mode 0600) unless $CORRAL_TOKEN is set."""
    c = client(ctx, create=True)
    click.echo(f"cluster ready at {c.url}")
    if not os.environ.get("CORRAL_TOKEN"):
        from corral.server.auth import ensure_token_file

        click.echo(f"token in {ensure_token_file()}")


@click.command()
@json_option
@click.option("--node", "node_id", default=None, help="Show this node's heartbeat age.")
@click.option("--limit", type=int, default=50, show_default=True, help="Tasks to list.")
@click.pass_context
def status(ctx: click.Context, as_json: bool, node_id: str | None, limit: int) -> None:
    """The cluster at a glance, as tables: the Fleet's counts (live nodes against
    max_agents; pending, in progress, done and failed in the last hour; the oldest
    pending task's age; the last lease recovery; the last assessment with the counts
    it was made from), the live nodes (heartbeat age against each one's own window),
    the task board (in progress, then pending in claim order with the score's parts)
    and the supervised processes. With --node only that node's row. --json prints
    read_state's record (the board, the nodes, the metadata) instead."""
    c = client(ctx)
    if as_json:
        emit(c.read_state(node_id, limit=limit), as_json)
        return
    from rich.console import Group

    from corral import cockpit
    from corral.cli import _tables

    settings, stats = c.settings(), c.stats()
    state = c.read_state(node_id, limit=1)
    nodes = [n for n in c.list_nodes() if n.status != "terminated"]
    if node_id is not None:
        nodes = [n for n in nodes if n.id == node_id] or [c.get_node(node_id)]
    held = c.list_tasks("in_progress", limit=limit)
    pending = c.list_tasks("pending", limit=limit)
    now = state.now
    board = (held + pending)[:limit]
    shown_more = sum(stats.tasks.get(k, 0) for k in ("in_progress", "pending")) - len(board)
    rows = [cockpit.process_row(p.to_dict(), now) for p in state.processes]
    more = f"... and {shown_more} more (--limit)" if shown_more > 0 else None
    board_table = _tables.tasks_table(board, now, title="Task board")
    _tables.show(
        _tables.fleet_table(cockpit.fleet(stats, state, pending, now)),
        _tables.nodes_table(nodes, settings, now),
        board_table if more is None else Group(board_table, more),
        _tables.processes_table(rows, hosts=True, title="Processes") if rows else None,
    )


@click.command()
@json_option
@click.pass_context
def assess(ctx: click.Context, as_json: bool) -> None:
    """Assess the workload and record the recommendation."""
    emit(client(ctx).assess_workload(), as_json)


# --- node ------------------------------------------------------------------------------
@click.group()
def node() -> None:
    """Register, list, inspect and terminate nodes."""


@node.command("register")
@click.argument("node_id")
@click.argument("role")
@click.option("--model", default=None, help="Model name, e.g. claude-sonnet-4-5.")
@click.option("--strength", default=None, help="high, medium or low (derived from --model).")
@click.option("--heartbeat-interval", type=float, default=None, help="Seconds between beats.")
@json_option
@click.pass_context
def node_register(
    ctx: click.Context,
    node_id: str,
    role: str,
    model: str | None,
    strength: str | None,
    heartbeat_interval: float | None,
    as_json: bool,
) -> None:
    """Register NODE_ID as ROLE (refused at capacity)."""
    emit(
        client(ctx, create=True).register_node(node_id, role, model, strength, heartbeat_interval),
        as_json,
    )


@node.command("token")
@click.argument("node_id")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The operator token's file (default: $CORRAL_TOKEN, else .corral/token).",
)
def node_token(node_id: str, token_file: Path | None) -> None:
    """Print NODE_ID's bearer token, derived from the operator token. With it a client
    (corral.connect, an MCP client on /mcp) acts only as NODE_ID; changing the
    operator token revokes it."""
    from corral.errors import InvalidInputError
    from corral.server.auth import Tokens, load_token
    from corral.validation import check_id

    node_id = check_id(node_id)
    if token_file is not None and not token_file.is_file():
        raise click.BadParameter(f"{token_file} does not exist", param_hint="'--token-file'")
    try:
        operator = load_token(token_file, create=False)
    except InvalidInputError as exc:
        # The same problems are exit 2 for corral serve: a usage error naming the option.
        raise click.BadParameter(
            f"no operator token ({exc}): set $CORRAL_TOKEN, pass --token-file or run corral init",
            param_hint="'--token-file'",
        ) from None
    click.echo(Tokens(operator).node_token(node_id))


@node.command("list")
@click.option("--status", default=None, help="Only nodes with this status.")
@click.option("--role", default=None, help="Only nodes with this role.")
@click.option("--all", "show_all", is_flag=True, help="Include terminated nodes.")
@json_option
@click.pass_context
def node_list(
    ctx: click.Context, status: str | None, role: str | None, show_all: bool, as_json: bool
) -> None:
    """List nodes (live ones unless --all or --status terminated)."""
    nodes = client(ctx).list_nodes(status=status, role=role)
    if not show_all and status is None:
        nodes = [n for n in nodes if n.status != "terminated"]
    emit(nodes, as_json, lambda ns: _table(_NODE_HEAD, [_node_line(n) for n in ns], "(no nodes)"))


@node.command("show")
@click.argument("node_id")
@json_option
@click.pass_context
def node_show(ctx: click.Context, node_id: str, as_json: bool) -> None:
    """Show one node."""
    emit(client(ctx).get_node(node_id), as_json, _node_detail)


@node.command("status")
@click.argument("node_id")
@click.argument("status")
@click.option("--task", "task_id", default=None, help="The task it is working on.")
@json_option
@click.pass_context
def node_status(
    ctx: click.Context, node_id: str, status: str, task_id: str | None, as_json: bool
) -> None:
    """Set NODE_ID's STATUS (working, idle, waiting, terminated)."""
    emit(client(ctx).set_agent_status(node_id, status, task_id), as_json, _node_detail)


@node.command("terminate")
@click.argument("node_id")
@click.pass_context
def node_terminate(ctx: click.Context, node_id: str) -> None:
    """Terminate NODE_ID; its tasks go back to the queue."""
    client(ctx).terminate_node(node_id)
    click.echo(f"Node {node_id} terminated")


# --- task ------------------------------------------------------------------------------
@click.group()
def task() -> None:
    """Add, list, claim and finish tasks."""


@task.command("add")
@click.argument("title")
@click.option("--description", "-d", default="", help="Longer text (also keyword-matched).")
@click.option("--priority", "-p", default="medium", help="high, medium or low.")
@click.option("--role", default=None, help="Give this role the match bonus.")
@click.option("--max-attempts", type=int, default=None, help="Claims before it fails for good.")
@click.option(
    "--progress-timeout",
    type=Seconds(),
    default=None,
    help="Seconds without a progress report after which it is stuck (default: the "
    "cluster's progress_timeout).",
)
@click.option(
    "--timeout", type=Seconds(), default=None, help="Seconds a run may take from its claim."
)
@click.option(
    "--not-before",
    type=float,
    default=None,
    help="Not claimable before this time (seconds since the epoch).",
)
@click.option(
    "--depends-on",
    multiple=True,
    help="A task it waits on (repeat for several): claimable once each is done.",
)
@click.option(
    "--retry-backoff",
    type=Seconds(),
    default=None,
    help="Seconds before a failed attempt is claimable again (doubling per attempt).",
)
@json_option
@click.pass_context
def task_add(
    ctx: click.Context,
    title: str,
    description: str,
    priority: str,
    role: str | None,
    max_attempts: int | None,
    progress_timeout: float | None,
    timeout: float | None,
    not_before: float | None,
    depends_on: tuple[str, ...],
    retry_backoff: float | None,
    as_json: bool,
) -> None:
    """Add a task titled TITLE."""
    t = client(ctx, create=True).add_task(
        title,
        description,
        priority,
        role,
        max_attempts=max_attempts,
        progress_timeout=progress_timeout,
        timeout=timeout,
        not_before=not_before,
        depends_on=list(depends_on) or None,
        retry_backoff=retry_backoff,
    )
    emit(t, as_json, lambda t: f"Added task {t.id}: {t.title}")


@task.command("list")
@click.option(
    "--status",
    default=None,
    help="pending, in_progress, done, failed, cancelled, scheduled or blocked.",
)
@click.option("--node", "assigned_to", default=None, help="Only tasks held by this node.")
@click.option("--limit", type=int, default=100, show_default=True)
@json_option
@click.pass_context
def task_list(
    ctx: click.Context, status: str | None, assigned_to: str | None, limit: int, as_json: bool
) -> None:
    """List tasks."""
    tasks = client(ctx).list_tasks(status=status, assigned_to=assigned_to, limit=limit)
    emit(tasks, as_json, lambda ts: _table(_TASK_HEAD, [_task_line(t) for t in ts], "(no tasks)"))


@task.command("show")
@click.argument("task_id")
@json_option
@click.pass_context
def task_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one task."""
    emit(client(ctx).get_task(task_id), as_json, _task_detail)


@task.command("claim")
@click.argument("node_id")
@click.argument("role", required=False)
@json_option
@click.pass_context
def task_claim(ctx: click.Context, node_id: str, role: str | None, as_json: bool) -> None:
    """Claim the best task for NODE_ID (as ROLE, default the node's role)."""
    c = client(ctx)
    t = c.claim_best_task(node_id, role or c.get_node(node_id).role)
    if as_json:
        emit(t, True)
    else:
        from corral.render import claim_text

        click.echo(claim_text(t) + (f" (epoch {t.epoch})" if t else ""))


class _Json(click.ParamType[Any]):
    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            self.fail('must be JSON, e.g. {"input_tokens": 1200, "cost_usd": 0.02}', param, ctx)


_USAGE_OPTION = click.option(
    "--usage",
    type=RuleType(USAGE, _Json(), "usage"),
    default=None,
    help='Usage deltas as JSON: {"input_tokens": N, "output_tokens": N, "cost_usd": X}.',
)


@task.command("complete")
@click.argument("task_id")
@click.argument("node_id")
@click.option("--epoch", type=int, default=None, help="The lease epoch the claim returned.")
@click.option("--result", default=None, help="JSON (or text) to record as the result.")
@_USAGE_OPTION
@json_option
@click.pass_context
def task_complete(
    ctx: click.Context,
    task_id: str,
    node_id: str,
    epoch: int | None,
    result: str | None,
    usage: dict[str, Any] | None,
    as_json: bool,
) -> None:
    """Mark TASK_ID done by NODE_ID."""
    t = client(ctx).complete_task(task_id, node_id, epoch, _parse_value(result), usage=usage)
    emit(t, as_json, lambda t: f"Completed task {t.id}: {t.title}")


@task.command("fail")
@click.argument("task_id")
@click.argument("node_id")
@click.option("--epoch", type=int, default=None, help="The lease epoch the claim returned.")
@click.option("--error", default="", help="What went wrong.")
@click.option("--no-retry", is_flag=True, help="Fail for good instead of requeueing.")
@_USAGE_OPTION
@json_option
@click.pass_context
def task_fail(
    ctx: click.Context,
    task_id: str,
    node_id: str,
    epoch: int | None,
    error: str,
    no_retry: bool,
    usage: dict[str, Any] | None,
    as_json: bool,
) -> None:
    """Give TASK_ID up (requeued while attempts remain)."""
    t = client(ctx).fail_task(task_id, node_id, epoch, error, retry=not no_retry, usage=usage)
    emit(t, as_json, lambda t: f"Task {t.id} is now {t.status}")


# --- config ----------------------------------------------------------------------------
@click.group()
def config() -> None:
    """Show and change the cluster's settings."""


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print every setting."""
    s = client(ctx).settings().to_dict()
    emit(s, as_json, lambda d: "\n".join(f"{k} = {json.dumps(v)}" for k, v in d.items()))


def _parse_value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("pairs", nargs=-1, required=True, metavar="KEY VALUE [KEY VALUE]...")
@click.pass_context
def config_set(ctx: click.Context, pairs: tuple[str, ...]) -> None:
    """Set settings; VALUE is JSON (numbers, lists, objects) or text."""
    if len(pairs) % 2:
        raise click.UsageError(f"setting {pairs[-1]!r} has no value")
    changes = {k: _parse_value(v) for k, v in zip(pairs[::2], pairs[1::2], strict=True)}
    if "actor" in changes:  # configure's own parameter: who changes, never a setting
        raise click.UsageError("actor is not a setting: the caller is the change's actor")
    client(ctx, create=True).configure(**changes)
    for key, value in changes.items():
        click.echo(f"{key} = {json.dumps(value)}")


# --- monitor ---------------------------------------------------------------------------
_PASS_KINDS = (
    ("lease_recovered", "recovered", "lease"),
    ("node_dead", "terminated", "dead node"),
    ("node_retired", "retired", "idle node"),
)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def pass_line(result: Any, now: float) -> str:
    """One line saying what a monitor pass (``Monitor.tick``'s result) did."""
    wait = (
        "" if result.next_deadline is None else f"; next due in {result.next_deadline - now:.1f}s"
    )
    if not result.leader:
        return f"pass: another monitor leads, nothing done{wait}"
    counts = Counter(e.kind for e in result.events)
    done = [f"{verb} {_count(counts.pop(kind, 0), noun)}" for kind, verb, noun in _PASS_KINDS]
    done += [f"{kind} {n}" for kind, n in sorted(counts.items())]
    a = result.assessment
    assessed = (
        "assessment not due"
        if a is None
        else f"assessment {a.status} -> {a.recommendation} ({a.pending_tasks} pending, "
        f"{a.working_count} working, {a.idle_count} idle)"
    )
    return f"pass: {', '.join(done)}; {assessed}{wait}"


class PassFilter:
    """Which monitor passes ``corral monitor -v`` logs. The monitor wakes on every
    new event (a heartbeat, a claim), so most passes find nothing due; a line for
    each said "next due in 23.2 s" every 0.5 s. A pass is logged when it did
    something (events), when its assessment's status or recommendation is not the
    one last logged, when its next deadline is earlier than the one last logged (a
    new duty, sooner) or when that one has passed (the line it gave is stale), and
    when the monitor gains or loses the lead. Pure: the pass and ``now``."""

    EPSILON = 0.05  # seconds: a deadline this much earlier is a new one

    def __init__(self) -> None:
        self.logged = False
        self.leader: bool | None = None
        self.deadline: float | None = None
        self.assessed: tuple[str, str] | None = None

    def worth(self, result: Any, now: float) -> bool:
        """Whether to log this pass (and remember it when so)."""
        a = result.assessment
        assessed = None if a is None else (a.status, a.recommendation)
        nd = result.next_deadline
        if not result.leader:
            log = self.leader is not False  # a follower's passes: once, when it follows
        else:
            log = (
                not self.logged
                or self.leader is False
                or bool(result.events)
                or (assessed is not None and assessed != self.assessed)
                or (nd is None) != (self.deadline is None)
                or (
                    nd is not None
                    and self.deadline is not None
                    and nd < self.deadline - self.EPSILON
                )
                or (self.deadline is not None and now >= self.deadline)
            )
        if log:
            self.logged, self.leader, self.deadline = True, result.leader, nd
            if assessed is not None:
                self.assessed = assessed
        return log


@click.command()
@click.option("--max-sleep", type=float, default=None, help="Longest sleep between checks (s).")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Log a pass when it did something, its assessment changed, or its "
    "next deadline is new (sooner, or the last one passed): what it "
    "recovered, terminated and retired, the assessment, the next duty.",
)
@click.pass_context
def monitor(ctx: click.Context, max_sleep: float | None, verbose: bool) -> None:
    """Run the monitor: recover stale leases, retire idle nodes, assess, and alert
    while it leads (docs/alerts.md). Ctrl-C stops."""
    from corral.monitor import Monitor

    passes = PassFilter()

    class VerboseMonitor(Monitor):
        def tick(self, now: float | None = None, due: Any = None, at: Any = None) -> Any:
            result = super().tick(now, due, at)
            t = self.cluster.clock.now()
            if passes.worth(result, t):
                logging.getLogger("corral.monitor").info(
                    pass_line(result, t), extra={"action": "monitor_pass"}
                )
            return result

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    kwargs: dict[str, Any] = {"alerts": True}
    if max_sleep is not None:
        kwargs["max_sleep"] = max_sleep
    m = (VerboseMonitor if verbose else Monitor)(client(ctx, create=True), **kwargs)
    signal.signal(signal.SIGTERM, lambda *_: m.stop())
    try:
        m.run()
    except KeyboardInterrupt:
        m.stop()


def register(cli: click.Group) -> None:
    for command in (init, status, assess, node, task, config, monitor):
        cli.add_command(command)
    # corral usage: made from the registry (an option per parameter, checked by its rule)
    from corral import operations

    cli.add_command(operation_command(next(o for o in operations.OPERATIONS if o.name == "usage")))
