"""Riding out an unreachable store: the retry every long-lived client loop shares.

A worker, a runner, a supervisor's link to the cluster: when ``corral serve`` restarts
or PostgreSQL drops its sessions, their calls fail with ``StoreUnavailableError`` for
a moment. ``Tolerant(client, outage_tolerance=60)`` is the same client whose calls
retry through such an outage with capped, jittered backoff (``corral.backoff``) for up
to ``outage_tolerance`` seconds from the call's first failure, and raise the last
error once that window is spent (the CLI's exit code 3).

A call is sent again only when doing so cannot act twice:

- the request never reached a server, or the server answered 503 (the store refused
  it, nothing was changed): any call;
- the request was sent and its answer lost (``CallLost``: the server may have
  committed it): only calls that are safe to repeat. A claim carries an idempotency
  key (one per call, the same on every retry; the HTTP client's ``keyed``), which the
  store records in the claim's own transaction, so the retry returns the task the
  lost answer held instead of taking another. A completion whose answer was lost and
  whose retry is refused is checked: the task done by this node at this epoch is the
  completion's answer.

Heartbeats, alerts and metrics samples are not retried here: the heartbeat
destinations count their own failures and alert after ``alert_after`` in a row
(``corral.worker.destinations``). ``policy`` is the pure part: how long to wait
before retry ``attempt``, or None when the window is spent.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

from corral.backoff import delay
from corral.errors import InvalidInputError, LeaseError, StoreUnavailableError

__all__ = [
    "OUTAGE_TOLERANCE",
    "CallLost",
    "OutagePolicy",
    "Tolerant",
    "check_tolerance",
    "tolerant",
]

log = logging.getLogger("corral.outage")

OUTAGE_TOLERANCE = 60.0  # seconds a worker rides out an unreachable store by default
MAX_OUTAGE_TOLERANCE = 600.0  # the store keeps a claim's idempotency key this long
RETRY_FIRST = 0.1  # the first retry's delay (seconds), doubling ...
RETRY_CAP = 5.0  # ... up to this
RETRY_JITTER = 0.5  # each delay scaled by a factor drawn from [0.5, 1]

# Not retried: a beat is replaced by the next one, and the destinations count failures.
_NOT_RETRIED = frozenset({"heartbeat", "alert", "record_metrics", "close"})
# Sent again after a lost answer although they may have acted: their repetition is
# harmless (the same state written again, a read) or detected (keys, fencing).
_REPEATABLE = frozenset(
    {
        "settings",
        "register_node",
        "list_nodes",
        "get_node",
        "set_agent_status",
        "terminate_node",
        "touch",
        "catch_up",
        "metrics_series",
        "list_tasks",
        "get_task",
        "claim_best_task",
        "complete_task",
        "complete_and_claim",
        "fail_task",
        "assess_workload",
        "read_state",
        "read_state_text",
        "events",
        "broadcast",
        "stats",
        "list_processes",
        "report_processes",
        "process_actions",
        "list_handlers",
        "get_handler",
        "list_agents",
        "get_agent",
        "read_inbox",
        "release_assignment",
        "list_assignments",
        "spawn_requests",
        "ack_process_action",
        # An activation granted by a lost answer is a lease with a TTL: its agent waits
        # for that TTL, as after a runner's crash (no key yet: docs/worker.md).
        "get_assignment",
    }
)
_KEYED = frozenset({"claim_best_task", "complete_and_claim"})


class CallLost(StoreUnavailableError):
    """The request was sent and no whole answer came back: the server may have
    acted on it (killed after its commit, before its reply)."""

    code = "unavailable"


def check_tolerance(value: Any, field: str = "outage_tolerance") -> float:
    """``value`` as a number of seconds from 0 to ``MAX_OUTAGE_TOLERANCE``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_OUTAGE_TOLERANCE
    ):
        raise InvalidInputError(
            f"{field} must be a number of seconds from 0 to {MAX_OUTAGE_TOLERANCE:g}; "
            f"got {value!r:.40}",
            field=field,
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class OutagePolicy:
    """How a call rides out an outage: retries after ``first``, ``2·first`` ... up to
    ``cap`` seconds (each scaled by a jitter factor from ``[1 - jitter, 1]``), for at
    most ``tolerance`` seconds after the call's first failure."""

    tolerance: float = OUTAGE_TOLERANCE
    first: float = RETRY_FIRST
    cap: float = RETRY_CAP
    jitter: float = RETRY_JITTER

    def wait(
        self, attempt: int, failing_for: float, rand: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait before retry ``attempt`` (0 for the first) of a call that
        has been failing for ``failing_for`` seconds; None once the window is spent.
        The last retry falls at the window's end, not after it."""
        left = self.tolerance - failing_for
        if left <= 0:
            return None
        pause = delay(attempt, base=self.first, cap=self.cap, jitter=self.jitter, rand=rand)
        return min(pause, left)


class Tolerant:
    """``client`` whose operations ride out an unreachable store (module docstring).

    ``sleep(seconds)`` waits between retries and returns True to give up at once
    (a worker's shutdown: an ``Event.wait``); ``monotonic`` and ``rand`` are
    injectable. ``outages`` counts the calls that met an outage, ``retries`` their
    retries. Any attribute that is not an operation is the client's own."""

    def __init__(
        self,
        client: Any,
        outage_tolerance: float = OUTAGE_TOLERANCE,
        *,
        policy: OutagePolicy | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.policy = policy or OutagePolicy(check_tolerance(outage_tolerance))
        self._sleep = sleep
        self._mono = monotonic
        self._rand = rand
        self.outages = 0
        self.retries = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if name.startswith("_") or name in _NOT_RETRIED or not callable(attr):
            return attr
        if self.policy.tolerance <= 0:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, attr, *args, **kwargs)

        return call

    def call(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (operation ``name`` of the client), retried through
        an outage."""
        key = _new_key() if name in _KEYED else None
        started: float | None = None
        attempt = 0
        lost = False  # an earlier try may have acted
        while True:
            try:
                with self._keyed(key):
                    result = fn(*args, **kwargs)
            except CallLost as exc:
                lost = True
                if name not in _REPEATABLE:
                    raise
                error: StoreUnavailableError = exc
            except StoreUnavailableError as exc:
                error = exc
            except LeaseError:
                if lost and name == "complete_task":
                    return self._completed_already(*args, **kwargs)
                raise
            else:
                if started is not None:
                    log.info(
                        "%s: the store is back after %.1fs (%d retries)",
                        name,
                        self._mono() - started,
                        attempt,
                        extra={"action": "store_back"},
                    )
                return result
            now = self._mono()
            if started is None:
                started = now
                self.outages += 1
            pause = self.policy.wait(attempt, now - started, self._rand)
            if pause is None:
                log.error(
                    "%s: the store stayed unreachable for %.0fs: giving up",
                    name,
                    now - started,
                    extra={"action": "store_gone"},
                )
                raise error
            if attempt == 0:
                log.warning(
                    "%s: the store is unreachable (%s); retrying for up to %.0fs",
                    name,
                    error,
                    self.policy.tolerance,
                    extra={"action": "store_unreachable"},
                )
            if self._sleep(pause):
                raise error  # told to stop waiting
            attempt += 1
            self.retries += 1

    def _keyed(self, key: str | None) -> AbstractContextManager[Any]:
        keyed = getattr(self.client, "keyed", None)
        if key is None or keyed is None:
            return nullcontext()
        return cast("AbstractContextManager[Any]", keyed(key))

    def _completed_already(
        self, task_id: Any, node_id: str, epoch: int | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """A completion refused on its retry after a lost answer: the task, if the lost
        try did complete it (done, by this node, at this epoch); else the refusal."""
        task = self.call("get_task", self.client.get_task, task_id)
        if task.status == "done" and task.assigned_to == node_id and epoch in (None, task.epoch):
            return task
        raise LeaseError(f"task {task_id} is no longer held by {node_id}", field="task_id")

    def __enter__(self) -> Tolerant:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()


def _new_key() -> str:
    return uuid.uuid4().hex


def tolerant(client: Any, outage_tolerance: float = OUTAGE_TOLERANCE, **options: Any) -> Any:
    """``client`` riding out outages (a ``Tolerant``), typed as the client it wraps."""
    if isinstance(client, Tolerant):
        return client
    return Tolerant(client, outage_tolerance, **options)
