"""What a viewer's MCP tool calls may do: the tools of operations that only read
(the registry's ``GET`` routes), without naming an agent (a named agent's call counts
as its heartbeat, a write). The principal is the one ``corral serve``'s ``/mcp``
authenticated (``corral.server.auth.PRINCIPAL``); a refusal is an ``ERROR:`` answer
naming the role."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral import operations
from corral.server.auth import PRINCIPAL

__all__ = ["refusal"]


def _reads(tool: str) -> bool:
    """Whether ``tool``'s operation only reads (a tool of no operation: no)."""
    return any(op.mcp == tool and op.method == "GET" for op in operations.OPERATIONS)


def refusal(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The ``ERROR:`` answer to a call of ``tool`` the caller's role forbids, or
    None when it may make it."""
    principal = PRINCIPAL.get()
    if principal is None or principal.may_write:
        return None
    if not _reads(tool):
        why = principal.refusal("any", writes=True)
        return f"ERROR: {why}. Call only the tools that read (read_state, …)."
    if arguments.get("agent_id") is not None:
        return (
            f"ERROR: the token {principal.name!r} has the viewer role and acts as no agent: "
            f"call {tool} without agent_id."
        )
    return None
