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
from typing import Any

from pydantic import BaseModel

from corral.render import claim_text
from corral.server import models as m
from corral.server.auth import Principal, Tokens
from corral.server.errors import ApiError

__all__ = ["OPS", "Call", "Op"]


@dataclass(slots=True)
class Call:
    """Everything a handler sees."""

    cluster: Any
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


ConfigureIn = m.settings_model(
    "ConfigureIn", changes=True, doc="Settings to change; every field is optional."
)


def _with_text(obj: Any) -> dict[str, Any]:
    d = obj.to_dict()
    d["text"] = obj.text
    return d


# --- handlers ---------------------------------------------------------------------------
def get_settings(c: Call) -> Any:
    return c.cluster.settings().to_dict()


def configure(c: Call) -> Any:
    return c.cluster.configure(**c.body.model_dump(exclude_unset=True)).to_dict()


def register_node(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    r = c.cluster.register_node(
        b.node_id, b.role, b.model, b.strength, b.heartbeat_interval, host=b.host, pid=b.pid
    )
    d = _with_text(r)
    d["token"] = c.tokens.node_token(r.id)
    return d


def list_nodes(c: Call) -> Any:
    return [n.to_dict() for n in c.cluster.list_nodes(status=c.query.status, role=c.query.role)]


def get_node(c: Call) -> Any:
    return c.cluster.get_node(c.path["node_id"])


def set_status(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    return c.cluster.set_agent_status(node_id, c.body.status, c.body.current_task_id)


def terminate_node(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    return c.cluster.terminate_node(node_id)


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
    task = c.cluster.claim_best_task(node_id, role, wait=c.body.wait if c.body else 0)
    return {"task": task, "text": claim_text(task)}


def catch_up(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    b = c.body or m.CatchUpIn()
    return c.cluster.catch_up(node_id, b.since, limit=b.limit).to_dict()


def add_task(c: Call) -> Any:
    b = c.body
    return c.cluster.add_task(
        b.title, b.description, b.priority, b.role, max_attempts=b.max_attempts
    )


def add_tasks(c: Call) -> Any:
    return [t.to_dict() for t in c.cluster.add_tasks(c.body.tasks)]


def list_tasks(c: Call) -> Any:
    q = c.query
    tasks = c.cluster.list_tasks(status=q.status, assigned_to=q.assigned_to, limit=q.limit)
    return [t.to_dict() for t in tasks]


def get_task(c: Call) -> Any:
    return c.cluster.get_task(c.path["task_id"])


def complete_task(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    return c.cluster.complete_task(c.path["task_id"], b.node_id, b.epoch, b.result)


def complete_and_claim(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    done, nxt = c.cluster.complete_and_claim(
        c.path["task_id"], b.node_id, b.role, epoch=b.epoch, result=b.result
    )
    return {"done": done, "next": nxt, "text": claim_text(nxt)}


def fail_task(c: Call) -> Any:
    b = c.body
    c.act_as(b.node_id)
    return c.cluster.fail_task(c.path["task_id"], b.node_id, b.epoch, b.error, retry=b.retry)


def assess(c: Call) -> Any:
    return _with_text(c.cluster.assess_workload())


def read_state(c: Call) -> Any:
    return _with_text(c.cluster.read_state(c.query.node_id, limit=c.query.limit))


def read_state_text(c: Call) -> Any:
    return c.cluster.read_state(c.query.node_id, limit=c.query.limit).text


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


def broadcast(c: Call) -> Any:
    b = c.body
    node_id = b.node_id if b.node_id is not None else c.principal.node_id
    c.act_as(node_id)
    return c.cluster.broadcast(b.message, node_id).to_dict()


def touch(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    return {"touched": c.cluster.touch(node_id)}


def alert(c: Call) -> Any:
    b = c.body
    node_id = b.node_id if b.node_id is not None else c.principal.node_id
    c.act_as(node_id)
    return c.cluster.alert(b.message, node_id, **b.data).to_dict()


def record_metrics(c: Call) -> Any:
    node_id = c.path["node_id"]
    c.act_as(node_id)
    return c.cluster.record_metrics(node_id, c.body.sample, keep=c.body.keep).to_dict()


def metrics_series(c: Call) -> Any:
    return [e.to_dict() for e in c.cluster.metrics_series(c.path["node_id"], c.query.limit)]


def stats(c: Call) -> Any:
    return c.cluster.stats().to_dict()


_N = "/v1/nodes/{node_id:path}"
_T = "/v1/tasks/{task_id}"

OPS: tuple[Op, ...] = (
    Op(
        "get_settings",
        "GET",
        "/v1/settings",
        get_settings,
        "The cluster's settings.",
        m.SettingsOut,
        writes=False,
        short=True,
    ),
    Op(
        "configure",
        "PATCH",
        "/v1/settings",
        configure,
        "Change settings (operator only).",
        m.SettingsOut,
        body=ConfigureIn,
        scope="operator",
    ),
    Op(
        "register_node",
        "POST",
        "/v1/nodes",
        register_node,
        "Register a node (refused at capacity); returns its own token.",
        m.RegisteredOut,
        body=m.RegisterIn,
        short=True,
    ),
    Op(
        "list_nodes",
        "GET",
        "/v1/nodes",
        list_nodes,
        "Nodes (newest incarnation of each).",
        None,
        query=m.ListNodesQuery,
        writes=False,
    ),
    Op(
        "heartbeat",
        "POST",
        f"{_N}/heartbeat",
        heartbeat,
        "Proof of life; renews leases.",
        m.NodeOut,
        body=m.HeartbeatIn,
        short=True,
    ),
    Op(
        "set_agent_status",
        "POST",
        f"{_N}/status",
        set_status,
        "Set working / idle / waiting / terminated.",
        m.NodeOut,
        body=m.StatusIn,
        short=True,
    ),
    Op(
        "terminate_node",
        "POST",
        f"{_N}/terminate",
        terminate_node,
        "Terminate the node; its tasks go back to the queue.",
        m.NodeOut,
        short=True,
    ),
    Op(
        "claim_best_task",
        "POST",
        f"{_N}/claim",
        claim,
        "Claim the best pending task for the node's role (task null when none).",
        m.ClaimOut,
        body=m.ClaimIn,
        short=True,
    ),
    Op(
        "catch_up",
        "POST",
        f"{_N}/catch-up",
        catch_up,
        "Events since the node's cursor; moves the cursor.",
        m.CatchUpOut,
        body=m.CatchUpIn,
    ),
    Op(
        "touch",
        "POST",
        f"{_N}/touch",
        touch,
        "Count a call as the node's heartbeat (touched false when not live).",
        m.TouchOut,
        short=True,
    ),
    Op(
        "record_metrics",
        "POST",
        f"{_N}/metrics",
        record_metrics,
        "Append a point to the node's heartbeat metrics series.",
        m.EventOut,
        body=m.SampleIn,
        short=True,
    ),
    Op(
        "metrics_series",
        "GET",
        f"{_N}/metrics",
        metrics_series,
        "The node's newest heartbeat metrics, oldest first.",
        None,
        query=m.SeriesQuery,
        writes=False,
    ),
    Op(
        "alert",
        "POST",
        "/v1/alerts",
        alert,
        "Record an alert event (e.g. a heartbeat destination failing).",
        m.EventOut,
        body=m.AlertIn,
        short=True,
    ),
    Op("get_node", "GET", _N, get_node, "One node.", m.NodeOut, writes=False, short=True),
    Op(
        "add_task",
        "POST",
        "/v1/tasks",
        add_task,
        "Put a task on the board.",
        m.TaskOut,
        body=m.AddTaskIn,
        status=201,
        short=True,
    ),
    Op(
        "add_tasks",
        "POST",
        "/v1/tasks/batch",
        add_tasks,
        "Add many tasks in one transaction (all or none).",
        None,
        body=m.AddTasksIn,
        status=201,
    ),
    Op(
        "list_tasks",
        "GET",
        "/v1/tasks",
        list_tasks,
        "Tasks, filtered.",
        None,
        query=m.ListTasksQuery,
        writes=False,
    ),
    Op(
        "complete_task",
        "POST",
        f"{_T}/complete",
        complete_task,
        "Finish a held task (at its lease epoch).",
        m.TaskOut,
        body=m.CompleteIn,
        short=True,
    ),
    Op(
        "complete_and_claim",
        "POST",
        f"{_T}/complete-and-claim",
        complete_and_claim,
        "Finish a held task and claim the next one for the role (one transaction on SQLite).",
        m.CompleteAndClaimOut,
        body=m.CompleteAndClaimIn,
        short=True,
    ),
    Op(
        "fail_task",
        "POST",
        f"{_T}/fail",
        fail_task,
        "Give a held task up (requeued while attempts remain).",
        m.TaskOut,
        body=m.FailIn,
        short=True,
    ),
    Op("get_task", "GET", _T, get_task, "One task.", m.TaskOut, writes=False, short=True),
    Op(
        "assess_workload",
        "POST",
        "/v1/assess",
        assess,
        "Assess the workload and record the recommendation.",
        m.AssessmentOut,
    ),
    Op(
        "read_state",
        "GET",
        "/v1/state",
        read_state,
        "The board, the swarm and metadata.",
        m.StateOut,
        query=m.StateQuery,
        writes=False,
    ),
    Op(
        "read_state_text",
        "GET",
        "/v1/state/text",
        read_state_text,
        "read_state as anti-idle.md's text block.",
        None,
        query=m.StateQuery,
        writes=False,
    ),
    Op(
        "events",
        "GET",
        "/v1/events",
        events,
        "Events after a cursor; with Accept: text/event-stream, a live stream.",
        None,
        query=m.EventsQuery,
        writes=False,
        tag="events",
    ),
    Op(
        "broadcast",
        "POST",
        "/v1/broadcast",
        broadcast,
        "A message every node sees on its next catch-up.",
        m.EventOut,
        body=m.BroadcastIn,
        short=True,
    ),
    Op(
        "stats",
        "GET",
        "/v1/stats",
        stats,
        "Counts for dashboards and metrics.",
        m.StatsOut,
        writes=False,
    ),
)

# Responses that are lists (the table's ``response`` is None for them).
LIST_RESPONSES: dict[str, type[BaseModel]] = {
    "list_nodes": m.NodeOut,
    "add_tasks": m.TaskOut,
    "list_tasks": m.TaskOut,
    "events": m.EventOut,
    "metrics_series": m.EventOut,
}
