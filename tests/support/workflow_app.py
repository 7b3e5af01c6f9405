"""LlamaIndex workflows the workflow tests host (real ``llama-index-workflows``).

``REACHED[topic]`` is when a run first reached its wait (this process's clock)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent

REACHED: dict[str, float] = {}


class Answer(Event):
    text: str


def _reached(topic: str) -> None:
    REACHED.setdefault(topic, time.time())


class HumanInTheLoop(Workflow):
    """Asks a question and waits for a human's Answer."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        topic = str(ev.get("topic"))
        _reached(topic)
        answer = await ctx.wait_for_event(Answer, timeout=3600)
        return StopEvent(result={"topic": topic, "answer": answer.text})


class TimedWait(Workflow):
    """Waits 1.5 s for an Answer; on timeout answers with the moment it timed out."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        topic = str(ev.get("topic"))
        _reached(topic)
        try:
            answer = await ctx.wait_for_event(Answer, timeout=1.5)
        except TimeoutError:
            return StopEvent(result={"topic": topic, "timed_out_at": time.time()})
        return StopEvent(result={"topic": topic, "answer": answer.text})


class Second(Event):
    first: str


class TwoQuestions(Workflow):
    """Waits for an Answer, then for another one (it parks twice)."""

    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Second:
        answer = await ctx.wait_for_event(Answer, waiter_id="first", timeout=3600)
        return Second(first=answer.text)

    @step
    async def second(self, ctx: Context, ev: Second) -> StopEvent:
        answer = await ctx.wait_for_event(Answer, waiter_id="second", timeout=3600)
        return StopEvent(result=[ev.first, answer.text])


class Unpicklable(Workflow):
    """Keeps a lock in its state, which its context cannot serialize."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("lock", threading.Lock())
        answer = await ctx.wait_for_event(Answer, timeout=3600)
        return StopEvent(result=answer.text)


hitl = HumanInTheLoop(timeout=None)
timed = TimedWait(timeout=None)
two = TwoQuestions(timeout=None)
unpicklable = Unpicklable(timeout=None)


async def unreleased(workflow: Workflow, answers: list[str], **start: Any) -> Any:
    """The result of a run that is never released: start it, answer each wait."""
    handler = workflow.run(**start)
    for text in answers:
        await asyncio.sleep(0.05)
        handler.ctx.send_event(Answer(text=text))
    return await handler
