"""A human-in-the-loop LlamaIndex workflow for ``corral workflows serve``
(docs/workflows.md): it drafts a reply, then waits for a human's Answer."""

from __future__ import annotations

from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent


class Answer(Event):
    approved: bool
    note: str = ""


class ReviewReply(Workflow):
    @step
    async def draft(self, ctx: Context, ev: StartEvent) -> StopEvent:
        draft = f"Dear {ev.get('customer')}, your refund is on its way."
        answer = await ctx.wait_for_event(Answer, timeout=24 * 3600)
        status = "sent" if answer.approved else "discarded"
        return StopEvent(result={"draft": draft, "status": status, "note": answer.note})


review = ReviewReply(timeout=None)
