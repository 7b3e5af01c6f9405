"""``corral agents``, ``corral notify`` and ``corral assignments``: the activation
scheduler's agents, their inboxes and the live activations.

    corral agents load DIR            # DIR/<name>/config.yaml (or .toml, .json) each
    corral agents add AGENT_ID [--config JSON]
    corral agents list | show AGENT_ID | inbox AGENT_ID
    corral notify AGENT_ID PAYLOAD    # PAYLOAD: JSON, or else taken as a string
    corral assignments
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from corral.cli._common import CONTEXT_SETTINGS, client, emit, json_option
from corral.errors import InvalidInputError
from corral.scheduler.records import Agent, Assignment, Notification

__all__ = ["register"]


def _when(t: float | None) -> str:
    if t is None:
        return "never"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _agents_table(agents: list[Agent]) -> str:
    if not agents:
        return "(no agents)"
    head = f"{'AGENT':<24} {'UNREAD':>6} {'RUNS':>5} {'LAST ACTIVATED (UTC)':<20} HELD BY"
    rows = [
        f"{a.id:<24} {a.unread:>6} {a.activation_count:>5} {_when(a.last_activated_at):<20}"
        f" {a.held_by or '-'}"
        for a in agents
    ]
    return "\n".join([head, *rows])


def _assignments_table(items: list[Assignment]) -> str:
    if not items:
        return "(no live activations)"
    head = f"{'ID':>6} {'AGENT':<24} {'RUNNER':<20} {'KIND':<10} {'EPOCH':>5} EXPIRES (UTC)"
    rows = [
        f"{a.id:>6} {a.agent_id:<24} {a.runner_id:<20} {a.kind:<10} {a.epoch:>5}"
        f" {_when(a.expires_at)}"
        for a in items
    ]
    return "\n".join([head, *rows])


def _inbox(items: list[Notification]) -> str:
    if not items:
        return "(inbox empty)"
    return "\n".join(f"[{n.id}] {json.dumps(n.payload, ensure_ascii=False)}" for n in items)


def _json_arg(value: str, field: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise InvalidInputError(f"{field} must be JSON", field=field) from None


@click.group(context_settings=CONTEXT_SETTINGS)
def agents() -> None:
    """Agents the activation scheduler activates (inbox first, then the stalest)."""


@agents.command("load")
@click.argument("directory", type=click.Path(path_type=Path))
@json_option
@click.pass_context
def agents_load(ctx: click.Context, directory: Path, as_json: bool) -> None:
    """Add or update every agent of DIRECTORY/<name>/config.yaml (or config.toml,
    config.json): all files are checked before any is added."""
    from corral.scheduler.files import load_dir

    found = load_dir(directory)
    c = client(ctx, create=True)
    added = [c.add_agent(agent_id, config) for agent_id, config in found]
    emit(added, as_json, lambda xs: f"loaded {len(xs)} agent(s): {', '.join(a.id for a in xs)}")


@agents.command("add")
@click.argument("agent_id")
@click.option("--config", default=None, help="The agent's config as JSON.")
@json_option
@click.pass_context
def agents_add(ctx: click.Context, agent_id: str, config: str | None, as_json: bool) -> None:
    """Add an agent to activate (or replace its config)."""
    parsed = None if config is None else _json_arg(config, "config")
    emit(
        client(ctx, create=True).add_agent(agent_id, parsed),
        as_json,
        lambda a: f"added agent {a.id}",
    )


@agents.command("list")
@click.option("--after", default="", help="Agents after this id (a page).")
@click.option("--limit", default=100, type=int, help="At most this many.")
@json_option
@click.pass_context
def agents_list(ctx: click.Context, after: str, limit: int, as_json: bool) -> None:
    """List agents: unread items, activations, last activation, holder."""
    emit(client(ctx).list_agents(after, limit), as_json, _agents_table)


@agents.command("show")
@click.argument("agent_id")
@json_option
@click.pass_context
def agents_show(ctx: click.Context, agent_id: str, as_json: bool) -> None:
    """One agent, with its config."""
    emit(
        client(ctx).get_agent(agent_id),
        as_json,
        lambda a: json.dumps(a.to_dict(), indent=2, ensure_ascii=False),
    )


@agents.command("inbox")
@click.argument("agent_id")
@click.option("--limit", default=100, type=int, help="At most this many items.")
@json_option
@click.pass_context
def agents_inbox(ctx: click.Context, agent_id: str, limit: int, as_json: bool) -> None:
    """Read an agent's unread inbox items (they are marked read)."""
    emit(client(ctx).read_inbox(agent_id, limit), as_json, _inbox)


@click.command("notify", context_settings=CONTEXT_SETTINGS)
@click.argument("agent_id")
@click.argument("payload")
@json_option
@click.pass_context
def notify(ctx: click.Context, agent_id: str, payload: str, as_json: bool) -> None:
    """Put PAYLOAD (JSON, or else a string) in AGENT_ID's inbox."""
    try:
        value: Any = json.loads(payload)
    except ValueError:
        value = payload
    emit(
        client(ctx).notify(agent_id, value),
        as_json,
        lambda n: f"notified {n.agent_id} (item {n.id})",
    )


@click.command("assignments", context_settings=CONTEXT_SETTINGS)
@click.option("--limit", default=100, type=int, help="At most this many.")
@json_option
@click.pass_context
def assignments(ctx: click.Context, limit: int, as_json: bool) -> None:
    """The live activations: which runner holds which agent, until when."""
    emit(client(ctx).list_assignments(limit), as_json, _assignments_table)


def register(group: click.Group) -> None:
    group.add_command(agents)
    group.add_command(notify)
    group.add_command(assignments)
