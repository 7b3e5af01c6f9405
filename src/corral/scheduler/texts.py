"""The scheduler's MCP answers: one line each (an inbox's items follow it). Pure."""

from __future__ import annotations

import json

from corral.scheduler.records import Agent, Assignment, Notification

__all__ = ["assignment_text", "inbox_text", "notified_text", "released_text"]


def notified_text(n: Notification) -> str:
    return f"Notified {n.agent_id}: inbox item {n.id}."


def _item(n: Notification) -> str:
    return f"- [{n.id}] {json.dumps(n.payload, ensure_ascii=False)[:500]}"


def inbox_text(items: list[Notification]) -> str:
    if not items:
        return "The inbox is empty."
    head = f"{len(items)} unread item(s), now marked read:"
    return "\n".join([head, *(_item(n) for n in items)])


def assignment_text(a: Assignment | None) -> str:
    if a is None:
        return "No assignment: nothing is due for this mode."
    lines = [a.text]
    lines += [_item(n) for n in a.inbox]
    return "\n".join(lines)


def released_text(agent: Agent) -> str:
    return (
        f"Released {agent.id}: activation {agent.activation_count} done; "
        f"{agent.unread} unread left."
    )
