"""One handler per operation of the service, and the table that routes to them.

A handler is a plain synchronous function: it checks that the caller may act as the
node it names, calls ``Cluster`` once, and returns JSON-ready data (plain data or
``corral.model`` records, which serialize field for field as their ``to_dict()``). Short ones run on
the event loop, the others in a worker thread (one hop per operation; see
``corral.server.dispatch``). The table drives the app, the auth and the OpenAPI
document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from corral import operations
from corral.operations import OPERATIONS, Operation
from corral.render import claim_text
from corral.scheduler import http as scheduler_http
from corral.server import models as m
from corral.server import workflows as wf
from corral.server.auth import Principal, Tokens
from corral.server.errors import ApiError
from corral.server.generic import Generic
from corral.validation import check_id, check_payload, check_task_id

if TYPE_CHECKING:
    from corral.cluster import Cluster

__all__ = ["OPS", "Call", "Op"]


@dataclass(slots=True)
class Call:
    """Everything a handler sees."""

    cluster: Cluster
    principal: Principal
    tokens: Tokens
    path: dict[str, Any]
    query: Any = None
    body: Any = None

    def act_as(self, node_id: Any) -> None:
        """Refuse (403) unless the caller is the operator or the node ``node_id``."""
        if not self.principal.may_act_as(node_id):
            raise ApiError(
                403,
                "forbidden",
                f"this token acts only as node {self.principal.node_id}, not {node_id}",
                "node_id",
            )


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    method: str
    path: str  # Starlette template (``{node_id:path}``)
    handler: Callable[[Call], Any]
    summary: str
    response: type[BaseModel] | None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    status: int = 200
    scope: str = "any"  # "public", "any" (operator or node token) or "operator"
    writes: bool = True
    tag: str = "cluster"
    # One bounded transaction (a single row or a node's own rows), preceded at most
    # by reads: may run on the event loop under the store's ``nowait`` and be re-run
    # on a thread when that raises ``WouldBlock`` (corral.server.dispatch).
    short: bool = False
    # What an operation with the generic handler answers: its method's return type.
    returns: Any = None
    # The operation's protocol exception (``corral.operations.Exception_``), if any.
    exception: str | None = None


ConfigureIn = m.settings_model(
    "ConfigureIn", changes=True, doc="Settings to change; every field is optional."
)


def _with_text(obj: Any) -> dict[str, Any]:
    d: dict[str, Any] = obj.to_dict()
    d["text"] = obj.text
    return d


# --- handlers ---------------------------------------------------------------------------


def register_node(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    r = c.cluster.register_node(
        b.node_id, b.role, b.model, b.strength, b.heartbeat_interval, host=b.host, pid=b.pid
    )
    d = _with_text(r)
    d["token"] = c.tokens.node_token(r.id)
    return d


def heartbeat(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    payload = c.body.model_dump(exclude_unset=True)
    if "node_id" in payload:
        raise ApiError(422, "invalid_input", "the node id goes in the path", "node_id")
    return c.cluster.heartbeat(node_id, **payload)


def claim(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    role = c.body.role if c.body is not None and c.body.role is not None else None
    if role is None:
        role = c.cluster.get_node(node_id).role
    key = c.body.idempotency_key if c.body is not None else None
    if key is not None and not c.body.wait:  # (a waiting claim's tries come with wait 0)
        # Keyed: the store keeps the key in the claim's transaction, and a claim sent
        # again with it returns what the first one took (corral.outage).
        task = c.cluster.store.claim(
            node_id, check_id(role, "role"), c.cluster.clock.now(), key=key
        )
    else:
        task = c.cluster.claim_best_task(node_id, role, wait=c.body.wait if c.body else 0)
    return {"task": task, "text": claim_text(task)}


def complete_and_claim(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    if b.idempotency_key is None:
        done, nxt = c.cluster.complete_and_claim(
            c.path["task_id"], b.node_id, b.role, epoch=b.epoch, result=b.result
        )
    else:  # keyed as claim's
        if b.result is not None:
            check_payload(b.result, "result")
        task_id = check_task_id(c.path["task_id"])
        cluster = c.cluster
        done, nxt = cluster.store.complete_and_claim(
            task_id,
            b.node_id,
            b.epoch,
            b.result,
            check_id(b.role, "role"),
            cluster.clock.now(),
            key=b.idempotency_key,
        )
    return {"done": done, "next": nxt, "text": claim_text(nxt)}


def assess(c: Call) -> Any:
    return _with_text(c.cluster.assess_workload())


def read_state(c: Call) -> Any:
    return _with_text(c.cluster.read_state(c.query.node_id, limit=c.query.limit))


def events(c: Call) -> Any:
    q = c.query
    kinds = set(q.kind.split(",")) if q.kind else None
    nodes = set(q.node.split(",")) if q.node else None
    out = c.cluster.events(q.since, q.limit)
    return [
        e.to_dict()
        for e in out
        if (kinds is None or e.kind in kinds) and (nodes is None or e.node_id in nodes)
    ]


def touch(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    return {"touched": c.cluster.touch(node_id)}


def alert(c: Call) -> Any:
    b = c.body
    node_id = b.node_id if b.node_id is not None else c.principal.node_id
    c.act_as(node_id)
    return c.cluster.alert(b.message, node_id, **b.data).to_dict()


@dataclass(frozen=True, slots=True)
class _Http:
    """How the server runs one operation of ``corral.operations``: a handler of its
    own, or None for the generic one (``corral.server.generic``) with these models."""

    handler: Callable[[Call], Any] | None
    response: type[BaseModel] | None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None


_HTTP: dict[str, _Http] = {
    "settings": _Http(None, m.SettingsOut),
    "configure": _Http(None, m.SettingsOut, body=ConfigureIn),
    "register_node": _Http(register_node, m.RegisteredOut, body=m.RegisterIn),
    "list_nodes": _Http(None, None, query=m.ListNodesQuery),
    "get_node": _Http(None, m.NodeOut),
    "set_agent_status": _Http(None, m.NodeOut, body=m.StatusIn),
    "heartbeat": _Http(heartbeat, m.NodeOut, body=m.HeartbeatIn),
    "touch": _Http(touch, m.TouchOut),
    "catch_up": _Http(None, m.CatchUpOut, body=m.CatchUpIn),
    "record_metrics": _Http(None, m.EventOut, body=m.SampleIn),
    "metrics_series": _Http(None, None, query=m.SeriesQuery),
    "add_task": _Http(None, m.TaskOut, body=m.AddTaskIn),
    "add_tasks": _Http(None, None, body=m.AddTasksIn),
    "list_tasks": _Http(None, None, query=m.ListTasksQuery),
    "get_task": _Http(None, m.TaskOut),
    "claim_best_task": _Http(claim, m.ClaimOut, body=m.ClaimIn),
    "complete_task": _Http(None, m.TaskOut, body=m.CompleteIn),
    "complete_and_claim": _Http(
        complete_and_claim, m.CompleteAndClaimOut, body=m.CompleteAndClaimIn
    ),
    "fail_task": _Http(None, m.TaskOut, body=m.FailIn),
    "assess_workload": _Http(assess, m.AssessmentOut),
    "read_state": _Http(read_state, m.StateOut, query=m.StateQuery),
    "read_state_text": _Http(None, None, query=m.StateQuery),
    "events": _Http(events, None, query=m.EventsQuery),
    "broadcast": _Http(None, m.EventOut, body=m.BroadcastIn),
    "alert": _Http(alert, m.EventOut, body=m.AlertIn),
    "stats": _Http(None, m.StatsOut),
    "report_processes": _Http(None, None, body=m.ReportProcessesIn),
    "request_process_action": _Http(None, m.EventOut, body=m.ProcessActionIn),
    "ack_process_action": _Http(None, m.EventOut, body=m.ProcessAckIn),
    # --- workflow runs (corral.server.workflows)
    "run_workflow": _Http(wf.run_workflow, wf.RunOut, body=wf.RunIn),
    "get_handler": _Http(None, wf.HandlerOut),
    "list_handlers": _Http(None, None, query=wf.ListHandlersQuery),
    "send_event": _Http(None, wf.HandlerOut, body=wf.SendEventIn),
    "serve_workflows": _Http(None, None, body=wf.ServeIn),
    "take_workflow_work": _Http(None, wf.WorkOut, body=wf.TakeWorkIn),
    "report_handler": _Http(None, wf.HandlerOut, body=wf.ReportIn),
    "report_steps": _Http(None, wf.HandlerOut, body=wf.StepsIn),
    "release_handler": _Http(None, wf.HandlerOut, body=wf.HandlerReleaseIn),
    "request_spawn": _Http(None, m.SpawnRequestOut, body=m.SpawnRequestIn),
    "accept_spawn_request": _Http(None, m.SpawnRequestOut, body=m.SpawnDecisionIn),
    "decline_spawn_request": _Http(None, m.SpawnRequestOut, body=m.SpawnDecisionIn),
}
# The activation scheduler's (corral.scheduler.http)
_HTTP.update({name: _Http(*spec) for name, spec in scheduler_http.ROUTES.items()})


def _starlette(path: str) -> str:
    # A node id may hold any character but "/": ``:path`` keeps "%2F" and dots intact.
    # A handler id, a workflow or a host may likewise hold dots and "%2F".
    for name in ("node_id", "agent_id", "runner_id", "handler_id", "workflow", "host"):
        path = path.replace(f"{{{name}}}", f"{{{name}:path}}")
    return path


def _generic(o: Operation) -> _Http:
    """An operation with no handler of its own: the one built from its ``Cluster``
    method (``corral.server.generic``)."""
    g = Generic(o)
    if o.method == "GET":
        return _Http(g, None, query=g.model)
    return _Http(g, None, body=g.model)


def _op(o: Operation) -> Op:
    h = _HTTP[o.name] if o.name in _HTTP else _generic(o)
    # None: the generic handler with the API's own request model
    handler = h.handler if h.handler is not None else Generic(o, h.body or h.query)
    return Op(
        o.name,
        o.method,
        _starlette(o.path),
        handler,
        o.summary,
        h.response,
        body=h.body,
        query=h.query,
        status=o.status,
        scope=o.caller,
        writes=o.method != "GET",
        tag=o.tag,
        short=o.short,
        returns=handler.returns if isinstance(handler, Generic) else None,
        exception=o.exception,
    )


if not set(_HTTP) <= {o.name for o in OPERATIONS}:  # pragma: no cover - a programming error
    raise RuntimeError(
        f"HTTP handlers of no operation: {set(_HTTP) - {o.name for o in OPERATIONS}}"
    )


def build_ops() -> tuple[Op, ...]:
    """The routes of the registry as it is now (``create_app`` builds its app from
    them, so an operation added to the registry at run time is served), deeper paths
    first: ``/v1/nodes/{node_id:path}`` would also match ``…/metrics``. Built once per
    registry: the handlers and their models are made here, not per request."""
    global OPS
    if _BUILT_FROM[0] is not operations.OPERATIONS:
        table = operations.OPERATIONS
        OPS = tuple(sorted((_op(o) for o in table), key=lambda op: -op.path.count("/")))
        _BUILT_FROM[0] = table
    return OPS


_BUILT_FROM: list[tuple[Operation, ...] | None] = [None]
OPS: tuple[Op, ...] = ()
OPS = build_ops()

# Responses that are lists (the table's ``response`` is None for them).
LIST_RESPONSES: dict[str, type[BaseModel]] = {
    "list_nodes": m.NodeOut,
    "add_tasks": m.TaskOut,
    "list_tasks": m.TaskOut,
    "events": m.EventOut,
    "metrics_series": m.EventOut,
    "report_processes": m.ProcessOut,
    "list_handlers": wf.HandlerOut,
    "serve_workflows": wf.WorkflowHostOut,
    **scheduler_http.LIST_RESPONSES,
}
