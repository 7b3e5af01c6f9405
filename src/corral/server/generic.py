"""The HTTP handler of an operation that declares none: built from its ``Cluster``
method.

The method's parameters, less those in the operation's path, are the query string
of a ``GET`` and the JSON body otherwise, each under its own name and typed by its
annotation (unknown fields are refused, as everywhere in the API); a ``**kwargs``
parameter takes the body's other fields. When the operation names a ``node``
parameter, the caller must be the operator or that node, and a node's token fills
it in when it is left out. The answer is the method's result (records are written
field for field). This is the convention ``corral.remote_calls`` calls, so an
operation that is one ``Cluster`` method and one ``Operation`` needs nothing else.
"""

from __future__ import annotations

import inspect
import typing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model

from corral.operations import Operation
from corral.server.models import PARAM_TYPES, _In, _Query
from corral.signatures import method_types

if TYPE_CHECKING:
    from corral.server.routes import Call

__all__ = ["Generic"]


class _InMore(_In):
    """A body whose fields beyond the method's named parameters go to its ``**kwargs``."""

    model_config = ConfigDict(extra="allow", strict=True)


def _wire_type(name: str, annotated: Any) -> Any:
    """The parameter's type on the wire: its name's (``PARAM_TYPES``, with the bounds
    and schema the API gives that name everywhere), optional when the method's is;
    else the method's annotation, whose rule (``corral.params``) is the field's
    schema (the rule itself runs in ``Cluster``, with its message)."""
    wire = PARAM_TYPES.get(name)
    if wire is None:
        return annotated
    return wire | None if type(None) in typing.get_args(annotated) else wire


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class Generic:
    """The handler: ``Generic(op)(call)``. ``model`` is the request model to use
    instead of the one built from the signature (a model of the API's own, whose
    fields are the method's parameters: its bounds and messages stay as they are)."""

    def __init__(self, op: Operation, model: type[BaseModel] | None = None) -> None:
        from corral.cluster import Cluster

        self.op = op
        fn = getattr(Cluster, op.name)
        types = method_types(op, extras=True)
        self.returns = types.get("return")
        path = set(op.path_params)
        self.ints = {p for p in path if types.get(p) is int or int in typing.get_args(types.get(p))}
        fields: dict[str, Any] = {}
        more = False
        for p in inspect.signature(fn).parameters.values():
            if p.name == "self" or p.name in path or p.name == op.actor:  # (the server's)
                continue
            if p.kind is p.VAR_KEYWORD:
                more = True
                continue
            if p.kind is p.VAR_POSITIONAL:
                raise RuntimeError(f"operation {op.name}: *{p.name} cannot come over HTTP")
            default = ... if p.default is p.empty else p.default
            fields[p.name] = (_wire_type(p.name, types.get(p.name, Any)), default)
        self.model: type[BaseModel] | None = model
        self.more = more
        self.names = tuple(fields)
        if model is not None:
            self.names = tuple(n for n in model.model_fields if n in fields)
        elif op.method == "GET":
            if more:
                raise RuntimeError(f"operation {op.name}: a GET cannot take **kwargs")
            if fields:
                self.model = create_model(f"{_camel(op.name)}Query", __base__=_Query, **fields)
        elif fields or more:
            base = _InMore if more else _In
            self.model = create_model(f"{_camel(op.name)}In", __base__=base, **fields)

    def __call__(self, c: Call) -> Any:
        args: dict[str, Any] = {}
        for name, value in c.path.items():
            digits = name in self.ints and value.isascii() and value.isdigit()
            args[name] = int(value) if digits else value
        given = c.query if self.op.method == "GET" else c.body
        if given is not None:
            if self.more:  # with a **kwargs method's other fields, those given
                args.update(given.model_dump(exclude_unset=True))
            else:
                for name in self.names:
                    args[name] = getattr(given, name)
        if self.op.actor is not None:  # who did it: the caller's token, not its word
            args[self.op.actor] = c.principal.actor
        node = self.op.node
        if node is not None:
            if args.get(node) is None and c.principal.node_id is not None:
                args[node] = c.principal.node_id
            c.act_as(args.get(node))
        return _wire(getattr(c.cluster, self.op.name)(**args))


# Records whose wire form is their ``to_dict()``, not their fields (a workflow run's
# ``idle_since`` is ISO 8601 there); every other record is written field for field
# (``corral.server.dispatch.dumps``).
_WIRE_FORM = ("corral.workflows.model",)


def _wire(result: Any) -> Any:
    """The result as the API writes it (lists item by item)."""
    if isinstance(result, list):
        return [_wire(r) for r in result]
    if type(result).__module__ in _WIRE_FORM:
        return result.to_dict()
    return result
