"""``corral process``: the supervised processes every host's supervisor reports, and
start/stop/restart sent through the cluster to the supervisor that owns one.

    corral process list [--host H] [--json]
    corral process start|stop|restart AGENT [--host H] [--json]

A request is a ``process_action_requested`` event; the supervisor of that host runs
it and records a ``process_action_done`` event (``corral process`` does not wait for
it). Without ``--host`` the host is the only one reporting AGENT; none or several is
an error naming the agent (exit 2).
"""

from __future__ import annotations

import click

from corral.cli._common import CONTEXT_SETTINGS, client, emit, json_option
from corral.errors import InvalidInputError, NotFoundError
from corral.model import Event, Process
from corral.types import Client

__all__ = ["register"]


def _line(p: Process) -> str:
    flags = f" {','.join(p.flags)}" if p.flags else ""
    pid = "-" if p.pid is None else str(p.pid)
    return f"{p.host:<20} {p.agent:<24} {p.state:<10} {pid:>8} {p.restarts:>4}{flags}"


def _table(ps: list[Process]) -> str:
    if not ps:
        return "(no supervised processes)"
    head = f"{'HOST':<20} {'AGENT':<24} {'STATE':<10} {'PID':>8} {'RST':>4}"
    return "\n".join([head, *map(_line, ps)])


@click.group(context_settings=CONTEXT_SETTINGS)
def process() -> None:
    """Supervised processes of every host (reported by `corral supervise --url`)."""


@process.command("list")
@click.option("--host", default=None, help="Only this host's processes.")
@json_option
@click.pass_context
def process_list(ctx: click.Context, host: str | None, as_json: bool) -> None:
    """List every host's supervised processes: host, agent, state, pid, restarts."""
    emit(client(ctx).list_processes(host), as_json, _table)


def _host_of(c: Client, agent: str) -> str:
    hosts = sorted({p.host for p in c.list_processes() if p.agent == agent})
    if not hosts:
        raise NotFoundError(f"no host reports agent {agent}", field="agent")
    if len(hosts) > 1:
        raise InvalidInputError(
            f"agent {agent} runs on hosts {', '.join(hosts)}: pass --host", field="agent"
        )
    return hosts[0]


def _action_command(action: str) -> click.Command:
    @click.command(action, context_settings=CONTEXT_SETTINGS)
    @click.argument("agent")
    @click.option("--host", default=None, help="The host running AGENT (default: the only one).")
    @json_option
    @click.pass_context
    def command(ctx: click.Context, agent: str, host: str | None, as_json: bool) -> None:
        c = client(ctx)
        if host is None:
            host = _host_of(c, agent)
        event = c.request_process_action(host, agent, action)

        def text(e: Event) -> str:
            return f"requested {action} of {agent} on {host} (request {e.seq})"

        emit(event, as_json, text)

    command.help = (
        f"Ask the supervisor of AGENT's host to {action} it (answered by a "
        "process_action_done event)."
    )
    return command


for _action in ("start", "stop", "restart"):
    process.add_command(_action_command(_action))


def register(group: click.Group) -> None:
    group.add_command(process)
