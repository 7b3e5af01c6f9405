"""Who may call which MCP tool behind ``corral serve``'s ``/mcp``: the rule of the
HTTP API, taken from the tool's operation in the registry. An operator-only
operation's tool refuses a node token; a viewer token may call only the tools of
operations that read (the registry's ``GET`` routes), and without naming an agent (a
named agent's call counts as its heartbeat, a write). The principal is the one the
transport authenticated (``corral.server.auth.PRINCIPAL``; None on stdio, where the
client already holds the store or a token: no restriction). A refusal is an
``ERROR:`` answer that names the role and changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral import operations
from corral.server.auth import PRINCIPAL

__all__ = ["refusal"]


def refusal(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The ``ERROR:`` answer to a call of ``tool`` the caller's token forbids, or
    None when it may make it."""
    principal = PRINCIPAL.get()
    if principal is None or principal.role == "operator":
        return None
    op = next((o for o in operations.OPERATIONS if o.mcp == tool), None)
    scope, writes = ("any", True) if op is None else (op.caller, op.method != "GET")
    why = principal.refusal(scope, writes=writes)
    if why is not None:
        return f"ERROR: {why}."
    if principal.role == "viewer" and arguments.get("agent_id") is not None:
        return (
            f"ERROR: the token {principal.name!r} has the viewer role and acts as no agent: "
            f"call {tool} without agent_id."
        )
    return None
