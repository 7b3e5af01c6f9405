"""``LlamaHost``: runs LlamaIndex workflows for a corral cluster.

One asyncio task per resident run watches its event stream (with the package's
internal events): ``WorkflowIdleEvent`` means the run only waits on the outside
world, and the host reports it idle with its waits (read from ``Context.to_dict``)
and their deadlines (read from the runtime's tick journal: the moment a waiter was
added plus its timeout). A step starting again (``StepStateChanged`` RUNNING) is
reported busy. The host's loop (``step``) takes its work from the cluster: runs to
start or restore, events to deliver, idle runs to release.

Release is checkpoint first, stop second: the run's ``Context.to_dict()`` is stored
with the handler marked released in one transaction, and only then is the run
cancelled in memory, so a host killed in between leaves a resumable run and nothing
twice. A restored run gets its waiter deadlines re-armed: at each deadline the host
sends the waiter's timeout into the run, so a wait that would have timed out at T
still does. A run restored with no event for it (an operator's Resume) emits nothing
while it waits as before: the host judges it by the idle rule over its restored step
state and reports it idle. A run ``to_dict`` refuses (child runs) stays resident, and its handler
says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workflows import Context, Workflow
from workflows.events import Event, StepState, StepStateChanged, UnhandledEvent, WorkflowIdleEvent
from workflows.handler import WorkflowHandler
from workflows.runtime.types.step_id import StepId
from workflows.runtime.types.ticks import TickWaiterTimeout

from corral.daemonlog import event as _event
from corral.errors import CorralError, LeaseError
from corral.types import Client
from corral.workflows import idle as rule
from corral.workflows.model import HandlerRun, WorkflowWork

__all__ = ["LlamaHost", "Served"]

log = logging.getLogger("corral.workflows.llama")


@dataclass(frozen=True, slots=True)
class Served:
    """A workflow this host serves, with its own release delay (None: the cluster's
    ``idle_release_after``)."""

    workflow: Workflow
    idle_release_after: float | None = None


@dataclass(eq=False)
class _Run:
    handler_id: str
    name: str
    handler: WorkflowHandler
    deadlines: dict[str, float] = field(default_factory=dict)  # waiter id -> unix time
    idle: bool = False
    stopping: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


def default_host_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _plain(result: Any) -> Any:
    """A run's result as JSON data (its ``repr`` when JSON cannot carry it)."""
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError):
        return repr(result)
    return result


def _event_classes(root: type[Event] = Event) -> dict[str, list[type[Event]]]:
    found: dict[str, list[type[Event]]] = {}
    stack = [root]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.__name__, []).append(cls)
        stack.extend(cls.__subclasses__())
    return found


class LlamaHost:
    """Serve ``workflows`` (name -> ``Workflow`` or ``Served``) for the cluster
    ``client`` as host ``host``. ``run()`` serves until stopped; ``step()`` is one
    turn of the loop (take work, start, deliver, release)."""

    def __init__(
        self,
        client: Client,
        workflows: Mapping[str, Workflow | Served],
        *,
        host: str | None = None,
        poll_interval: float = 0.05,
        batch: int = 500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.served = {
            name: w if isinstance(w, Served) else Served(w) for name, w in workflows.items()
        }
        self.host = host or default_host_id()
        self.poll_interval = poll_interval
        self.batch = batch
        self.clock = clock
        self.resident: dict[str, _Run] = {}
        self._watchers: set[asyncio.Task[Any]] = set()
        self.ready = asyncio.Event()  # set once the cluster knows what this host serves

    # --- the loop -----------------------------------------------------------------------
    async def start(self) -> None:
        """Declare the served workflows to the cluster."""
        items = [
            {"name": name, "idle_release_after": s.idle_release_after}
            for name, s in sorted(self.served.items())
        ]
        await asyncio.to_thread(self.client.serve_workflows, self.host, items)
        log.info(
            "host %s serves %s",
            self.host,
            ", ".join(sorted(self.served)),
            extra=_event("workflows_served", host=self.host, workflows=sorted(self.served)),
        )

    async def step(self) -> WorkflowWork:
        """One turn: take this host's work and do it. Returns the work taken."""
        work = await asyncio.to_thread(self.client.take_workflow_work, self.host, self.batch)
        for r in work.runs:
            try:
                self._begin(r)
            except Exception as exc:  # a bad start or checkpoint fails that run only
                log.warning("workflow run %s did not start: %s", r.handler.handler_id, exc)
                await self._call(
                    self.client.report_handler,
                    self.host,
                    r.handler.handler_id,
                    "failed",
                    error=f"{type(exc).__name__}: {exc}",
                )
        for d in work.deliveries:
            self._deliver(d.handler_id, d.event_type, d.data)
        delivered = {d.handler_id for d in work.deliveries}
        for r in work.runs:
            run = self.resident.get(r.handler.handler_id)
            if r.checkpoint is None or run is None or run.handler_id in delivered:
                continue  # a new run, or one an event wakes: its own events say idle
            if all(d > self.clock() for d in run.deadlines.values()):  # none times out now
                run.tasks.append(asyncio.create_task(self._restored_idle(run)))
        if work.release:
            await asyncio.gather(*(self.release(h) for h in work.release))
        return work

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then release the idle runs and stop the rest."""
        await self.start()
        self.ready.set()
        try:
            while not stop.is_set():
                try:
                    work = await self.step()
                    busy = len(work.runs) >= self.batch or len(work.deliveries) >= self.batch
                except CorralError as exc:  # the cluster unreachable a moment: try again
                    log.warning("taking work failed: %s", exc)
                    busy = False
                if not busy:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_interval)
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Release every idle run; any other (busy, or not checkpointable) is reported
        failed (the host stopped under it) and cancelled."""
        for handler_id in list(self.resident):
            run = self.resident.get(handler_id)
            if run is None:
                continue
            if run.idle and await self.release(handler_id):
                continue
            run.stopping = True
            await self._call(
                self.client.report_handler,
                self.host,
                handler_id,
                "failed",
                error="the host stopped and could not release the run",
            )
            await self._stop(run)
        await asyncio.to_thread(self.client.serve_workflows, self.host, [])

    # --- runs -----------------------------------------------------------------------------
    def _begin(self, r: HandlerRun) -> None:
        served = self.served[r.handler.workflow]
        if r.checkpoint is None:
            handler = served.workflow.run(**r.start)
        else:
            ctx = Context.from_dict(served.workflow, r.checkpoint)
            handler = served.workflow.run(ctx=ctx)
        run = _Run(r.handler.handler_id, r.handler.workflow, handler)
        self.resident[run.handler_id] = run
        how = "started" if r.checkpoint is None else "restored from its checkpoint"
        log.info(
            "run %s (%s) %s",
            run.handler_id,
            run.name,
            how,
            extra=_event(
                "workflow_started" if r.checkpoint is None else "workflow_restored",
                handler_id=run.handler_id,
                workflow=run.name,
            ),
        )
        for w in r.handler.active_waiters:
            deadline = w.get("deadline")
            if deadline is not None:
                run.deadlines[w["waiter_id"]] = float(deadline)
                run.tasks.append(asyncio.create_task(self._rearm(run, w["step"], w["waiter_id"])))
        run.tasks.append(asyncio.create_task(self._journal(run)))
        watcher = asyncio.create_task(self._watch(run))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _rearm(self, run: _Run, step: str, waiter_id: str) -> None:
        """At the waiter's deadline, time it out (a resolved waiter ignores it)."""
        await asyncio.sleep(max(0.0, run.deadlines[waiter_id] - self.clock()))
        if run.stopping or run.handler.is_done():
            return
        adapter = self._runtime(run).get_external_adapter(run.handler.run_id)
        await adapter.send_event(
            TickWaiterTimeout(step_id=StepId.from_str(step), waiter_id=waiter_id)
        )

    def _runtime(self, run: _Run) -> Any:
        return self.served[run.name].workflow.runtime

    async def _journal(self, run: _Run) -> None:
        """Learn each waiter's deadline from the runtime's tick journal: the step
        result that added it carries its timeout and the moment it was added."""
        runtime = self._runtime(run)
        journal = getattr(runtime, "journal", None)
        if journal is None:
            return  # a runtime without a journal: waits are reported without deadlines
        try:
            async for record in journal(run.handler.run_id):
                tick = json.loads(record.data)
                tick = tick.get("value", tick) if isinstance(tick, dict) else {}
                if tick.get("type") != "step_result":
                    continue
                for result in tick.get("result") or ():
                    kind, waiter_id = result.get("type"), result.get("waiter_id")
                    if kind == "add_waiter" and waiter_id not in run.deadlines:
                        timeout = result.get("timeout")
                        if timeout is not None and tick.get("stamped_at") is not None:
                            run.deadlines[waiter_id] = float(tick["stamped_at"]) + float(timeout)
                    elif kind == "delete_waiter":
                        run.deadlines.pop(waiter_id, None)
        except (RuntimeError, asyncio.CancelledError):
            return

    async def _watch(self, run: _Run) -> None:
        """Follow one run's events until it ends; report its transitions and end."""
        try:
            async for ev in run.handler.stream_events(expose_internal=True):
                if isinstance(ev, WorkflowIdleEvent):
                    await self._report_idle(run)
                elif isinstance(ev, StepStateChanged) and ev.step_state == StepState.RUNNING:
                    if run.idle:
                        run.idle = False
                        await self._report(run, "busy")
                elif isinstance(ev, UnhandledEvent) and ev.idle and not run.idle:
                    await self._report_idle(run)
            result = await run.handler
        except asyncio.CancelledError:
            if not run.stopping:
                await self._finish(run, "cancelled")
            return
        except Exception as exc:
            if not run.stopping:
                await self._finish(run, "failed", error=f"{type(exc).__name__}: {exc}")
            return
        if not run.stopping:
            await self._finish(run, "completed", result=_plain(result))

    async def _finish(self, run: _Run, state: str, **fields: Any) -> None:
        run.stopping = True
        for t in run.tasks:
            t.cancel()
        self.resident.pop(run.handler_id, None)
        await self._report(run, state, **fields)

    def _waiters(self, run: _Run, snapshot: dict[str, Any]) -> list[dict[str, Any]]:
        waits = []
        for step_name, worker in sorted((snapshot.get("workers") or {}).items()):
            for w in worker.get("collected_waiters") or ():
                if w.get("resolved_event") is not None:
                    continue
                waiter_id = str(w.get("waiter_id", ""))
                waits.append(
                    {
                        "step": step_name,
                        "event_type": str(w.get("waiting_for_event", "")).rsplit(".", 1)[-1],
                        "waiter_id": waiter_id,
                        "deadline": run.deadlines.get(waiter_id),
                    }
                )
        return waits

    async def _report_idle(self, run: _Run) -> None:
        await asyncio.sleep(0)  # let the journal reader see the tick that added the wait
        run.idle = True
        try:
            snapshot = run.handler.ctx.to_dict()
        except Exception as exc:
            await self._report(run, "idle", waiters=[])
            await self._report(run, "resident", reason=f"cannot checkpoint: {exc}"[:2000])
            return
        await self._report(run, "idle", waiters=self._waiters(run, snapshot))

    async def _restored_idle(self, run: _Run) -> None:
        """Report a run restored without an event idle when its restored state is (the
        runtime emits no idle event for a state it starts in)."""
        await asyncio.sleep(0)  # the runtime takes its restored state first
        if run.idle or run.stopping or run.handler.is_done():
            return
        try:
            snapshot = run.handler.ctx.to_dict()
        except Exception:
            return  # not checkpointable: its release says why
        if rule.is_idle(_run_state(snapshot)):
            await self._report_idle(run)

    async def _report(self, run: _Run, state: str, **fields: Any) -> None:
        _log_state(run, state, fields)
        async with run.lock:
            await self._call(self.client.report_handler, self.host, run.handler_id, state, **fields)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except LeaseError as exc:
            log.warning("%s: %s", fn.__name__, exc)
        except CorralError as exc:
            log.error("%s failed: %s", fn.__name__, exc)
        return None

    def _deliver(self, handler_id: str, event_type: str, data: dict[str, Any]) -> None:
        run = self.resident.get(handler_id)
        if run is None:
            log.warning("event %s for %s, which is not resident here", event_type, handler_id)
            return
        candidates = _event_classes().get(event_type, [])
        if len(candidates) > 1:  # the same name in several modules: the one it waits for
            module = type(self.served[run.name].workflow).__module__
            candidates = [c for c in candidates if c.__module__ == module] or candidates[:1]
        if not candidates:
            log.warning("no event class %s for run %s", event_type, handler_id)
            return
        try:
            event = candidates[0](**data)
        except Exception as exc:
            log.warning("event %s for %s does not fit its class: %s", event_type, handler_id, exc)
            return
        run.idle = False  # not releasable until the run says it is idle again
        run.handler.ctx.send_event(event)

    async def release(self, handler_id: str) -> bool:
        """Release an idle resident run: checkpoint in the cluster's store (the
        handler marked released in the same transaction), then stop it here. False
        when it is not releasable now (busy, an event waiting, not checkpointable)."""
        run = self.resident.get(handler_id)
        if run is None:
            return False
        async with run.lock:
            if not run.idle or run.stopping or run.handler.is_done():
                return False
            try:
                snapshot = run.handler.ctx.to_dict()
            except Exception as exc:
                reason = f"cannot checkpoint: {exc}"[:2000]
                await self._call(
                    self.client.report_handler, self.host, handler_id, "resident", reason=reason
                )
                return False
            try:
                await asyncio.to_thread(
                    self.client.release_handler, self.host, handler_id, snapshot
                )
            except LeaseError as exc:
                log.info("run %s not released: %s", handler_id, exc)
                return False
            run.stopping = True
        log.info(
            "run %s (%s) released: checkpointed, no longer in memory",
            handler_id,
            run.name,
            extra=_event("workflow_released", handler_id=handler_id, workflow=run.name),
        )
        self.after_checkpoint(handler_id)
        await self._stop(run)
        return True

    def after_checkpoint(self, handler_id: str) -> None:
        """Called between a release's checkpoint and the run's stop (nothing by default;
        a test's host dies here to show that nothing is lost)."""

    async def _stop(self, run: _Run) -> None:
        self.resident.pop(run.handler_id, None)
        for t in run.tasks:
            t.cancel()
        if not run.handler.is_done():
            await run.handler.cancel_run()
        run.tasks.clear()


def _run_state(snapshot: dict[str, Any]) -> rule.RunState:
    """A run's raw step state as the idle rule reads it, from ``Context.to_dict``: each
    step's queued and in-progress work and its unresolved waits, and the events not
    yet routed to a step."""
    steps = {}
    for name, worker in (snapshot.get("workers") or {}).items():
        waits = tuple(
            rule.Waiter(str(w.get("waiting_for_event", "")), str(w.get("waiter_id", "")))
            for w in worker.get("collected_waiters") or ()
            if w.get("resolved_event") is None
        )
        queued, working = worker.get("queue") or (), worker.get("in_progress") or ()
        steps[str(name)] = rule.StepState(len(queued), len(working), 0, waits)
    return rule.RunState(
        running=bool(snapshot.get("is_running", True)),
        steps=steps,
        undelivered=len(snapshot.get("deliveries") or ()),
    )


def _log_state(run: _Run, state: str, fields: dict[str, Any]) -> None:
    """One line per state a run reports (idle and what it waits for, busy again,
    resident and why, finished); a failure is a warning."""
    if state == "idle":
        waits = ", ".join(sorted({str(w.get("event_type")) for w in fields.get("waiters", ())}))
        what = f"idle, waits for {waits}" if waits else "idle"
    elif state == "busy":
        what = "busy again"
    elif state == "resident":
        what = f"stays in memory: {fields.get('reason')}"
    elif fields.get("error"):
        what = f"{state}: {fields['error']}"
    else:
        what = state
    level = logging.WARNING if state == "failed" else logging.INFO
    log.log(
        level,
        "run %s (%s) %s",
        run.handler_id,
        run.name,
        what,
        extra=_event(f"workflow_{state}", handler_id=run.handler_id, workflow=run.name),
    )
