"""corral's MCP server: the cluster's tools and two protocol prompts over a client.

Thin on purpose: each tool parses its arguments, makes one call on the client (a
``corral.Cluster`` or anything with its methods) and renders the answer as text. A
refusal is an answer that starts with ``ERROR:`` (never a protocol error), and
nothing is changed by it.

Most tools are made from their operation (``_generic_tool``): the ``Cluster``
method's parameters under the operation's MCP names, each one's schema its rule's, its
summary as the description, the answer rendered as the operation's ``text`` says.
Written here are only the tools that are not one method call with its parameters:
``register_node`` (an agent names its model), ``heartbeat`` (the payload's fields),
``assess_workload`` (an unknown caller is refused), ``catch_up`` (the events, then the
board), ``broadcast`` (sent as the caller), ``list_idle_workflows``, ``run_workflow``
(``start`` as keyword arguments) and ``spawn_requests``; and the scheduler's
``release_assignment`` (``corral.scheduler.mcp``).

Arguments are strict (``corral.mcp.strict``): before a tool runs, its arguments must
fit its published input schema with the JSON types taken literally (an integer is not
a boolean, a string or a float) and name no argument the schema does not; anything
else is an ``ERROR:`` answer naming the argument. The rule lives in ``_CorralMCP``
and reads each tool's own schema, however the tool was registered.

Every tool that names an agent counts as that agent's heartbeat: the operations that
change a node already push its deadline out; the views (``read_state``,
``assess_workload``, ``add_task``) take an optional ``agent_id`` and touch it.

A transport that authenticates its caller as one node (``corral serve``'s ``/mcp``
with a node token) sets ``CALLER`` for the call: the tools then act only as that
node (an ``agent_id`` naming another is refused; ``broadcast`` is sent as it).
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any, cast

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, Icon, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

import corral
from corral import operations
from corral.errors import CorralError, NotFoundError
from corral.mcp import roles, strict, text
from corral.mcp.prompts import manager_protocol, worker_protocol
from corral.operations import operation
from corral.server.auth import PRINCIPAL
from corral.types import Client

__all__ = ["CALLER", "INSTRUCTIONS", "build_server"]

log = logging.getLogger("corral.mcp")

INSTRUCTIONS = (
    "corral coordinates a fleet of agents: a task board with leases, a capped set of "
    "nodes, and a workload assessment. Follow the worker_protocol prompt (workers) or "
    "the manager_protocol prompt (the bootstrap manager). Every call that names your "
    "agent_id counts as your heartbeat. Answers starting with ERROR: changed nothing "
    "and say what to do next."
)

# The node the transport authenticated the caller as; None: no restriction (the
# operator's token, or stdio, where the client already holds the store or a token).
CALLER: ContextVar[str | None] = ContextVar("corral_mcp_caller", default=None)

AgentId = Annotated[str, Field(description="Your node id, e.g. Node-X9J2.")]
OptAgentId = Annotated[
    str | None, Field(description="Your node id; the call then counts as your heartbeat.")
]


def _text(answer: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=answer)])


def _error(answer: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=answer)], is_error=True)


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        out.append(f"{where}: {err['msg']}")
    return sorted(set(out))


class _CorralMCP(MCPServer[Any]):
    """MCPServer whose tools take strict arguments (their schema, closed, with exact
    JSON types) and whose argument-validation failures and crashes are ``ERROR:``
    answers."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        super().add_tool(
            fn,
            name=name,
            title=title,
            description=description,
            annotations=annotations,
            icons=icons,
            meta=meta,
            structured_output=structured_output,
        )
        tool = self._tool_manager.get_tool(name or fn.__name__)
        if tool is not None:  # clients see that no other argument is taken
            strict.close(tool.parameters)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        refused = roles.refusal(name, arguments)  # a viewer token reads only
        if refused is not None:
            return _error(refused)
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            problems = strict.problems(tool.parameters, arguments)
            if problems:
                return _error(text.invalid_arguments_text(name, problems))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return _error(text.invalid_arguments_text(name, _problems(exc.__cause__)))
            if self._tool_manager.get_tool(name) is None:
                return _error(f"ERROR: unknown tool {name!r}. List the tools and call one of them.")
            log.error("tool %s crashed", name, exc_info=exc.__cause__ or exc)
            return _error(
                f"ERROR: {name} failed inside corral (logged on the server). "
                "Check with read_state whether it took effect before you retry."
            )


def _render(name: str) -> Callable[..., str]:
    """How operation ``name``'s tool renders its answer (``corral.operations``)."""
    return _renderer(name, operation(name).text)


def _renderer(name: str, how: str | None) -> Callable[..., str]:
    if how is None:  # pragma: no cover - test_surfaces checks every tool has one
        raise LookupError(f"operation {name} declares no text rendering")
    if how == ".text":
        return lambda result: str(result.text)
    render: Callable[..., str] = getattr(text, how)
    return render


def register_scheduler_tools(tool: Any, client: Client, touch: Any) -> None:
    from corral.scheduler.mcp import register_tools

    register_tools(tool, client, touch)


def build_server(client: Client, *, name: str = "corral") -> MCPServer[Any]:
    """An ``MCPServer`` with corral's tools and prompts over ``client``.

    ``client`` is a ``corral.Cluster`` or any client with its methods (the remote
    HTTP client too); its ``touch`` is used when it has one.
    """
    # The SDK configures the root logger when none is set up; a library must not (the
    # CLI and the server render logs), so whatever it added is taken back.
    root, handlers, level = logging.getLogger(), list(logging.root.handlers), logging.root.level
    mcp = _CorralMCP(name, instructions=INSTRUCTIONS, version=corral.__version__)
    root.handlers[:] = handlers
    root.setLevel(level)

    def tool(
        description: str, *, as_caller: bool = False
    ) -> Callable[[Callable[..., str]], Callable[..., Any]]:
        """Register ``fn`` as a tool; with ``as_caller``, an ``agent_id`` left out is
        the authenticated caller (the operation's node, as ``/v1`` fills it in)."""

        def register(fn: Callable[..., str]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def run(**kwargs: Any) -> CallToolResult:
                caller = CALLER.get()
                if caller is not None:
                    agent_id = kwargs.get("agent_id")
                    if agent_id is None and as_caller:
                        kwargs["agent_id"] = caller  # sent as the caller, like /v1
                    elif agent_id is not None and agent_id != caller:
                        return _error(
                            f"ERROR: this token acts only as node {caller}, not "
                            f"{str(agent_id)[:64]!r}. Call {fn.__name__} with "
                            f"agent_id={caller!r}."
                        )
                try:
                    return _text(fn(**kwargs))
                except CorralError as exc:
                    return _error(text.error_text(exc))

            mcp.add_tool(run, name=fn.__name__, description=description, structured_output=False)
            return fn

        return register

    def touch(agent_id: str | None) -> None:
        if agent_id is not None:
            fn = getattr(client, "touch", None)
            if fn is not None:
                fn(agent_id)

    def caller(agent_id: str | None) -> None:
        """``touch``, and refuse a caller that is no live node (an unknown
        ``agent_id`` was accepted silently)."""
        if agent_id is None:
            return
        fn = getattr(client, "touch", None)
        if fn is None:
            client.get_node(agent_id)  # NotFoundError for an unknown node
        elif not fn(agent_id):
            raise NotFoundError(f"no live node {agent_id} (unknown or terminated)", field="node_id")

    # --- nodes ------------------------------------------------------------------------
    @tool(
        "Join the cluster as agent_id in a role. strength is derived from model_name when "
        "omitted. Refused at capacity, except for a bootstrap_manager."
    )
    def register_node(
        agent_id: AgentId,
        role: Annotated[str, Field(description="bootstrap_manager, runner, architect, developer.")],
        model_name: Annotated[str, Field(description="Your model, e.g. claude-sonnet-4-5.")],
        strength: Annotated[str | None, Field(description="high, medium or low.")] = None,
        heartbeat_interval: Annotated[
            float | None, Field(description="Seconds between your heartbeats (optional).")
        ] = None,
    ) -> str:
        return _render("register_node")(
            client.register_node(agent_id, role, model_name, strength, heartbeat_interval)
        )

    @tool("Proof of life; also renews the leases of the tasks you hold.")
    def heartbeat(
        agent_id: AgentId,
        health_status: Annotated[
            str | None, Field(description="healthy, degraded or unhealthy.")
        ] = None,
        current_tasks: Annotated[
            list[int | str] | None, Field(description="Ids of the tasks you work on.")
        ] = None,
        capacity_available: Annotated[
            int | None, Field(description="How many more tasks you could take.")
        ] = None,
        metrics: Annotated[
            dict[str, Any] | None, Field(description="e.g. cpu_usage, memory_usage (0-100).")
        ] = None,
    ) -> str:
        payload = {
            k: v
            for k, v in (
                ("health_status", health_status),
                ("current_tasks", current_tasks),
                ("capacity_available", capacity_available),
                ("metrics", metrics),
            )
            if v is not None
        }
        return _render("heartbeat")(client.heartbeat(agent_id, **payload))

    # --- tasks ------------------------------------------------------------------------

    # --- views ------------------------------------------------------------------------
    @tool(
        "Assess the workload: active/idle agents, pending and in-progress tasks, status and "
        "spawn recommendation (recorded for read_state)."
    )
    def assess_workload(agent_id: OptAgentId = None) -> str:
        caller(agent_id)
        return _render("assess_workload")(client.assess_workload())

    @tool("Events since your last catch_up (broadcasts, tasks, claims), then the state.")
    def catch_up(agent_id: AgentId) -> str:
        limit = 50
        c = client.catch_up(agent_id, limit=limit)
        state = _render("read_state")(client.read_state(agent_id))
        return _render("catch_up")(agent_id, c, state, limit=limit)

    @tool("Send a message every node sees on its next catch_up.", as_caller=True)
    def broadcast(
        message: Annotated[str, Field(description="The message.")],
        agent_id: OptAgentId = None,
    ) -> str:
        return _render("broadcast")(client.broadcast(message, agent_id))

    # --- workflow runs ----------------------------------------------------------------
    @tool(
        "Workflow runs idle on their hosts (waiting only on an outside event), longest "
        "idle first, with what each waits for."
    )
    def list_idle_workflows(
        idle_duration_gt: Annotated[
            float | None, Field(description="Only runs idle for more than these seconds.")
        ] = None,
        workflow: Annotated[str | None, Field(description="Only this workflow's runs.")] = None,
        host: Annotated[str | None, Field(description="Only this host's runs.")] = None,
        agent_id: OptAgentId = None,
    ) -> str:
        touch(agent_id)
        found = client.list_handlers(
            "running", True, idle_duration_gt, workflow, host, limit=_IDLE_SHOWN
        )
        return _render("list_handlers")(found)

    @tool(
        "Start a run of a workflow that a live host serves; answers its handler id "
        "(follow it with get_workflow_run)."
    )
    def run_workflow(
        workflow: Annotated[str, Field(description="The workflow's name, as its host serves it.")],
        start: Annotated[
            dict[str, Any] | None, Field(description="The start event's fields.")
        ] = None,
        agent_id: OptAgentId = None,
    ) -> str:
        touch(agent_id)
        return _render("run_workflow")(client.run_workflow(workflow, **(start or {})))

    register_scheduler_tools(tool, client, touch)  # get_assignment ... read_inbox

    # --- spawn requests (corral up's pools in ask mode) ----------------------------
    @tool(
        "Spawn requests of the fleet's pools (pending ones wait for a yes or a no): "
        "one line each with its id, pool, role, status and who decided."
    )
    def spawn_requests(
        status: Annotated[str | None, Field(description="pending, accepted or declined.")] = None,
        pool: Annotated[str | None, Field(description="Only this pool's.")] = None,
        limit: Annotated[int, Field(description="At most this many.")] = 100,
    ) -> str:
        # The status is checked by the operation (an ERROR: answer naming it).
        return _render("spawn_requests")(client.spawn_requests(cast(Any, status), pool, limit))

    # --- the other tools: made from their operations (``_generic_tool``) ----------------
    written = {t.name for t in mcp._tool_manager.list_tools()}
    for op in operations.OPERATIONS:
        if op.mcp is not None and op.mcp not in written:
            _generic_tool(tool, client, touch, op)

    # --- prompts ----------------------------------------------------------------------
    @mcp.prompt(
        name="worker_protocol",
        description="The worker's loop: register, catch up, claim, heartbeat, finish, and "
        "terminate itself once idle past the cluster's idle timeout.",
    )
    def worker(agent_id: str = "", role: str = "developer", model_name: str = "") -> str:
        return worker_protocol(
            client.settings(), agent_id or _new_id(), role, model_name or "<your model name>"
        )

    @mcp.prompt(
        name="manager_protocol",
        description="The bootstrap manager's loop: assess every 20-30 s, ask the user to "
        "spawn nodes, let idle ones retire, never exceed max_agents, never terminate itself.",
    )
    def manager(agent_id: str = "", model_name: str = "") -> str:
        return manager_protocol(
            client.settings(), agent_id or _new_id("BM-"), model_name or "<your model name>"
        )

    _ = (worker, manager)
    return mcp


def _generic_tool(tool: Any, client: Client, touch: Callable[[str | None], None], op: Any) -> None:
    """The tool of an operation that declares one (``Operation.mcp``) and has none
    written above: its ``Cluster`` method's parameters (renamed and left out as the
    operation says for ``mcp``; each one's schema its rule's), its summary as its
    description, its answer rendered as the operation declares (``Operation.text``).
    The caller's ``agent_id`` (a parameter of its own when the method names no node
    so) counts the call as that agent's heartbeat."""
    from corral.signatures import method_types

    types = method_types(op, extras=True)  # a parameter's rule is its schema
    rename = dict(op.names.get("mcp", {}))
    omit = op.omits.get("mcp", {})
    params: list[inspect.Parameter] = []
    back: dict[str, str] = {}
    for p in inspect.signature(getattr(corral.Cluster, op.name)).parameters.values():
        if p.name == "self" or p.name in omit or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        name = rename.get(p.name, p.name)
        back[name] = p.name
        default = inspect.Parameter.empty if p.default is p.empty else p.default
        annotation = types.get(p.name, Any)
        params.append(
            inspect.Parameter(name, p.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    heartbeat = "agent_id" not in back
    if heartbeat:
        params.append(
            inspect.Parameter(
                "agent_id", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=OptAgentId
            )
        )
    render = _renderer(op.name, op.text)
    call = getattr(client, op.name, None)

    view = op.method == "GET"

    def run(**kwargs: Any) -> str:
        # The caller's heartbeat: before a view (which then shows it), after a change
        # (a refused one changes nothing).
        agent_id = kwargs.pop("agent_id", None) if heartbeat else kwargs.get("agent_id")
        if view:
            touch(agent_id)
        assert call is not None, f"the client has no {op.name}"
        args = {back[k]: v for k, v in kwargs.items()}
        principal = PRINCIPAL.get()
        if op.actor is not None and principal is not None:  # who did it: the token
            args[op.actor] = principal.actor
        answer = render(call(**args))
        if not view:
            touch(agent_id)
        return answer

    run.__name__ = op.mcp
    run.__qualname__ = op.mcp
    run.__doc__ = op.summary
    run.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool(op.summary)(run)


_IDLE_SHOWN = 50  # the idle runs list_idle_workflows shows at most


def _new_id(prefix: str = "") -> str:
    return f"Node-{prefix}{secrets.token_hex(2).upper()}"
