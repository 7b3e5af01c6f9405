"""The cluster's workflow operations (mixed into ``corral.Cluster``).

Callers start runs, read them, list them and send them events; hosts declare the
workflows they serve, take their work, report their runs' transitions and release
idle runs. Arguments are validated here; each operation is one store transaction.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import TYPE_CHECKING, Any

from corral.errors import InvalidInputError
from corral.validation import (
    MAX_FLOAT,
    check_choice,
    check_id,
    check_limit,
    check_payload,
    check_text,
)
from corral.workflows.idle import RunState, StepState, Waiter, active_waiters, is_idle, wake_at
from corral.workflows.model import (
    FINISHED,
    HANDLER_STATUSES,
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
    "check_bool",
    "check_steps",
    "check_waiters",
]

HOST_STATES = ("idle", "busy", "resident", *FINISHED)
"""What a host reports of a run: idle (with its waits), busy, resident (idle but not
releasable, with the reason), or finished (completed, failed, cancelled)."""
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
MAX_WAITERS = 1000
_EVENT_TYPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
_HOST_KEYS = frozenset({"name", "idle_release_after"})
_WAITER_KEYS = frozenset({"step", "event_type", "waiter_id", "deadline"})


def _check_seconds(value: Any, field: str, *, zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
        or value > MAX_FLOAT
    ):
        what = "a non-negative" if zero else "a positive"
        raise InvalidInputError(f"{field} must be {what} number of seconds", field=field)
    return float(value)


def check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{field} must be true or false", field=field)
    return value


def _check_event_type(value: Any) -> str:
    if not isinstance(value, str) or not _EVENT_TYPE.match(value):
        raise InvalidInputError(
            "event_type must be an event class's name (letters, digits, _)", field="event_type"
        )
    return value


def _check_data(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{field} must be an object", field=field)
    check_payload(value, field)
    return value


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
                deadline = _check_seconds(deadline, f"{where}.deadline", zero=True)
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
    def run_workflow(self, workflow: str, /, **kwargs: Any) -> str:
        """Start a run of ``workflow`` with ``kwargs`` as its start event's fields; a
        live host serving it takes it. Returns the run's handler id.

        ``NotFoundError`` when no live host serves the workflow."""
        workflow = check_id(workflow, "workflow")
        _check_data(kwargs, "kwargs")
        handler_id = uuid.uuid4().hex
        return self.store.run_workflow(handler_id, workflow, kwargs, self.clock.now()).handler_id

    def get_handler(self, handler_id: str) -> Handler:
        """One run: its status, ``idle_since``, ``active_waiters``, and its result or
        error once finished; ``NotFoundError`` when unknown."""
        return self.store.get_handler(check_id(handler_id, "handler_id"))

    def list_handlers(
        self,
        status: str | None = None,
        idle: bool | None = None,
        idle_duration_gt: float | None = None,
        workflow: str | None = None,
        host: str | None = None,
        limit: int = 100,
    ) -> list[Handler]:
        """Runs, filtered by status, idleness, idle duration (seconds, strictly more),
        workflow and host; idle ones longest idle first, the others oldest first (at
        most ``limit``)."""
        return self.store.list_handlers(
            status=None if status is None else check_choice(status, HANDLER_STATUSES, "status"),
            idle=None if idle is None else check_bool(idle, "idle"),
            idle_duration_gt=None
            if idle_duration_gt is None
            else _check_seconds(idle_duration_gt, "idle_duration_gt", zero=True),
            workflow=None if workflow is None else check_id(workflow, "workflow"),
            host=None if host is None else check_id(host, "host"),
            limit=check_limit(limit),
            now=self.clock.now(),
        )

    def send_event(
        self, handler_id: str, event_type: str, data: dict[str, Any] | None = None
    ) -> Handler:
        """Send a run an event: ``event_type`` is the event class's name (``Answer``),
        ``data`` its fields. A released run is resumed first, on any host serving its
        workflow. Refused for a finished run."""
        return self.store.send_event(
            check_id(handler_id, "handler_id"),
            _check_event_type(event_type),
            {} if data is None else _check_data(data, "data"),
            self.clock.now(),
        )

    # --- hosts --------------------------------------------------------------------------
    def serve_workflows(self, host: str, workflows: list[dict[str, Any]]) -> list[WorkflowHost]:
        """Declare the workflows a host serves (replacing its previous list): each
        item has ``name`` and optionally ``idle_release_after``, the host's own release
        delay for that workflow (else the cluster's setting)."""
        host = check_id(host, "host")
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
                None if after is None else _check_seconds(after, "idle_release_after")
            )
        return self.store.serve_workflows(host, sorted(items.items()), self.clock.now())

    def take_workflow_work(self, host: str, limit: int = 100) -> WorkflowWork:
        """A host's work now: runs of its workflows to start or restore (each taken by
        one host only), events to deliver to its runs, and idle runs to release
        (idle longer than their release delay, or beyond ``max_resident_idle``).
        Counts as the host's sign of life."""
        return self.store.take_workflow_work(
            check_id(host, "host"), check_limit(limit), self.clock.now()
        )

    def report_handler(
        self,
        host: str,
        handler_id: str,
        state: str,
        waiters: list[dict[str, Any]] | None = None,
        result: Any = None,
        error: str | None = None,
        reason: str | None = None,
    ) -> Handler:
        """Report a run's transition from the host running it: ``idle`` (with its
        ``waiters``), ``busy``, ``resident`` (idle but not releasable: ``reason``),
        ``completed`` (``result``), ``failed`` (``error``) or ``cancelled``.

        ``idle_since`` is set on the transition into idleness and cleared when work
        resumes; ``workflow_idle`` and ``workflow_resumed`` events mark them."""
        state = check_choice(state, HOST_STATES, "state")
        checked = None if waiters is None else check_waiters(waiters)
        if result is not None:
            check_payload(result, "result")
        if error is not None:
            error = check_text(error, "error", max_len=20_000)
        if reason is not None:
            reason = check_text(reason, "reason", max_len=2000, allow_empty=False)
        if state == "resident" and reason is None:
            reason = "the host cannot checkpoint this run"
        wake = None
        if checked is not None:
            wake = wake_at(Waiter(w["event_type"], w["waiter_id"], w["deadline"]) for w in checked)
        return self.store.report_handler(
            check_id(host, "host"),
            check_id(handler_id, "handler_id"),
            state,
            waiters=checked,
            wake_at=wake,
            result=result,
            error=error,
            reason=reason,
            now=self.clock.now(),
        )

    def report_steps(self, host: str, handler_id: str, steps: dict[str, Any]) -> Handler:
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
            check_id(host, "host"),
            check_id(handler_id, "handler_id"),
            "idle" if is_idle(run) else "busy",
            waiters=waiters,
            wake_at=wake_at(w for _, w in active_waiters(run)),
            result=None,
            error=None,
            reason=None,
            now=self.clock.now(),
        )

    def release_handler(self, host: str, handler_id: str, checkpoint: dict[str, Any]) -> Handler:
        """Release an idle run: its ``checkpoint`` (the run's serialized state) is
        stored and the handler marked ``released`` in one transaction; only then may
        the host stop the run in memory. ``LeaseError`` unless the host runs it, it is
        idle and no event waits for it."""
        if not isinstance(checkpoint, dict):
            raise InvalidInputError("checkpoint must be an object", field="checkpoint")
        try:
            size = len(json.dumps(checkpoint, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"checkpoint must be JSON: {exc}", field="checkpoint") from None
        if size > MAX_CHECKPOINT_BYTES:
            raise InvalidInputError(
                f"checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes", field="checkpoint"
            )
        return self.store.release_handler(
            check_id(host, "host"), check_id(handler_id, "handler_id"), checkpoint, self.clock.now()
        )
