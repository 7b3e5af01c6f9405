"""The scheduler's MCP tool written by hand: ``release_assignment`` (a lost lease
is an activation's, over HTTP too). ``get_assignment``, ``notify`` and ``read_inbox``
are made from their operations (``corral.mcp.server``): ``agent_id`` is the caller, as
for every tool; the agent whose inbox a call names is ``recipient``."""

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

    _ = release_assignment
