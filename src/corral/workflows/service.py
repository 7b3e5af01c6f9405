"""The cluster's workflow operations (mixed into ``corral.Cluster``).

Callers start runs, read them, list them and send them events; operators release an
idle run now and resume a released one; hosts declare the workflows they serve, take
their work, report their runs' transitions and release idle runs. Each parameter
carries its rule (``corral.params`` and the types below, run by ``@checked``); the
body checks only what has several fields at once (the served workflows, a run's waits
and steps). Each operation is one store transaction.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from corral.errors import InvalidInputError
from corral.params import (
    HOST_STATES,
    ActorName,
    Checkpoint,
    EventType,
    Flag,
    HandlerStatusName,
    HostState,
    JsonObject,
    JsonValue,
    Limit,
    NodeId,
    RunError,
    RunReason,
    SecondsFromZero,
)
from corral.tokens import OPERATOR
from corral.validation import (
    MAX_CHECKPOINT_BYTES,
    check_id,
    check_object,
    check_seconds,
    check_text,
    checked,
)
from corral.workflows.idle import RunState, StepState, Waiter, active_waiters, is_idle, wake_at
from corral.workflows.model import (
    Handler,
    WorkflowHost,
    WorkflowWork,
)

if TYPE_CHECKING:
    from corral.clock import Clock
    from corral.store import Store

__all__ = [
    "HOST_STATES",
    "MAX_CHECKPOINT_BYTES",
    "WorkflowOperations",
    "check_steps",
    "check_waiters",
]

MAX_WAITERS = 1000
_HOST_KEYS = frozenset({"name", "idle_release_after"})
_WAITER_KEYS = frozenset({"step", "event_type", "waiter_id", "deadline"})


def check_waiters(value: Any) -> list[dict[str, Any]]:
    """A run's outstanding waits as a host reports them: ``step``, ``event_type``,
    optional ``waiter_id`` and ``deadline`` (unix time or null)."""
    field = "waiters"
    if not isinstance(value, list) or len(value) > MAX_WAITERS:
        raise InvalidInputError(f"{field} must be a list of at most {MAX_WAITERS}", field=field)
    out = []
    for i, w in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(w, dict) or set(w) - _WAITER_KEYS or not {"step", "event_type"} <= set(w):
            raise InvalidInputError(
                f"{where} must be an object with step, event_type, waiter_id, deadline",
                field=field,
            )
        deadline = w.get("deadline")
        if deadline is not None:
            try:
                deadline = check_seconds(deadline, f"{where}.deadline", zero=True)
            except InvalidInputError as exc:
                raise InvalidInputError(str(exc), field=field) from None
        out.append(
            {
                "step": check_text(w["step"], f"{where}.step", max_len=200, allow_empty=False),
                "event_type": check_text(w["event_type"], f"{where}.event_type", max_len=400),
                "waiter_id": check_text(w.get("waiter_id", ""), f"{where}.waiter_id", max_len=400),
                "deadline": deadline,
            }
        )
    return out


_STEP_KEYS = frozenset({"queue", "in_progress", "backoff", "waiters"})


def check_steps(value: Any) -> RunState:
    """A run's raw step state as a host reports it: step name -> ``queue``,
    ``in_progress``, ``backoff`` (counts) and ``waiters`` (``event_type``,
    ``waiter_id``, ``deadline``)."""
    field = "steps"
    if not isinstance(value, dict) or len(value) > MAX_WAITERS:
        raise InvalidInputError(f"{field} must map step names to their state", field=field)
    steps = {}
    for name, st in value.items():
        where = f"{field}[{name!r:.40}]"
        check_text(name, field, max_len=200, allow_empty=False)
        if not isinstance(st, dict) or set(st) - _STEP_KEYS:
            raise InvalidInputError(
                f"{where} must be an object with queue, in_progress, backoff, waiters",
                field=field,
            )
        counts = []
        for key in ("queue", "in_progress", "backoff"):
            n = st.get(key, 0)
            if isinstance(n, float) and n.is_integer():
                n = int(n)  # JSON's integers include 3.0
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2**31:
                raise InvalidInputError(f"{where}.{key} must be a count", field=field)
            counts.append(n)
        raw = st.get("waiters", [])
        if not isinstance(raw, list):
            raise InvalidInputError(f"{where}.waiters must be a list", field=field)
        waits = check_waiters([{**w, "step": name} if isinstance(w, dict) else w for w in raw])
        queue, in_progress, backoff = counts
        steps[name] = StepState(
            queue,
            in_progress,
            backoff,
            tuple(Waiter(w["event_type"], w["waiter_id"], w["deadline"]) for w in waits),
        )
    return RunState(steps=steps)


class WorkflowOperations:
    """The workflow operations of ``corral.Cluster`` (its ``store`` and ``clock``)."""

    store: Store
    clock: Clock

    # --- callers ----------------------------------------------------------------------
    def run_workflow(self, workflow: NodeId, /, **kwargs: Any) -> str:
        """Start a run of ``workflow`` with ``kwargs`` as its start event's fields; a
        live host serving it takes it. Returns the run's handler id.

        ``NotFoundError`` when no live host serves the workflow."""
        # ``@checked`` leaves a positional-only parameter alone (a start event may have
        # a field named ``workflow``): its rule (``NodeId``'s) runs here, and the
        # fields are one JSON object (``JsonObject``'s rule).
        workflow = check_id(workflow, "workflow")
        check_object(kwargs, "kwargs")
        handler_id = uuid.uuid4().hex
        return self.store.run_workflow(handler_id, workflow, kwargs, self.clock.now()).handler_id

    @checked
    def get_handler(self, handler_id: NodeId) -> Handler:
        """One run: its status, ``idle_since``, ``active_waiters``, and its result or
        error once finished; ``NotFoundError`` when unknown."""
        return self.store.get_handler(handler_id)

    @checked
    def list_handlers(
        self,
        status: HandlerStatusName | None = None,
        idle: Flag | None = None,
        idle_duration_gt: SecondsFromZero | None = None,
        workflow: NodeId | None = None,
        host: NodeId | None = None,
        limit: Limit = 100,
    ) -> list[Handler]:
        """Runs, filtered by status, idleness, idle duration (seconds, strictly more),
        workflow and host; idle ones longest idle first, the others oldest first (at
        most ``limit``)."""
        return self.store.list_handlers(
            status=status,
            idle=idle,
            idle_duration_gt=idle_duration_gt,
            workflow=workflow,
            host=host,
            limit=limit,
            now=self.clock.now(),
        )

    @checked
    def send_event(
        self, handler_id: NodeId, event_type: EventType, data: JsonObject | None = None
    ) -> Handler:
        """Send a run an event: ``event_type`` is the event class's name (``Answer``),
        ``data`` its fields. A released run is resumed first, on any host serving its
        workflow. Refused for a finished run."""
        return self.store.send_event(
            handler_id, event_type, {} if data is None else data, self.clock.now()
        )

    # --- operators ------------------------------------------------------------------------
    @checked
    def release_workflow(self, handler_id: NodeId, *, actor: ActorName | None = None) -> Handler:
        """Ask that an idle run be released now, whatever its delay: its host's next
        ``take_workflow_work`` lists it for release; a ``workflow_release_requested``
        event names the actor.

        The host then releases it as any other (it checkpoints the run and calls
        ``release_handler``). The request lasts while the run stays idle on its host:
        it ends when the run is released, gets work again, is kept resident or
        finishes. A run that is not idle on a host (busy, not yet taken, released,
        finished), one kept resident (``resident_reason``) and one whose release was
        asked for already are refused with ``ConflictError``; nothing changes.
        ``actor`` is who acts (``operator`` when not given; the server names the
        caller)."""
        actor = OPERATOR if actor is None else actor
        return self.store.request_release(handler_id, actor, self.clock.now())

    @checked
    def resume_workflow(self, handler_id: NodeId, *, actor: ActorName | None = None) -> Handler:
        """Resume a released run now, without an event: a host serving its workflow
        restores it at its next poll; a ``workflow_resume_requested`` event names the
        actor.

        The run is due at once, as ``send_event`` makes it before delivering. The
        restored run waits again on what it waited for (and is released again by
        the policy when it stays idle). A run that is not released is refused with
        ``ConflictError``; nothing changes. ``actor`` is who acts (``operator`` when not
        given; the server names the caller)."""
        actor = OPERATOR if actor is None else actor
        return self.store.resume(handler_id, actor, self.clock.now())

    # --- hosts --------------------------------------------------------------------------
    @checked
    def serve_workflows(self, host: NodeId, workflows: list[dict[str, Any]]) -> list[WorkflowHost]:
        """Declare the workflows a host serves (replacing its previous list): each
        item has ``name`` and optionally ``idle_release_after``, the host's own release
        delay for that workflow (else the cluster's setting)."""
        if not isinstance(workflows, list) or len(workflows) > 1000:
            raise InvalidInputError("workflows must be a list of at most 1000", field="workflows")
        items: dict[str, float | None] = {}
        for i, w in enumerate(workflows):
            if not isinstance(w, dict) or set(w) - _HOST_KEYS or "name" not in w:
                raise InvalidInputError(
                    f"workflows[{i}] must be an object with name and idle_release_after",
                    field="workflows",
                )
            after = w.get("idle_release_after")
            items[check_id(w["name"], "workflows")] = (
                None if after is None else check_seconds(after, "idle_release_after")
            )
        return self.store.serve_workflows(host, sorted(items.items()), self.clock.now())

    @checked
    def take_workflow_work(self, host: NodeId, limit: Limit = 100) -> WorkflowWork:
        """A host's work now: runs of its workflows to start or restore (each taken by
        one host only), events to deliver to its runs, and idle runs to release
        (idle longer than their release delay, or beyond ``max_resident_idle``).
        Counts as the host's sign of life."""
        return self.store.take_workflow_work(host, limit, self.clock.now())

    @checked
    def report_handler(
        self,
        host: NodeId,
        handler_id: NodeId,
        state: HostState,
        waiters: list[dict[str, Any]] | None = None,
        result: JsonValue = None,
        error: RunError | None = None,
        reason: RunReason | None = None,
    ) -> Handler:
        """Report a run's transition from the host running it: ``idle`` (with its
        ``waiters``), ``busy``, ``resident`` (idle but not releasable: ``reason``),
        ``completed`` (``result``), ``failed`` (``error``) or ``cancelled``.

        ``idle_since`` is set on the transition into idleness and cleared when work
        resumes; ``workflow_idle`` and ``workflow_resumed`` events mark them."""
        waits = None if waiters is None else check_waiters(waiters)
        if state == "resident" and reason is None:
            reason = "the host cannot checkpoint this run"
        wake = None
        if waits is not None:
            wake = wake_at(Waiter(w["event_type"], w["waiter_id"], w["deadline"]) for w in waits)
        return self.store.report_handler(
            host,
            handler_id,
            state,
            waiters=waits,
            wake_at=wake,
            result=result,
            error=error,
            reason=reason,
            now=self.clock.now(),
        )

    @checked
    def report_steps(self, host: NodeId, handler_id: NodeId, steps: dict[str, Any]) -> Handler:
        """Report a run's raw step state from the host running it (each step's
        ``queue``, ``in_progress``, ``backoff`` counts and ``waiters``): corral judges
        it idle or busy by the idle rule (``corral.workflows.idle.is_idle``) and
        records the transition as ``report_handler`` does."""
        run = check_steps(steps)
        waiters = [
            {
                "step": name,
                "event_type": w.event_type,
                "waiter_id": w.waiter_id,
                "deadline": w.deadline,
            }
            for name, w in active_waiters(run)
        ]
        return self.store.report_handler(
            host,
            handler_id,
            "idle" if is_idle(run) else "busy",
            waiters=waiters,
            wake_at=wake_at(w for _, w in active_waiters(run)),
            result=None,
            error=None,
            reason=None,
            now=self.clock.now(),
        )

    @checked
    def release_handler(self, host: NodeId, handler_id: NodeId, checkpoint: Checkpoint) -> Handler:
        """Release an idle run: its ``checkpoint`` (the run's serialized state) is
        stored and the handler marked ``released`` in one transaction; only then may
        the host stop the run in memory. ``LeaseError`` unless the host runs it, it is
        idle and no event waits for it."""
        return self.store.release_handler(host, handler_id, checkpoint, self.clock.now())
