"""The OpenAPI 3.1 document, generated from the route table and its pydantic models."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from corral.config import OFF_AT_ZERO
from corral.server import models as m
from corral.server.routes import LIST_RESPONSES, Op
from corral.validation import MAX_FLOAT, TOKEN_NAME

__all__ = ["build_openapi"]

_REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_ERRORS = {
    "400": "Malformed request (not JSON, bad header).",
    "401": "No token, or a token this server did not issue.",
    "403": "A node token acting as another node, or an operator-only operation.",
    "404": "Unknown node, task or endpoint.",
    "409": "Refused: the cluster is at capacity, or the lease is not held.",
    "422": "An argument is invalid; nothing was changed.",
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)}


# A node id in a path: no "/" (it would name another endpoint), not "." or "..".
_PATH_ID = {
    **m.ID_SCHEMA,
    "pattern": m.ID_SCHEMA["pattern"]
    .replace("^[^", "^[^/")
    .replace("*[^", "*[^/")
    .replace("(?:[^", "(?:[^/"),
    "not": {"enum": [".", ".."]},
}
_PATH_SCHEMAS = {
    "node_id": _PATH_ID,
    "task_id": m.TASK_ID_SCHEMA,
    "agent_id": _PATH_ID,
    "runner_id": _PATH_ID,
    "assignment_id": {"type": "string", "pattern": r"^[1-9][0-9]{0,17}$"},
    "request_id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    "name": TOKEN_NAME.json_schema(),  # a named token's
}
_PATH_SCHEMAS.update(dict.fromkeys(("handler_id", "workflow", "host"), _PATH_ID))
# The largest float below 2**63: a larger number is refused once read as a float.
_POSITIVE = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FLOAT}
_NOT_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
_WORD = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": _NOT_BLANK}


def _settings_change(schema: dict[str, Any], roles: tuple[str, ...] | None) -> None:
    """``PATCH /v1/settings`` as ``corral.config.check_changes`` takes it: no nulls,
    positive numbers, role names that are ids without spaces."""
    props = schema["properties"]
    for prop in props.values():
        kinds = [k for k in prop.pop("anyOf", [prop]) if k.get("type") != "null"]
        prop.pop("default", None)
        prop.update(kinds[0])
        if prop.get("type") == "integer":
            prop.update(minimum=1, maximum=2**63 - 1)
        elif prop.get("type") == "number":
            prop.update(_POSITIVE)
    for name in OFF_AT_ZERO:  # 0 turns these off
        props[name].pop("exclusiveMinimum", None)
        props[name]["minimum"] = 0
    props["project_summary"].update(maxLength=20_000, pattern="^[^\\x00]*$")
    role_name = {
        **m.ID_SCHEMA,
        "pattern": "^[^\\s\\x00-\\x1f\\x7f-\\x9f]+$",
        "not": {"enum": ["bootstrap_manager", "runner"]},
    }
    words = {"type": "array", "items": _WORD}
    props["role_keywords"] = {
        "type": "object",
        "minProperties": 1,
        "propertyNames": role_name,
        "additionalProperties": words,
    }
    props["model_strengths"] = {
        "type": "array",
        "items": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "prefixItems": [_WORD, {"enum": ["high", "medium", "low"]}],
        },
    }


def _roles(node: Any, roles: tuple[str, ...]) -> Any:
    """Replace each role placeholder (``x-corral-role``) by the cluster's roles."""
    if isinstance(node, dict):
        if node.pop("x-corral-role", False):
            return {"type": "string", "enum": list(roles)}
        return {k: _roles(v, roles) for k, v in node.items()}
    if isinstance(node, list):
        return [_roles(v, roles) for v in node]
    return node


def build_openapi(
    ops: tuple[Op, ...], *, version: str, roles: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The document; ``roles`` (the cluster's, which the server checks) become the
    enum of every role field, else any id."""
    models: list[tuple[type[BaseModel], Any]] = [
        (m.ErrorOut, "serialization"),
        (m.HealthOut, "serialization"),
    ]
    for op in ops:
        if op.body is not None:
            models.append((op.body, "validation"))
        if op.response is not None:
            models.append((op.response, "serialization"))
        if op.name in LIST_RESPONSES:
            models.append((LIST_RESPONSES[op.name], "serialization"))
    models = list(dict.fromkeys(models))
    names: dict[str, type[BaseModel]] = {}
    for model, _mode in models:
        # A component is named by its class: two models of one name would share it.
        if names.setdefault(model.__name__, model) is not model:
            raise RuntimeError(f"two request or response models are named {model.__name__}")
    _, top = models_json_schema(models, ref_template=_REF)
    schemas = top.get("$defs", {})
    if "ConfigureIn" in schemas:
        _settings_change(schemas["ConfigureIn"], roles)
    if "AddTasksIn" in schemas:
        schemas["AddTasksIn"]["properties"]["tasks"]["items"] = _ref(m.AddTaskIn)
        schemas.setdefault("AddTaskIn", m.AddTaskIn.model_json_schema(ref_template=_REF))
    if "HeartbeatIn" in schemas:
        schemas["HeartbeatIn"]["properties"]["node_id"] = False  # it goes in the path

    paths: dict[str, Any] = {}
    for op in ops:
        path = _PARAM.sub(r"{\1}", op.path)
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": _PATH_SCHEMAS[name]}
            for name in _PARAM.findall(op.path)
        ]
        if op.query is not None:
            qs = op.query.model_json_schema(ref_template=_REF)
            required = set(qs.get("required", []))
            for name, schema in qs.get("properties", {}).items():
                params.append(
                    {"name": name, "in": "query", "required": name in required, "schema": schema}
                )
        if op.exception == "text_answer":
            ok: dict[str, Any] = {"text/plain": {"schema": {"type": "string"}}}
        elif op.response is not None:
            ok = _json(_ref(op.response))
        elif op.name in LIST_RESPONSES:
            ok = _json({"type": "array", "items": _ref(LIST_RESPONSES[op.name])})
        elif op.returns is not None:  # a generic handler: its method's return type
            schema = TypeAdapter(op.returns).json_schema(mode="serialization", ref_template=_REF)
            for name, part in schema.pop("$defs", {}).items():
                schemas.setdefault(name, part)
            ok = _json(schema)
        else:
            ok = {"text/plain": {"schema": {"type": "string"}}}
        if op.exception == "event_stream":
            ok["text/event-stream"] = {"schema": {"type": "string"}}
        responses: dict[str, Any] = {str(op.status): {"description": "OK", "content": ok}}
        codes = ["400", "401", "403", "404", "409", "422", "503"]
        for code in codes:
            responses[code] = {
                "description": _ERRORS.get(code, "Store unavailable; retry."),
                "content": _json(_ref(m.ErrorOut)),
            }
        entry: dict[str, Any] = {
            "operationId": op.name,
            "summary": op.summary,
            "tags": [op.tag],
            "parameters": params,
            "responses": responses,
        }
        if op.scope != "public":
            entry["security"] = [{"bearer": []}]
        if op.body is not None:
            needed = bool(op.body.model_json_schema().get("required"))
            entry["requestBody"] = {"required": needed, "content": _json(_ref(op.body))}
        paths.setdefault(path, {})[op.method.lower()] = entry

    error = {"content": _json(_ref(m.ErrorOut))}
    paths["/healthz"] = {
        "get": {
            "operationId": "healthz",
            "summary": "Liveness and store check.",
            "tags": ["server"],
            "responses": {
                "200": {"description": "OK", "content": _json(_ref(m.HealthOut))},
                "503": {"description": "Store unavailable.", **error},
            },
        }
    }
    paths["/metrics"] = {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus text format.",
            "tags": ["server"],
            "security": [{"bearer": []}],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": {"description": _ERRORS["401"], **error},
            },
        }
    }
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "corral",
            "version": version,
            "description": "The HTTP API of corral serve (see docs/server.md).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
    out: dict[str, Any] = _strip_roles(document) if roles is None else _roles(document, roles)
    return out


def _strip_roles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_roles(v) for k, v in node.items() if k != "x-corral-role"}
    if isinstance(node, list):
        return [_strip_roles(v) for v in node]
    return node
