"""The text of an MCP answer (corral's tools and prompts answer text only), and the
tools corral's MCP server lists."""

from __future__ import annotations

from mcp.types import ContentBlock, TextContent


def text_of(content: ContentBlock) -> str:
    """``content``'s text (a ``TextContent``: anything else fails the test)."""
    assert isinstance(content, TextContent), content
    return content.text


# Every tool corral's MCP server lists, in-process and over each transport.
TOOLS = {
    "register_node",
    "set_agent_status",
    "claim_best_task",
    "assess_workload",
    "read_state",
    "catch_up",
    "add_task",
    "complete_task",
    "fail_task",
    "heartbeat",
    "broadcast",
    "list_idle_workflows",
    "run_workflow",
    "get_workflow_run",
    "send_workflow_event",
    # the operator's Release and Resume of a run (docs/workflows.md)
    "release_workflow_run",
    "resume_workflow_run",
    # the activation scheduler's (docs/scheduler.md)
    "get_assignment",
    "release_assignment",
    "notify",
    "read_inbox",
    "spawn_requests",
    "accept_spawn_request",
    "decline_spawn_request",
    # the operator's actions on tasks (docs/core.md "Cancelling and requeueing")
    "cancel_task",
    "requeue_task",
    "cancel_tasks",
    "requeue_tasks",
    # named tokens (docs/server.md "Tokens and roles")
    "create_token",
    "list_tokens",
    "revoke_token",
    # progress (docs/guardrails.md, "Stuck tasks")
    "report_progress",
    "usage",
}
