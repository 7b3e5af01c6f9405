"""The MCP tools' text answers that ``corral.render`` does not already give. Pure.

Every answer is one line (a claim with a description adds it below the line); an
error answer starts with ``ERROR:`` and ends with what to do next.
"""

from __future__ import annotations

import json
from typing import Any

from corral.errors import CapacityError, CorralError, NotFoundError
from corral.model import CatchUp, Event, Node, Task
from corral.scheduler.texts import assignment_text, inbox_text, notified_text, released_text

__all__ = [
    "added_text",
    "assignment_text",
    "broadcast_text",
    "cancelled_text",
    "catch_up_text",
    "claimed_text",
    "completed_text",
    "error_text",
    "event_line",
    "failed_text",
    "handler_text",
    "handlers_text",
    "heartbeat_text",
    "inbox_text",
    "invalid_arguments_text",
    "notified_text",
    "progress_text",
    "released_text",
    "requeued_text",
    "spawn_requests_text",
    "started_text",
    "status_text",
    "tokens_text",
]

_MAX_VALUE = 80


def error_text(exc: CorralError) -> str:
    """``ERROR: <what happened>. <what to do next>``; capacity's is the fixed
    line every client knows."""
    if isinstance(exc, CapacityError):
        return exc.message  # "ERROR: Cluster at capacity (4 nodes). Registration rejected."
    message = exc.message.rstrip(".")
    hint = exc.hint
    if isinstance(exc, NotFoundError) and exc.field == "node_id":
        hint = "Call register_node with this agent_id."
    return f"ERROR: {message}. {hint}"


def invalid_arguments_text(tool: str, problems: list[str]) -> str:
    """Arguments that do not fit the tool's input schema (wrong type, missing)."""
    listed = "; ".join(problems) or "arguments do not match the input schema"
    return f"ERROR: {tool}: {listed}. Check the tool's arguments and call again."


def claimed_text(task: Task | None) -> str:
    """``Claimed task 3: Implement user authentication``; the
    description, when the task has one, follows below that line."""
    if task is None:
        return "No pending tasks to claim."
    line = f"Claimed task {task.id}: {task.title}"
    return f"{line}\n\n{task.description}" if task.description.strip() else line


def status_text(node: Node) -> str:
    task = f" on task {node.current_task_id}" if node.current_task_id is not None else ""
    return f"Node {node.id} is now {node.status}{task}"


def completed_text(task: Task) -> str:
    return f"Completed task {task.id}: {task.title}"


def failed_text(task: Task) -> str:
    if task.status == "pending":
        return (
            f"Task {task.id} returned to pending (attempt {task.attempts} of "
            f"{task.max_attempts}): {task.title}"
        )
    return f"Task {task.id} failed: {task.title}"


def added_text(task: Task) -> str:
    roles = f", roles: {', '.join(task.roles)}" if task.roles else ""
    return f"Added task {task.id}: {task.title} (priority: {task.priority}{roles})"


def heartbeat_text(node: Node) -> str:
    health = f" ({node.health})" if node.health else ""
    return f"Heartbeat recorded for {node.id}{health}"


def progress_text(task: Task) -> str:
    note = f": {task.progress_note}" if task.progress_note else ""
    return f"Progress recorded on task {task.id}{note}"


def cancelled_text(task: Task) -> str:
    return f"Task {task.id} cancelled ({task.error})"


def requeued_text(task: Task) -> str:
    return f"Task {task.id} requeued: pending again at epoch {task.epoch}"


def broadcast_text(event: Event) -> str:
    return f"Broadcast {event.seq} sent: {event.data.get('message', '')}"


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def event_line(e: Event) -> str:
    """One event: ``#12 task_claimed Node-X9J2 task-3 epoch=1``."""
    parts = [f"#{e.seq}", e.kind]
    if e.node_id:
        parts.append(e.node_id)
    if e.task_id is not None:
        parts.append(f"task-{e.task_id}")
    line = " ".join(parts)
    if e.kind == "broadcast":
        return f"{line}: {_value(e.data.get('message', ''))}"
    extra = " ".join(f"{k}={_value(v)}" for k, v in e.data.items() if v is not None)
    return f"{line} {extra}" if extra else line


def catch_up_text(node_id: str, c: CatchUp, state_text: str, *, limit: int) -> str:
    """The events since the node's cursor, then the state block."""
    n = len(c.events)
    head = f"📨 Catch-up for {node_id}: {n} new event{'s' if n != 1 else ''} (cursor {c.cursor})"
    lines = [head, *(event_line(e) for e in c.events)]
    if n >= limit:
        lines.append("… more events wait: call catch_up again.")
    return "\n".join([*lines, "", state_text])


def handlers_text(handlers: list[Any]) -> str:
    """``2 idle workflow runs: 3f2a… (hitl on h1, idle since 2026-…, waits for
    Answer); …``, or ``No idle workflow runs.``"""
    if not handlers:
        return "No idle workflow runs."
    parts = []
    for h in handlers:
        waits = ", ".join(sorted({str(w.get("event_type")) for w in h.active_waiters})) or "-"
        d = h.to_dict()
        parts.append(
            f"{h.handler_id} ({h.workflow} on {h.host or '-'}, idle since {d['idle_since']},"
            f" waits for {waits})"
        )
    noun = "run" if len(handlers) == 1 else "runs"
    return f"{len(handlers)} idle workflow {noun}: " + "; ".join(parts)


def started_text(handler_id: str) -> str:
    """``Started workflow run 3f2a…: follow it with get_workflow_run.``"""
    return f"Started workflow run {handler_id}: follow it with get_workflow_run."


def handler_text(h: Any) -> str:
    """One run in one line: ``Run 3f2a… (hitl on h1): running, idle since 2026-…,
    waits for Answer`` (and its result or error once finished)."""
    d = h.to_dict()
    line = f"Run {h.handler_id} ({h.workflow} on {h.host or '-'}): {h.status}"
    if h.idle_since is not None:
        line += f", idle since {d['idle_since']}"
    waits = ", ".join(sorted({str(w.get("event_type")) for w in h.active_waiters}))
    if waits:
        line += f", waits for {waits}"
    if h.resident_reason:
        line += f", kept resident: {h.resident_reason}"
    if h.release_requested_at is not None:
        line += ", release requested"
    if h.status == "completed":
        line += f", result: {_short(h.result)}"
    if h.error:
        line += f", error: {_short(h.error)}"
    return line


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def spawn_requests_text(requests: list[Any]) -> str:
    """One line per spawn request (``spawn request 3 (pool dev, developer):
    pending``), or ``No spawn requests.``"""
    if not requests:
        return "No spawn requests."
    return "\n".join(r.text for r in requests)


def tokens_text(tokens: list[Any]) -> str:
    """The named tokens, one line each (``list_tokens``; never a token)."""
    if not tokens:
        return "No named tokens (the operator token is not listed)."
    return "\n".join(t.text for t in tokens)
