"""The OpenAPI 3.1 document, generated from the route table and its pydantic models."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from corral.server import models as m
from corral.server.routes import LIST_RESPONSES, Op

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


def build_openapi(ops: tuple[Op, ...], *, version: str) -> dict[str, Any]:
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
    _, top = models_json_schema(list(dict.fromkeys(models)), ref_template=_REF)
    schemas = top.get("$defs", {})

    paths: dict[str, Any] = {}
    for op in ops:
        path = _PARAM.sub(r"{\1}", op.path)
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(op.path)
        ]
        if op.query is not None:
            qs = op.query.model_json_schema(ref_template=_REF)
            required = set(qs.get("required", []))
            for name, schema in qs.get("properties", {}).items():
                params.append(
                    {"name": name, "in": "query", "required": name in required, "schema": schema}
                )
        if op.response is not None:
            ok: dict[str, Any] = _json(_ref(op.response))
        elif op.name in LIST_RESPONSES:
            ok = _json({"type": "array", "items": _ref(LIST_RESPONSES[op.name])})
        else:
            ok = {"text/plain": {"schema": {"type": "string"}}}
        if op.name == "events":
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
            entry["requestBody"] = {"required": False, "content": _json(_ref(op.body))}
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
    return {
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
