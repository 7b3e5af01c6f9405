"""The operation registry: every operation of the cluster, declared once.

An operation is a method of ``corral.Cluster`` (its parameters, each typed with its
rule from ``corral.params``, and its docstring, which is the operation's help). The
registry adds what the surfaces need to know about it: its HTTP route, who may call
it, the parameter that names the node a node token must be, how the server runs it
(``short``, a declared protocol ``exception``), and its MCP tool and CLI command when
it has them. From the two come, when the app, the MCP server or the CLI is built:
its HTTP route and OpenAPI entry (``corral.server.generic``; a declared protocol
exception's few lines in ``corral.server.routes``), its MCP tool
(``corral.mcp.server``), its remote client's call (``corral.remote_calls``) and a CLI
command for a one-word ``cli`` that no module writes (``corral.cli._operations``).
The typed client's Protocol and the remote client's typed methods are written from
them by ``scripts/codegen.py`` (a development tool, for the type checker; until it
runs the remote client finds a new operation at run time).
``tests/integration/test_surfaces.py`` fails when an operation is missing from a surface,
two surfaces disagree on its parameters, or the generated code is stale.

Adding an operation is its ``Cluster`` method plus one ``Operation`` below
(docs/operations.md, "Adding an operation"; ``tests/integration/test_one_place.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "OPERATIONS",
    "Caller",
    "Exception_",
    "Operation",
    "control_table",
    "markdown_table",
    "operation",
]

Caller = Literal["public", "any", "operator"]
"""Who may call over the network: anyone (no token), the operator or the node named
by ``node`` (``any``), or only the operator's token."""

Exception_ = Literal["waiting_claim", "keyed_claim", "event_stream", "text_answer", "node_token"]
"""A protocol exception: what the generic request path (JSON in, the method's result
as JSON out) cannot do for an operation, done by code of its own in
``corral.server.routes`` and ``corral.server.dispatch``: ``waiting_claim`` (a claim
with ``wait`` holds the request while its caller is connected, and hands back a task
nobody received; with an idempotency key, a claim sent again answers what it took),
``keyed_claim`` (the key, for a completion that claims the next task), ``event_stream``
(``Accept: text/event-stream`` is the SSE feed; ``kind`` and ``node`` filter it),
``text_answer`` (the answer is ``text/plain``), ``node_token`` (a registration's answer
carries the node's own bearer token)."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation: ``name`` is its ``Cluster`` method (and remote client method)."""

    name: str
    route: str  # "METHOD /v1/path/{param}"; path parameters are the method's
    caller: Caller = "any"
    node: str | None = None  # the parameter a node token must match
    status: int = 200  # the HTTP status of a success
    mcp: str | None = None  # the MCP tool that makes this call, if any
    # How the tool renders the result as its one-line answer: a function of
    # ``corral.mcp.text``, or ".text" when the result carries its own.
    text: str | None = None
    cli: str | None = None  # the CLI command ("task add"), if any
    # How the HTTP server runs it: ``short`` is one bounded transaction (a single row
    # or a node's own rows), which may run on the event loop (corral.server.dispatch);
    # ``tag`` its OpenAPI tag; ``exception`` its protocol exception, if any.
    short: bool = False
    tag: str = "cluster"
    exception: Exception_ | None = None
    # The HTTP answer is an object with the result under this name (and its ``text``
    # when the result's record carries one) instead of the result itself.
    answer: str | None = None
    # Per surface, that surface's name for a method parameter: {"mcp": {"node_id": "agent_id"}}
    names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Method parameters a surface does not take, each with the reason
    # (e.g. the CLI fills ``host`` and ``pid`` itself).
    omits: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Arguments a surface takes beyond the method's, each with what it does (a
    # ``**kwargs`` parameter's name here: its items are that one object argument).
    adds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The values a surface passes itself for parameters it omits.
    fixed: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # Parameters with a default that a surface requires all the same.
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The method parameter a network surface fills with its caller's name (the token's
    # principal), refusing another: who an action's event records as its actor.
    actor: str | None = None

    # From ``route``, once (the request paths read them on every call).
    method: str = field(init=False, repr=False, compare=False)
    path: str = field(init=False, repr=False, compare=False)
    path_params: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        method, path = self.route.split(" ", 1)
        params = tuple(p.strip("{}") for p in path.split("/") if p.startswith("{"))
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "path_params", params)

    @property
    def doc(self) -> str:
        """The ``Cluster`` method's docstring: the operation's help."""
        from corral.cluster import Cluster

        return inspect.getdoc(getattr(Cluster, self.name)) or ""

    @property
    def summary(self) -> str:
        """The docstring's first sentence."""
        first = " ".join(self.doc.split("\n\n", 1)[0].split())
        end = first.find(". ")
        return first if end < 0 else first[: end + 1]


_AGENT = {"node_id": "agent_id"}
_ACTOR = {  # an operator action's actor is its caller (``Operation.actor``)
    "http": {"actor": "the caller: the token the request carries"},
    "mcp": {"actor": "the caller: the token the tool is called with"},
    "cli": {"actor": "the caller: the operator, or the token the CLI is given"},
}
_KEY = "a claim sent again with its lost answer's key answers what it took (corral.outage)"

OPERATIONS: tuple[Operation, ...] = (
    # --- settings ---------------------------------------------------------------------
    Operation("settings", "GET /v1/settings", short=True, cli="config show"),
    Operation(
        "configure",
        "PATCH /v1/settings",
        caller="operator",
        cli="config set",
        actor="actor",
        omits=_ACTOR,
    ),
    # --- nodes ------------------------------------------------------------------------
    Operation(
        "register_node",
        "POST /v1/nodes",
        short=True,
        exception="node_token",
        node="node_id",
        mcp="register_node",
        text=".text",
        cli="node register",
        names={"mcp": {"node_id": "agent_id", "model": "model_name"}},
        requires={"mcp": ("model",)},  # an agent names its model
        omits={
            "mcp": {"host": "the server's host is not the agent's", "pid": "likewise"},
            "cli": {"host": "the CLI is not the node's process", "pid": "likewise"},
        },
    ),
    Operation("list_nodes", "GET /v1/nodes", cli="node list"),
    Operation("get_node", "GET /v1/nodes/{node_id}", short=True, cli="node show"),
    Operation(
        "set_agent_status",
        "POST /v1/nodes/{node_id}/status",
        short=True,
        node="node_id",
        mcp="set_agent_status",
        text="status_text",
        cli="node status",
        names={"mcp": _AGENT, "cli": {"current_task_id": "task_id"}},
    ),
    Operation(
        "terminate_node",
        "POST /v1/nodes/{node_id}/terminate",
        node="node_id",
        cli="node terminate",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "heartbeat",
        "POST /v1/nodes/{node_id}/heartbeat",
        short=True,
        node="node_id",
        mcp="heartbeat",
        text="heartbeat_text",
        names={"mcp": _AGENT, "http": {"payload": "heartbeat"}},  # one argument, checked whole
    ),
    Operation(
        "touch", "POST /v1/nodes/{node_id}/touch", short=True, node="node_id", answer="touched"
    ),
    Operation(
        "catch_up",
        "POST /v1/nodes/{node_id}/catch-up",
        node="node_id",
        mcp="catch_up",
        text="catch_up_text",
        names={"mcp": _AGENT},
        omits={"mcp": {"since": "the tool reads from the node's cursor", "limit": "fixed"}},
        fixed={"mcp": {"limit": 50}},
    ),
    Operation("record_metrics", "POST /v1/nodes/{node_id}/metrics", short=True, node="node_id"),
    Operation("metrics_series", "GET /v1/nodes/{node_id}/metrics"),
    # --- tasks ------------------------------------------------------------------------
    Operation(
        "add_task",
        "POST /v1/tasks",
        short=True,
        status=201,
        mcp="add_task",
        text="added_text",
        cli="task add",
        omits={"mcp": {"max_attempts": "the cluster's default applies"}},
    ),
    Operation("add_tasks", "POST /v1/tasks/batch", status=201),
    Operation(
        "list_tasks",
        "GET /v1/tasks",
        cli="task list",
    ),
    Operation("get_task", "GET /v1/tasks/{task_id}", short=True, cli="task show"),
    Operation(
        "claim_best_task",
        "POST /v1/nodes/{node_id}/claim",
        short=True,
        exception="waiting_claim",
        node="node_id",
        mcp="claim_best_task",
        text="claimed_text",
        cli="task claim",
        names={"mcp": _AGENT},
        omits={
            "mcp": {"wait": "a tool call must not block"},
            "cli": {"wait": "a command answers at once"},
        },
        adds={"http": {"idempotency_key": _KEY}},
    ),
    Operation(
        "complete_task",
        "POST /v1/tasks/{task_id}/complete",
        short=True,
        node="node_id",
        mcp="complete_task",
        text="completed_text",
        cli="task complete",
        names={"mcp": _AGENT},
    ),
    Operation(
        "complete_and_claim",
        "POST /v1/tasks/{task_id}/complete-and-claim",
        short=True,
        exception="keyed_claim",
        node="node_id",
        adds={"http": {"idempotency_key": _KEY}},
    ),
    Operation(
        "fail_task",
        "POST /v1/tasks/{task_id}/fail",
        short=True,
        node="node_id",
        mcp="fail_task",
        text="failed_text",
        cli="task fail",
        names={"mcp": _AGENT, "cli": {"retry": "no_retry"}},
    ),
    # --- the operator's hands on the work ------------------------------------------------
    Operation(
        "cancel_task",
        "POST /v1/tasks/{task_id}/cancel",
        caller="operator",
        mcp="cancel_task",
        text="cancelled_text",
        cli="task cancel",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "requeue_task",
        "POST /v1/tasks/{task_id}/requeue",
        caller="operator",
        mcp="requeue_task",
        text="requeued_text",
        cli="task requeue",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "cancel_tasks",
        "POST /v1/tasks/cancel",
        caller="operator",
        mcp="cancel_tasks",
        text=".text",
        cli="task cancel-matching",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "requeue_tasks",
        "POST /v1/tasks/requeue",
        caller="operator",
        mcp="requeue_tasks",
        text=".text",
        cli="task requeue-matching",
        actor="actor",
        omits=_ACTOR,
    ),
    # --- views ------------------------------------------------------------------------
    Operation(
        "assess_workload", "POST /v1/assess", mcp="assess_workload", text=".text", cli="assess"
    ),
    Operation(
        "read_state",
        "GET /v1/state",
        mcp="read_state",
        text=".text",
        cli="status",
        names={"mcp": _AGENT},
        omits={"mcp": {"limit": "the tool shows the default board"}},
    ),
    Operation("read_state_text", "GET /v1/state/text", exception="text_answer"),
    Operation(
        "events",
        "GET /v1/events",
        tag="events",
        exception="event_stream",
        adds={"http": {"kind": "keep only these event kinds", "node": "only these nodes"}},
    ),
    Operation(
        "broadcast",
        "POST /v1/broadcast",
        short=True,
        node="node_id",
        mcp="broadcast",
        text="broadcast_text",
        names={"mcp": _AGENT},
    ),
    Operation(
        "alert",
        "POST /v1/alerts",
        short=True,
        node="node_id",
        adds={"http": {"data": "the free-form fields (keyword arguments in Python)"}},
    ),
    Operation("stats", "GET /v1/stats"),
    # --- supervised processes (corral supervise; a supervisor uses the operator token)
    Operation("report_processes", "PUT /v1/processes", caller="operator"),
    Operation("list_processes", "GET /v1/processes", caller="operator", cli="process list"),
    Operation(
        "request_process_action",
        "POST /v1/processes/actions",
        short=True,
        caller="operator",
        status=201,
        cli="process restart",
        actor="actor",
        omits={
            **_ACTOR,
            "cli": {
                "action": "the command's name: process start, stop or restart",
                **_ACTOR["cli"],
            },
        },
    ),
    Operation("process_actions", "GET /v1/processes/actions", caller="operator"),
    Operation("ack_process_action", "POST /v1/processes/acks", short=True, caller="operator"),
    # --- workflow runs (corral.workflows; hosts use the operator token) ----------------
    Operation(
        "run_workflow",
        "POST /v1/workflows/{workflow}/runs",
        short=True,
        status=201,
        answer="handler_id",
        mcp="run_workflow",
        text="started_text",
        cli="workflows run",
        adds={
            "http": {"kwargs": "the start event's fields (keyword arguments in Python)"},
            "mcp": {"start": "the start event's fields (keyword arguments in Python)"},
        },
    ),
    Operation(
        "list_handlers",
        "GET /v1/handlers",
        mcp="list_idle_workflows",
        text="handlers_text",
        cli="workflows list",
        omits={
            "mcp": {
                "idle": "the tool lists idle runs only",
                "status": "likewise: resident (running) ones",
                "limit": "the tool shows at most 50",
            }
        },
        fixed={"mcp": {"idle": True, "status": "running", "limit": 50}},
    ),
    Operation(
        "get_handler",
        "GET /v1/handlers/{handler_id}",
        short=True,
        mcp="get_workflow_run",
        text="handler_text",
        cli="workflows show",
    ),
    Operation(
        "send_event",
        "POST /v1/handlers/{handler_id}/events",
        short=True,
        mcp="send_workflow_event",
        text="handler_text",
        cli="workflows send",
    ),
    Operation("serve_workflows", "PUT /v1/workflow-hosts/{host}", caller="operator"),
    Operation("take_workflow_work", "POST /v1/workflow-hosts/{host}/work", caller="operator"),
    Operation(
        "report_handler", "POST /v1/handlers/{handler_id}/report", short=True, caller="operator"
    ),
    Operation(
        "report_steps", "POST /v1/handlers/{handler_id}/steps", short=True, caller="operator"
    ),
    Operation("release_handler", "POST /v1/handlers/{handler_id}/release", caller="operator"),
    # the operator's hands on runs (the dashboard's Workflows panel: Release, Resume)
    Operation(
        "release_workflow",
        "POST /v1/handlers/{handler_id}/release-request",
        short=True,
        caller="operator",
        mcp="release_workflow_run",
        text="handler_text",
        cli="workflows release",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "resume_workflow",
        "POST /v1/handlers/{handler_id}/resume",
        short=True,
        caller="operator",
        mcp="resume_workflow_run",
        text="handler_text",
        cli="workflows resume",
        actor="actor",
        omits=_ACTOR,
    ),
    # --- the activation scheduler (corral.scheduler) ------------------------------------
    Operation(
        "add_agent",
        "POST /v1/agents",
        short=True,
        caller="operator",
        status=201,
        cli="agents add",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation("list_agents", "GET /v1/agents", cli="agents list"),
    Operation("get_agent", "GET /v1/agents/{agent_id}", short=True, cli="agents show"),
    Operation(
        "notify",
        "POST /v1/agents/{agent_id}/inbox",
        short=True,
        status=201,
        mcp="notify",
        text="notified_text",
        names={"mcp": {"agent_id": "recipient"}},
        cli="notify",
    ),
    Operation(
        "read_inbox",
        "POST /v1/agents/{agent_id}/inbox/read",
        mcp="read_inbox",
        text="inbox_text",
        names={"mcp": {"agent_id": "recipient"}},
        cli="agents inbox",
    ),
    Operation(
        "get_assignment",
        "POST /v1/runners/{runner_id}/assignment",
        short=True,
        node="runner_id",
        answer="assignment",
        mcp="get_assignment",
        text="assignment_text",
        names={"mcp": {"runner_id": "agent_id"}},
    ),
    Operation(
        "release_assignment",
        "POST /v1/assignments/{assignment_id}/release",
        short=True,
        node="runner_id",
        mcp="release_assignment",
        text="released_text",
        names={"mcp": {"runner_id": "agent_id"}},
    ),
    Operation("list_assignments", "GET /v1/assignments", cli="assignments"),
    # --- spawn requests (corral up's pools in ask mode; a manager agent decides) -------
    Operation(
        "request_spawn", "POST /v1/spawn-requests", short=True, caller="operator", status=201
    ),
    Operation(
        "spawn_requests",
        "GET /v1/spawn-requests",
        mcp="spawn_requests",
        text="spawn_requests_text",
    ),
    Operation(
        "accept_spawn_request",
        "POST /v1/spawn-requests/{request_id}/accept",
        short=True,
        node="actor",
        mcp="accept_spawn_request",
        text=".text",
        names={"mcp": {"actor": "agent_id"}},
    ),
    Operation(
        "decline_spawn_request",
        "POST /v1/spawn-requests/{request_id}/decline",
        short=True,
        node="actor",
        mcp="decline_spawn_request",
        text=".text",
        names={"mcp": {"actor": "agent_id"}},
    ),
    Operation(
        "withdraw_spawn_request",
        "POST /v1/spawn-requests/{request_id}/withdraw",
        caller="operator",
    ),
    Operation(
        "fulfil_spawn_request", "POST /v1/spawn-requests/{request_id}/fulfil", caller="operator"
    ),
    # --- named tokens (corral.tokens; corral token create|list|revoke) ------------------
    Operation(
        "create_token",
        "POST /v1/tokens",
        caller="operator",
        status=201,
        mcp="create_token",
        text=".text",
        cli="token create",
        tag="tokens",
        actor="actor",
        omits=_ACTOR,
    ),
    Operation(
        "list_tokens",
        "GET /v1/tokens",
        caller="operator",
        mcp="list_tokens",
        text="tokens_text",
        cli="token list",
        tag="tokens",
    ),
    Operation(
        "revoke_token",
        "POST /v1/tokens/{name}/revoke",
        caller="operator",
        mcp="revoke_token",
        text=".text",
        cli="token revoke",
        tag="tokens",
        actor="actor",
        omits=_ACTOR,
    ),
    # --- progress (stuck tasks; docs/guardrails.md) ----------------------------------------
    Operation(
        "report_progress",
        "POST /v1/tasks/{task_id}/progress",
        short=True,
        node="node_id",
        mcp="report_progress",
        text="progress_text",
        names={"mcp": _AGENT},
    ),
    # --- usage and spend (docs/guardrails.md) ----------------------------------------------
    Operation("usage", "GET /v1/usage", short=True, mcp="usage", text=".text", cli="usage"),
)

_BY_NAME = {op.name: op for op in OPERATIONS}
_INDEXED = OPERATIONS  # the table _BY_NAME was built from


def operation(name: str) -> Operation:
    """The operation called ``name`` (``KeyError`` when there is none), in the
    registry as it is now (an entry added at run time is found too)."""
    global _BY_NAME, _INDEXED
    if _INDEXED is not OPERATIONS:
        _BY_NAME, _INDEXED = {op.name: op for op in OPERATIONS}, OPERATIONS
    return _BY_NAME[name]


def markdown_table() -> str:
    """The registry as the table in docs/operations.md."""
    rows = [
        "| operation | HTTP | caller | MCP tool | CLI | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for op in OPERATIONS:
        caller = {"public": "anyone", "any": "operator or the node", "operator": "operator"}[
            op.caller
        ]
        if op.caller == "any" and op.node is None:
            caller = "operator or any node"
        mcp = f"`{op.mcp}`" if op.mcp else "-"
        cli = f"`corral {op.cli}`" if op.cli else "-"
        summary = op.summary.replace("|", "\\|")
        rows.append(f"| `{op.name}` | `{op.route}` | {caller} | {mcp} | {cli} | {summary} |")
    return "\n".join(rows)


def control_table() -> str:
    """The supervisor's control commands (``corral ctl``; the control socket) as the
    table in docs/operations.md. They are declared in
    ``corral.supervisor.commands``, one handler each, its docstring the help: the same
    registry pattern for the one surface that is local to a host."""
    from corral.supervisor.commands import CLIENT_COMMANDS, COMMANDS

    rows = ["| command | arguments | supervisor method | what it does |", "|---|---|---|---|"]
    for c in COMMANDS:
        args = ", ".join(a.name if a.required else f"{a.name}={a.default!r}" for a in c.args)
        summary = c.summary.replace("|", "\\|")
        rows.append(f"| `corral ctl {c.name}` | {args or '-'} | `{c.method}` | {summary} |")
    for name, what in CLIENT_COMMANDS.items():
        rows.append(f"| `corral ctl {name}` | see `--help` | - (the CLI itself) | {what} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
    print()
    print(control_table())
