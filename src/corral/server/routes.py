"""The HTTP routes: one ``Endpoint`` per operation of the registry (built from its
``Cluster`` method, ``corral.server.generic``), and the code of the protocol
exceptions the registry declares (``Operation.exception``), which the generic call
cannot do: a claim's idempotency key and answer (``waiting_claim``, ``keyed_claim``;
the wait itself is ``corral.server.dispatch``'s), the event feed's filters
(``event_stream``; its SSE form is ``corral.server.events``'s) and a registration's
node token (``node_token``). Built once per registry, when the app is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import create_model

from corral import operations
from corral.model import Task
from corral.operations import Operation
from corral.render import claim_text
from corral.server import models as m
from corral.server.generic import Call, Endpoint, camel, record_model
from corral.validation import check_id, check_task_id, check_usage

__all__ = ["OPS", "build_ops"]


def _keyed(ep: Endpoint, c: Call, args: dict[str, Any]) -> tuple[Any, ...] | None:
    """A claim with an idempotency key: the store keeps the key in the claim's
    transaction, and a claim sent again with it returns what the first one took
    (corral.outage). None without a key."""
    key = getattr(c.body, "idempotency_key", None)
    if key is None:
        return None
    cluster, role = c.cluster, check_id(args["role"], "role")
    now = cluster.clock.now()
    if ep.op.exception == "waiting_claim":
        return (cluster.store.claim(args["node_id"], role, now, key=key),)
    task_id, node_id = check_task_id(args["task_id"]), args["node_id"]
    usage = args.get("usage")
    done: tuple[Any, ...] = cluster.store.complete_and_claim(
        task_id,
        node_id,
        args.get("epoch"),
        args.get("result"),
        role,
        now,
        key=key,
        usage=None if usage is None else check_usage(usage),
    )
    return done


def _claim(ep: Endpoint, c: Call) -> Any:
    args = ep.args(c)
    if args.get("role") is None:  # the node's own role
        args["role"] = c.cluster.get_node(args["node_id"]).role
    # (a waiting claim's tries come with wait 0: corral.server.dispatch)
    keyed = None if args.get("wait") else _keyed(ep, c, args)
    task = c.cluster.claim_best_task(**args) if keyed is None else keyed[0]
    return {"task": task, "text": claim_text(task)}


def _complete_and_claim(ep: Endpoint, c: Call) -> Any:
    args = ep.args(c)
    keyed = _keyed(ep, c, args)
    done, nxt = c.cluster.complete_and_claim(**args) if keyed is None else keyed
    return {"done": done, "next": nxt, "text": claim_text(nxt)}


def _events(ep: Endpoint, c: Call) -> Any:
    q = c.query
    kinds = set(q.kind.split(",")) if q.kind else None
    nodes = set(q.node.split(",")) if q.node else None
    return [
        e.to_dict()
        for e in c.cluster.events(**ep.args(c))
        if (kinds is None or e.kind in kinds) and (nodes is None or e.node_id in nodes)
    ]


def _node_token(ep: Endpoint, c: Call) -> Any:
    answer = ep(c)
    answer["token"] = c.tokens.node_token(answer["id"])
    return answer


_TaskOut = record_model(Task)
# The protocol exceptions: the handler, and the answer's fields when the call's
# result is not the answer.
EXCEPTIONS: dict[str, tuple[Callable[[Endpoint, Call], Any], dict[str, Any] | None]] = {
    "waiting_claim": (_claim, {"task": (_TaskOut | None, ...), "text": (str, ...)}),
    "keyed_claim": (
        _complete_and_claim,
        {"done": (_TaskOut, ...), "next": (_TaskOut | None, ...), "text": (str, ...)},
    ),
    "event_stream": (_events, None),
    "node_token": (_node_token, None),
}


def _endpoint(op: Operation) -> Endpoint:
    ep = Endpoint(op)
    if op.exception in EXCEPTIONS:
        handler, answer = EXCEPTIONS[op.exception]
        ep.handler = lambda c: handler(ep, c)
        if answer is not None:
            ep.answer = create_model(f"{camel(op.name)}Out", __base__=m.Out, **answer)
        if op.exception == "waiting_claim" and ep.body is not None:  # role: the node's
            role = (m.PARAM_TYPES["role"] | None, None)
            ep.body = create_model(ep.body.__name__, __base__=ep.body, role=role)
    return ep


def build_ops() -> tuple[Endpoint, ...]:
    """The routes of the registry as it is now (``create_app`` builds its app from
    them, so an operation added to the registry at run time is served), deeper paths
    first: ``/v1/nodes/{node_id:path}`` would also match ``…/metrics``. Built once per
    registry: the handlers and their models are made here, not per request."""
    global OPS
    if _BUILT_FROM[0] is not operations.OPERATIONS:
        table = operations.OPERATIONS
        OPS = tuple(sorted((_endpoint(o) for o in table), key=lambda e: -e.path.count("/")))
        _BUILT_FROM[0] = table
    return OPS


_BUILT_FROM: list[tuple[Operation, ...] | None] = [None]
OPS: tuple[Endpoint, ...] = ()
OPS = build_ops()
