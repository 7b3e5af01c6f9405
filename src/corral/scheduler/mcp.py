"""The scheduler's MCP tools: ``get_assignment``, ``release_assignment``, ``notify``
and ``read_inbox`` (``corral.mcp.server`` registers them). ``agent_id`` is the caller,
as for every tool; the agent whose inbox a call names is ``recipient``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from corral.errors import LeaseError
from corral.scheduler import texts
from corral.scheduler.ops import activation_lost

__all__ = ["register_tools"]

Caller = Annotated[str, Field(description="Your node id (the runner's).")]
OptCaller = Annotated[str | None, Field(description="Your node id (optional).")]
Recipient = Annotated[str, Field(description="The agent whose inbox this is.")]


def register_tools(
    tool: Callable[[str], Callable[[Callable[..., str]], Any]],
    client: Any,
    touch: Callable[[str | None], None],
) -> None:
    """Add the tools to a server through its ``tool`` decorator."""

    @tool(
        "Activate the next agent as a runner: inbox first (most unread), then due cron "
        "overrides, then the stalest. mode: notification, exploration or hybrid."
    )
    def get_assignment(
        agent_id: Caller,
        mode: Annotated[str, Field(description="notification, exploration or hybrid.")] = (
            "hybrid"
        ),
    ) -> str:
        a = client.get_assignment(agent_id, mode)
        touch(agent_id)
        return texts.assignment_text(a)

    @tool("End an activation you hold, with what it did (posts, comments, inbox_read).")
    def release_assignment(
        agent_id: Caller,
        assignment_id: Annotated[int, Field(description="The assignment's id.")],
        epoch: Annotated[int, Field(description="The assignment's epoch.")],
        outcome: Annotated[
            dict[str, Any] | None, Field(description="Counts and free-form fields.")
        ] = None,
    ) -> str:
        try:
            agent = client.release_assignment(assignment_id, agent_id, epoch, outcome)
        except LeaseError as exc:  # over HTTP too: the hint is an activation's
            raise activation_lost(exc) from None
        touch(agent_id)
        return texts.released_text(agent)

    @tool("Put an item in an agent's inbox; agents with unread items are activated first.")
    def notify(
        recipient: Recipient,
        payload: Annotated[Any, Field(description="The item (JSON, at most 64 KiB).")],
        agent_id: OptCaller = None,
    ) -> str:
        touch(agent_id)
        return texts.notified_text(client.notify(recipient, payload))

    @tool("An agent's unread inbox items, oldest first; they are marked read.")
    def read_inbox(
        recipient: Recipient,
        limit: Annotated[int, Field(description="At most this many items.")] = 100,
        agent_id: OptCaller = None,
    ) -> str:
        touch(agent_id)
        return texts.inbox_text(client.read_inbox(recipient, limit))

    _ = (get_assignment, release_assignment, notify, read_inbox)
