"""The OpenAPI 3.1 document, generated from the routes (``corral.server.routes``):
each operation's request model, its answer's type and its path parameters."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, TypeAdapter

from corral.alerts import WEBHOOKS_SCHEMA
from corral.budgets import BUDGETS_SCHEMA, MODEL_CAPS_SCHEMA
from corral.config import OFF_AT_ZERO
from corral.server import models as m
from corral.server.generic import Endpoint
from corral.validation import MAX_FLOAT, TASK_REF, TOKEN_NAME

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
    "task_id": TASK_REF.json_schema()["anyOf"][1],
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
    props["alert_webhooks"] = WEBHOOKS_SCHEMA
    props["budgets"] = BUDGETS_SCHEMA
    props["model_caps"] = MODEL_CAPS_SCHEMA


def _roles(node: Any, roles: tuple[str, ...]) -> Any:
    """Replace each role placeholder (``x-corral-role``) by the cluster's roles."""
    if isinstance(node, dict):
        if node.pop("x-corral-role", False):
            return {"type": "string", "enum": list(roles)}
        return {k: _roles(v, roles) for k, v in node.items()}
    if isinstance(node, list):
        return [_roles(v, roles) for v in node]
    return node


def _collect(schemas: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` moved into ``schemas`` (a name used twice for two
    different schemas is a programming error)."""
    for name, part in schema.pop("$defs", {}).items():
        if schemas.setdefault(name, part) != part:
            raise RuntimeError(f"two request or answer models are named {name}")
    return schema


def _model(schemas: dict[str, Any], model: type[BaseModel], mode: Any) -> dict[str, Any]:
    """A reference to ``model``'s schema, added to ``schemas``."""
    schema = _collect(schemas, model.model_json_schema(mode=mode, ref_template=_REF))
    if schemas.setdefault(model.__name__, schema) != schema:
        raise RuntimeError(f"two request or answer models are named {model.__name__}")
    return _ref(model)


def build_openapi(
    ops: tuple[Endpoint, ...], *, version: str, roles: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The document; ``roles`` (the cluster's, which the server checks) become the
    enum of every role field, else any id."""
    schemas: dict[str, Any] = {}
    error_ref = _model(schemas, m.ErrorOut, "serialization")
    health_ref = _model(schemas, m.HealthOut, "serialization")
    paths: dict[str, Any] = {}
    for ep in ops:
        op = ep.op
        path = _PARAM.sub(r"{\1}", ep.path)
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": _PATH_SCHEMAS[name]}
            for name in _PARAM.findall(ep.path)
        ]
        if ep.query is not None:
            qs = _collect(schemas, ep.query.model_json_schema(ref_template=_REF))
            required = set(qs.get("required", []))
            for name, schema in qs.get("properties", {}).items():
                params.append(
                    {"name": name, "in": "query", "required": name in required, "schema": schema}
                )
        if op.exception == "text_answer":
            ok: dict[str, Any] = {"text/plain": {"schema": {"type": "string"}}}
        else:
            answer = TypeAdapter(ep.answer).json_schema(mode="serialization", ref_template=_REF)
            ok = _json(_collect(schemas, answer))
        if op.exception == "event_stream":
            ok["text/event-stream"] = {"schema": {"type": "string"}}
        responses: dict[str, Any] = {str(op.status): {"description": "OK", "content": ok}}
        for code in ("400", "401", "403", "404", "409", "422", "503"):
            responses[code] = {
                "description": _ERRORS.get(code, "Store unavailable; retry."),
                "content": _json(error_ref),
            }
        entry: dict[str, Any] = {
            "operationId": op.name,
            "summary": op.summary,
            "tags": [op.tag],
            "parameters": params,
            "responses": responses,
        }
        if op.caller != "public":
            entry["security"] = [{"bearer": []}]
        if ep.body is not None:
            ref = _model(schemas, ep.body, "validation")
            body = schemas[ep.body.__name__]
            if ep.kwargs is not None and not ep.nested:  # the path's names are not fields
                for name in op.path_params:
                    body.setdefault("properties", {})[name] = False
            entry["requestBody"] = {"required": bool(body.get("required")), "content": _json(ref)}
        paths.setdefault(path, {})[op.method.lower()] = entry
    if "ConfigureIn" in schemas:
        _settings_change(schemas["ConfigureIn"], roles)
    if "AddTasksIn" in schemas and "AddTaskIn" in schemas:  # a batch's items are add_task's
        schemas["AddTasksIn"]["properties"]["tasks"]["items"] = {
            "$ref": _REF.format(model="AddTaskIn")
        }

    error = {"content": _json(error_ref)}
    paths["/healthz"] = {
        "get": {
            "operationId": "healthz",
            "summary": "Liveness and store check.",
            "tags": ["server"],
            "responses": {
                "200": {"description": "OK", "content": _json(health_ref)},
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
