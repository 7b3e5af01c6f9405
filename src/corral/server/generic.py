"""The HTTP side of every operation, built from its ``Cluster`` method and its
registry entry when the app is built, never per request.

The method's parameters, less those in the operation's path, are the query string
of a ``GET`` and the JSON body otherwise, each under its own name (unknown fields are
refused). A parameter's wire type is its rule (``corral.params``), its schema (a
whole float is an integer where the rule's is one) and its check with its message,
else what ``corral.server.models.PARAM_TYPES`` says of its name (the cluster's roles,
a report's shape: what no rule carries yet), else its annotation. A
``**kwargs`` parameter takes the body's other fields (typed by ``models.KWARGS``), or
one object field of its own name when the operation adds it (``adds["http"]``). When
the operation names a ``node`` parameter, the caller must be the operator or that
node, and a node's token fills it in when it is left out (an operator's token, its
name, when that parameter is ``actor``: who decides, a manager agent or the
operator); its ``actor`` parameter is the caller's name, never the request's word.

The answer is the method's result (records field for field, a record's own
``.text`` beside them), under ``Operation.answer`` when the operation declares one;
its model, for the OpenAPI document, is built from the return type the same way
(``record_model``). This is the convention ``corral.remote_calls`` calls, so an
operation that is one ``Cluster`` method and one ``Operation`` needs nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, create_model

from corral.operations import Operation
from corral.server import models as m
from corral.server.errors import ApiError
from corral.signatures import method_types
from corral.validation import Rule, rule_of

if TYPE_CHECKING:
    from corral.cluster import Cluster
    from corral.server.auth import Principal, Tokens

__all__ = ["Call", "Endpoint", "answer_type", "record_model"]


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


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``annotation`` without ``| None``, and whether it had it."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            return (rest[0] if len(rest) == 1 else typing.Union[rest]), True  # noqa: UP007
    return annotation, False


def _kind(schema: Any) -> str | None:
    """The JSON type a rule's schema states ("integer" when one of its branches is)."""
    branches = [schema, *schema.get("anyOf", ())]
    found = [b.get("type") for b in branches if b.get("type")]
    return "integer" if "integer" in found else (found[0] if found else None)


_PYTHON = {"integer": int, "number": float, "boolean": bool, "string": str}


def _ruled(rule: Rule, name: str, optional: bool, query: bool, check: bool) -> Any:
    """The wire type of a parameter with ``rule``: its schema, and with ``check`` the
    rule run by the model (its message, naming the parameter; else ``Cluster`` runs
    it, with the same message, and the model only parses)."""

    def checked(value: Any) -> Any:
        return value if value is None and optional else rule.check(value, name)

    kind = _kind(rule.schema)
    run = (BeforeValidator(checked),) if check else ()
    if query:  # text: the plain type parses it first
        after = (AfterValidator(checked),) if check else ()
        return Annotated[_PYTHON.get(kind or "", str), *after, rule]
    items = rule.schema.get("items")
    if kind == "integer" or (isinstance(items, dict) and _kind(items) == "integer"):
        return Annotated[Any, *run, BeforeValidator(m.wholes), rule]
    return Annotated[Any, *run, rule] if run else Annotated[Any, rule]


def wire_type(op: Operation, name: str, annotated: Any, *, query: bool) -> Any:
    """The type of parameter ``name`` of ``op`` on the wire (the module's docstring).
    The model runs a rule only for a protocol exception's code, which uses the values
    before (or instead of) the ``Cluster`` method: the method runs it otherwise."""
    plain, optional = _optional(annotated)
    rule, _ = rule_of(annotated)
    wire = m.PARAM_TYPES.get(f"{op.name}.{name}")
    if wire is None and rule is not None:
        wire = _ruled(rule, name, optional, query, op.exception is not None)
    elif wire is None:
        wire = m.PARAM_TYPES.get(name, {int: m.Int, float: m.Number}.get(plain, plain))
    return wire | None if optional else wire


# --- answers ----------------------------------------------------------------------------
def _has_text(t: Any) -> bool:
    """A record that carries its own one-line answer (a ``text`` property)."""
    return isinstance(getattr(t, "text", None), property)


def answer_type(t: Any) -> Any:
    """The type ``t`` has in an answer: a record is its answer model
    (``record_model``), a Literal a string, a tuple a list."""
    origin = typing.get_origin(t)
    if origin is Annotated:
        return answer_type(typing.get_args(t)[0])
    if origin is Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(answer_type(a) for a in typing.get_args(t))]  # noqa: UP007
    if origin in (list, tuple):
        return list[answer_type(typing.get_args(t)[0])]  # type: ignore[misc]
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return record_model(t)
    return t


@functools.cache
def record_model(record: type) -> type[BaseModel]:
    """The answer model of ``record`` (a dataclass): its fields, every one required,
    its ``.text`` when it carries one, and what ``models.ANSWERS`` adds or replaces."""
    given = m.ANSWERS.get(record, {})
    if isinstance(given, type):
        return given
    hints = typing.get_type_hints(record)
    fields: dict[str, Any] = {
        f.name: (answer_type(hints[f.name]), ...) for f in dataclasses.fields(record)
    }
    if _has_text(record):
        fields["text"] = (str, ...)
    model: type[BaseModel] = create_model(
        f"{record.__name__}Out", __base__=m.Out, **{**fields, **given}
    )
    return model


# Records whose wire form is their ``to_dict()``, not their fields (a workflow run's
# ``idle_since`` is ISO 8601 there); every other record is written field for field
# (``corral.server.dispatch.dumps``), with its ``.text`` when it has one.
_WIRE_FORM = ("corral.workflows.model",)


_FORMS: dict[type, int] = {}


def _form(cls: type) -> int:
    """How a value of ``cls`` is written: 0 as it is, 1 its ``to_dict()``, 2 that
    and its ``.text``."""
    form = _FORMS.get(cls)
    if form is None:
        form = _FORMS[cls] = 2 if _has_text(cls) else int(cls.__module__ in _WIRE_FORM)
    return form


def wire(result: Any) -> Any:
    """The result as the API writes it (lists item by item)."""
    if isinstance(result, list):
        return [wire(r) for r in result]
    form = _form(type(result))
    if form == 0:
        return result
    d: dict[str, Any] = result.to_dict()
    if form == 2:
        d["text"] = result.text
    return d


# --- the endpoint -------------------------------------------------------------------------
def _starlette(path: str) -> str:
    # An id may hold any character but "/": ``:path`` keeps "%2F" and dots intact.
    for name in ("node_id", "agent_id", "runner_id", "handler_id", "workflow", "host"):
        path = path.replace(f"{{{name}}}", f"{{{name}:path}}")
    return path


def _none_text(op: Operation) -> str:
    """The one-line answer of a ``None`` result, as the operation's MCP rendering
    says (empty without the MCP extra)."""
    try:
        from corral.mcp import text
    except ImportError:  # pragma: no cover - the MCP SDK is not installed
        return ""
    render: Callable[[Any], str] | None = getattr(text, op.text or "", None)
    return "" if render is None else render(None)


class Endpoint:
    """One operation's HTTP route: ``op``, its registry entry, and what is built from
    its ``Cluster`` method once: ``path`` (Starlette's template), the request model
    (``body`` of a write, ``query`` of a ``GET``), ``answer`` (the answer's type, for
    the OpenAPI document) and ``handler`` (what a request runs: the generic call,
    or its protocol exception's code, ``corral.server.routes``)."""

    def __init__(self, op: Operation) -> None:
        from corral.cluster import Cluster

        self.op, self.name, self.method = op, op.name, op.method
        self.path = _starlette(op.path)
        self.writes = op.method != "GET"
        get = op.method == "GET"
        hints = method_types(op, extras=True)
        self.returns = hints.get("return")
        path = set(op.path_params)
        self.ints = frozenset(
            p for p in path if hints.get(p) is int or int in typing.get_args(hints.get(p))
        )
        adds = op.adds.get("http", {})
        fields: dict[str, Any] = {}
        self.kwargs: str | None = None  # the **kwargs parameter
        self.nested = False  # its items are one object field of its name
        base: type[BaseModel] = m.Query if get else m.In
        params = inspect.signature(getattr(Cluster, op.name)).parameters.values()
        self.positional = tuple(
            p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.name != "self"
        )
        for p in params:
            if p.name == "self" or p.name in path or p.name == op.actor:  # (the server's)
                continue
            if p.kind is p.VAR_POSITIONAL or (get and p.kind is p.VAR_KEYWORD):
                raise RuntimeError(f"operation {op.name}: {p} cannot come over HTTP")
            if p.kind is p.VAR_KEYWORD:
                self.kwargs, self.nested = p.name, p.name in adds
                if self.nested:
                    fields[p.name] = (dict[str, Any], Field(default_factory=dict))
                else:
                    base = m.KWARGS.get(p.name, m.InMore)
                continue
            default = ... if p.default is p.empty else p.default
            fields[p.name] = (wire_type(op, p.name, hints.get(p.name, Any), query=get), default)
        self.names = tuple(n for n in fields if n != self.kwargs)
        for name, what in adds.items():  # arguments beyond the method's
            if name not in fields:
                fields[name] = (m.PARAM_TYPES[name] | None, Field(None, description=what))
        model = None
        if fields or base not in (m.In, m.Query):
            suffix = "Query" if get else "In"
            model = create_model(f"{camel(op.name)}{suffix}", __base__=base, **fields)
        self.body: type[BaseModel] | None = None if get else model
        self.query: type[BaseModel] | None = model if get else None
        self.answer: Any = answer_type(self.returns)
        self.text = _has_text(_optional(self.returns)[0])
        self.none_text = _none_text(op) if op.answer and self.text else ""
        if op.answer is not None:
            answer: dict[str, Any] = {op.answer: (self.answer, ...)}
            if self.text:
                answer["text"] = (str, ...)
            self.answer = create_model(f"{camel(op.name)}Out", __base__=m.Out, **answer)
        self.handler: Callable[[Call], Any] = self

    def args(self, c: Call) -> dict[str, Any]:
        """The method's arguments from the request, the caller checked."""
        args: dict[str, Any] = {}
        for name, value in c.path.items():
            digits = name in self.ints and value.isascii() and value.isdigit()
            args[name] = int(value) if digits else value
        given = c.body if self.writes else c.query
        if given is not None:
            for name in self.names:
                args[name] = getattr(given, name)
            if self.nested:
                args.update(getattr(given, str(self.kwargs)))
            elif self.kwargs is not None:
                more = given.model_dump(exclude_unset=True)
                for name in self.op.path_params:
                    if name in more:
                        what = name.replace("_", " ")
                        raise ApiError(422, "invalid_input", f"the {what} goes in the path", name)
                args.update(more)
        if self.op.actor is not None:  # who did it: the caller's token, not its word
            args[self.op.actor] = c.principal.actor
        node = self.op.node
        if node is not None:
            if args.get(node) is None and c.principal.node_id is not None:
                args[node] = c.principal.node_id
            c.act_as(args.get(node))
            if node == "actor" and args.get(node) is None:  # an operator's own decision
                args[node] = c.principal.actor
        return args

    def answers(self, result: Any) -> Any:
        """``result`` as the API writes it."""
        if self.op.answer is None:
            return wire(result)
        out = {self.op.answer: wire(result)}
        if self.text:
            out["text"] = self.none_text if result is None else result.text
        return out

    def __call__(self, c: Call) -> Any:
        """The generic handler: the method with the request's arguments."""
        args = self.args(c)
        first = [args.pop(name) for name in self.positional]
        return self.answers(getattr(c.cluster, self.op.name)(*first, **args))
