"""corral's MCP server: the cluster's tools and two protocol prompts over a client.

Thin on purpose: each tool parses its arguments, makes one call on the client (a
``corral.Cluster`` or anything with its methods) and renders the answer as text. A
refusal is an answer that starts with ``ERROR:`` (never a protocol error), and
nothing is changed by it.

The tools are made from their operations (``_tool``): the ``Cluster`` method's
parameters under the operation's MCP names (left out, fixed and required as it
says), each one's schema its rule's and described by it, its summary as the
description, the answer rendered as the operation's ``text`` says. Written here is
only ``catch_up``, whose answer is the events and then the board.

Arguments are strict (``corral.mcp.strict``): before a tool runs, its arguments must
fit its published input schema with the JSON types taken literally (an integer is not
a boolean, a string or a float) and name no argument the schema does not; anything
else is an ``ERROR:`` answer naming the argument. The rule lives in ``_CorralMCP``
and reads each tool's own schema, however the tool was registered.

Every tool that names an agent counts as that agent's heartbeat: the operations that
change a node already push its deadline out; the others take an optional
``agent_id``, touched before the call (an unknown one is refused).

A transport that authenticates its caller as one node (``corral serve``'s ``/mcp``
with a node token) sets ``CALLER`` for the call: the tools then act only as that
node (an ``agent_id`` naming another is refused; an operation's node left out is it).
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, Icon, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

import corral
from corral import operations
from corral.errors import CorralError, NotFoundError
from corral.mcp import roles, strict, text
from corral.mcp.prompts import manager_protocol, worker_protocol
from corral.operations import Operation, operation
from corral.server.auth import PRINCIPAL
from corral.types import Client
from corral.validation import rule_of

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


def _renderer(op: Operation) -> Callable[..., str]:
    """How ``op``'s tool renders its answer (``Operation.text``)."""
    if op.text is None:  # pragma: no cover - test_surfaces checks every tool has one
        raise LookupError(f"operation {op.name} declares no text rendering")
    if op.text == ".text":
        return lambda result: str(result.text)
    render: Callable[..., str] = getattr(text, op.text)
    return render


def _described(annotation: Any, what: str | None) -> Any:
    return annotation if not what else Annotated[annotation, Field(description=what)]


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

    def caller(agent_id: str | None, *, refuse: bool) -> None:
        """Count the call as ``agent_id``'s heartbeat; with ``refuse``, refuse a
        caller that is no live node."""
        if agent_id is None:
            return
        fn = getattr(client, "touch", None)
        if fn is None:
            if refuse:
                client.get_node(agent_id)  # NotFoundError for an unknown node
        elif not fn(agent_id) and refuse:
            raise NotFoundError(f"no live node {agent_id} (unknown or terminated)", field="node_id")

    # --- catch_up: its answer is the events, then the board (a composite) -------------
    @tool(operation("catch_up").summary)
    def catch_up(
        agent_id: Annotated[str, Field(description=_CALLER_ID)],
    ) -> str:
        limit = _fixed(operation("catch_up"))["limit"]
        c = client.catch_up(agent_id, limit=limit)
        state = _renderer(operation("read_state"))(client.read_state(agent_id))
        return text.catch_up_text(agent_id, c, state, limit=limit)

    # --- every other tool: made from its operation --------------------------------------
    for op in operations.OPERATIONS:
        if op.mcp is not None and op.mcp != "catch_up":
            _tool(tool, client, caller, op)

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

    _ = (worker, manager, catch_up)
    return mcp


_CALLER_ID = "Your node id, e.g. Node-X9J2; the call counts as your heartbeat."


def _fixed(op: Operation) -> dict[str, Any]:
    return dict(op.fixed.get("mcp", {}))


def _tool(tool: Any, client: Client, caller: Callable[..., None], op: Operation) -> None:
    """The tool of ``op``: its ``Cluster`` method's parameters (renamed, left out and
    fixed as the operation says for ``mcp``; each one's schema its rule's, described
    by its rule), a ``**kwargs`` parameter's fields (its model's, ``KWARGS``, or one
    object argument the operation adds), its summary as its description, its answer
    rendered as the operation declares (``Operation.text``). The caller's
    ``agent_id`` (an argument of its own when the method names no node so) counts the
    call as that agent's heartbeat: an unknown one is refused."""
    from corral.server.models import KWARGS
    from corral.signatures import method_types

    hints = method_types(op, extras=True)  # a parameter's rule is its schema
    rename, omit = op.names.get("mcp", {}), op.omits.get("mcp", {})
    adds, fixed = op.adds.get("mcp", {}), _fixed(op)
    params: list[inspect.Parameter] = []
    back: dict[str, str] = {}  # the tool's argument: the method's parameter
    positional: list[str] = []
    spread: str | None = None  # the argument whose object is the **kwargs
    fields: tuple[str, ...] = ()  # the **kwargs model's fields, as arguments
    keyword = inspect.Parameter.KEYWORD_ONLY
    for p in inspect.signature(getattr(corral.Cluster, op.name)).parameters.values():
        if p.name in ("self", op.actor) or p.name in omit or p.kind is p.VAR_POSITIONAL:
            continue
        if p.kind is p.VAR_KEYWORD:
            model = KWARGS.get(p.name)
            if model is not None:
                fields = tuple(model.model_fields)
                for n, f in model.model_fields.items():
                    hint = Annotated[f.annotation, *f.metadata] if f.metadata else f.annotation
                    hint = _described(hint, f.description)
                    params.append(inspect.Parameter(n, keyword, default=None, annotation=hint))
            for n, said in adds.items():
                spread = n
                hint = _described(dict[str, Any] | None, said)
                params.append(inspect.Parameter(n, keyword, default=None, annotation=hint))
            continue
        name = rename.get(p.name, p.name)
        back[name] = p.name
        if p.kind is p.POSITIONAL_ONLY:
            positional.append(name)
        rule, _ = rule_of(hints.get(p.name))
        what = _CALLER_ID if name == "agent_id" else rule.doc if rule else None
        needed = p.default is p.empty or p.name in op.requires.get("mcp", ())
        default = inspect.Parameter.empty if needed else p.default
        hint = _described(hints.get(p.name, Any), what)
        params.append(inspect.Parameter(name, keyword, default=default, annotation=hint))
    added = "agent_id" not in back  # the caller, named by no parameter of the method
    if added:
        hint = _described(str | None, _CALLER_ID)
        params.append(inspect.Parameter("agent_id", keyword, default=None, annotation=hint))
    render = _renderer(op)

    view = op.method == "GET"

    def run(**kwargs: Any) -> str:
        # The caller's heartbeat: before the call when the method names no agent (an
        # unknown one is refused) or only reads; after a change, else (a refused
        # change changes nothing).
        agent_id = kwargs.pop("agent_id", None) if added else kwargs.get("agent_id")
        if added or view:
            caller(agent_id, refuse=added)
        args = {back[k]: v for k, v in kwargs.items() if k in back}
        first = [args.pop(back[n]) for n in positional]
        args.update(fixed)
        if spread is not None:
            args.update(kwargs.get(spread) or {})
        args.update({n: kwargs[n] for n in fields if kwargs.get(n) is not None})
        principal = PRINCIPAL.get()
        if op.actor is not None and principal is not None:  # who did it: the token
            args[op.actor] = principal.actor
        elif op.node == "actor" and args.get("actor") is None and principal is not None:
            # an operator's own decision names its token (a node's names the node)
            args["actor"] = principal.actor if principal.is_operator else None
        answer = render(getattr(client, op.name)(*first, **args))
        if not (added or view):
            caller(agent_id, refuse=False)
        return answer

    assert op.mcp is not None
    run.__name__ = run.__qualname__ = op.mcp
    run.__doc__ = op.summary
    run.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool(op.summary, as_caller=op.node is not None and rename.get(op.node) == "agent_id")(run)


def _new_id(prefix: str = "") -> str:
    return f"Node-{prefix}{secrets.token_hex(2).upper()}"
