"""The worker SDK: what a process imports to be a good citizen of a corral cluster.

    worker = corral.Worker("W1", "developer")
    worker.run(lambda task: do(task.description))     # the whole loop below

or, one task at a time::

    with worker.claim(wait=10) as task:
        if task is not None:
            task.result = do(task.description)         # completed on exit

A ``Worker`` registers (role, heartbeat interval), heartbeats from a
``HeartbeatMonitor`` (which also keeps its leases alive), claims the best task for
its role, completes it with its lease epoch (a late completion after the lease was
lost is refused: fencing), and retires itself when there is no work: catch up, mark
idle, keep trying to claim for ``idle_timeout_seconds``, then mark terminated,
broadcast a farewell and exit. A ``bootstrap_manager`` never retires itself.
SIGTERM (and SIGINT): one last heartbeat with ``status: "shutting-down"``, the held
tasks straight back to pending (no attempt is burned beyond the claim's), exit 0.

A task the operator cancels (``cancel_task``), or that the cluster takes back (a
stuck task requeued or failed), is named in a heartbeat's answer: the worker stops
naming it, runs what the handler registered with ``on_cancel`` (``corral worker``
stops the task's process: SIGTERM, SIGKILL after its grace), and
``cancelled(task_id)`` is true; the task's completion or failure is refused.

A handler reports progress with ``worker.progress(note)``: a task in progress with no
progress for its ``progress_timeout`` is stuck (docs/guardrails.md). Reports are
throttled to one per ``PROGRESS_REPORT_EVERY`` second per task; a refused report (the
task was taken back) stops the task's work as a cancellation does.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, ParamSpec, TypeVar

from corral.backoff import Backoff
from corral.defaults import MANAGER_ROLE, PROGRESS_REPORT_EVERY
from corral.errors import (
    CorralError,
    InvalidInputError,
    LeaseError,
    NotFoundError,
    StoreUnavailableError,
)
from corral.health import HealthThresholds
from corral.model import Task
from corral.outage import OUTAGE_TOLERANCE, check_tolerance, tolerant
from corral.types import Client
from corral.worker.destinations import ClusterDestination, Destination, RetryPolicy
from corral.worker.heartbeat import HeartbeatMonitor

__all__ = ["EXIT_LOST", "EXIT_OK", "EXIT_UNAVAILABLE", "Claimed", "TaskFailed", "Worker"]

log = logging.getLogger("corral.worker")

EXIT_OK = 0  # retired for lack of work, shut down by a signal, or max_tasks reached
EXIT_LOST = 1  # the cluster terminated this node (it went silent past its window)
EXIT_UNAVAILABLE = 3  # the store stayed unreachable for the whole outage_tolerance

_MAX_WAIT_CHUNK = 1.0  # longest single blocking claim, so a signal is acted on promptly
_ERROR_TAIL = 4000
# Polling a client without a blocking claim: 20 ms, doubling up to poll_interval.
_POLL_FIRST = 0.02

_P = ParamSpec("_P")
_R = TypeVar("_R")


class TaskFailed(CorralError):
    """Raise from a handler to fail the task with exactly this message."""

    code = "task_failed"
    hint = "The task was failed with this message; it is retried while attempts remain."

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        super().__init__(message, field=field)


class _Shutdown(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT; unwinds the handler."""


class Claimed:
    """A claimed task: every ``Task`` attribute, plus a settable ``result`` that is
    stored when the ``with`` block ends without an exception."""

    __slots__ = ("next", "result", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.result: Any = None
        self.next: Task | None = None  # the task claimed with the completion (run's loop)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def __repr__(self) -> str:
        return f"Claimed({self.task!r})"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, TaskFailed):
        text = str(exc)
    else:
        text = "".join(traceback.format_exception(exc)).strip()
    return text[-_ERROR_TAIL:] or type(exc).__name__


def _from_env(value: str | None, field: str, variable: str) -> str:
    """``value``, else the environment's ``variable``; an ``InvalidInputError`` naming
    ``field`` when neither is given."""
    if value is not None:
        return value
    found = os.environ.get(variable)
    if not found:
        raise InvalidInputError(f"{field}: give it, or set ${variable}", field=field)
    return found


class Worker:
    """A worker node. ``url`` defaults like ``corral.connect`` (``$CORRAL_URL``, else
    ``.corral/corral.db``); pass ``cluster`` to reuse an open client instead.

    ``agent_id`` and ``role`` default to ``$CORRAL_AGENT_ID`` and ``$CORRAL_ROLE``, which
    ``corral supervise`` and ``corral up`` set for the processes they start (with
    ``$CORRAL_URL`` and the node's own ``$CORRAL_TOKEN``), so a supervised worker needs no
    configuration. ``idle_timeout_seconds`` defaults to the cluster's setting;
    ``destinations`` are heartbeat destinations in addition to the cluster's;
    ``handle_signals`` installs the SIGTERM/SIGINT shutdown (main thread only).
    """

    def __init__(
        self,
        agent_id: str | None = None,
        role: str | None = None,
        *,
        url: str | None = None,
        cluster: Client | None = None,
        model: str | None = None,
        strength: str | None = None,
        heartbeat_interval: float = 5.0,
        capacity: int = 1,
        idle_timeout_seconds: float | None = None,
        poll_interval: float = 0.5,
        destinations: Iterable[Destination] = (),
        retry: RetryPolicy | None = None,
        thresholds: HealthThresholds | None = None,
        handle_signals: bool = True,
        outage_tolerance: float = OUTAGE_TOLERANCE,
    ) -> None:
        agent_id = _from_env(agent_id, "agent_id", "CORRAL_AGENT_ID")
        self.outage_tolerance = check_tolerance(outage_tolerance)
        role = _from_env(role, "role", "CORRAL_ROLE")
        self.agent_id = agent_id
        self.role = role
        self.model = model
        self.strength = strength
        self.heartbeat_interval = float(heartbeat_interval)
        self.poll_interval = poll_interval
        self.handle_signals = handle_signals
        self._owns_cluster = cluster is None
        if cluster is None:
            from corral.client import connect

            cluster = connect(url)
        self.cluster: Client = cluster
        # The loop's calls ride out an unreachable store (corral.outage); a shutdown
        # signal ends a wait between retries at once. The heartbeat keeps the plain
        # client: its destinations count failures and alert.
        self._stopping = threading.Event()
        self.calls: Client = tolerant(cluster, self.outage_tolerance, sleep=self._stopping.wait)
        self.idle_timeout_seconds = (
            float(idle_timeout_seconds)
            if idle_timeout_seconds is not None
            else float(self.calls.settings().idle_timeout_seconds)
        )
        # Tasks the operator cancelled while this worker held them (a heartbeat's
        # answer says so), and what stops each running task's work (``on_cancel``).
        self._cancel_lock = threading.Lock()
        self._cancelled: set[int] = set()
        self._stops: dict[int, Callable[[], None]] = {}
        # The tasks held now (for progress reports: their epochs), and when each last
        # reported progress (time.monotonic()).
        self._held: dict[int, Task] = {}
        self._reported: dict[int, float] = {}
        self.monitor = HeartbeatMonitor(
            agent_id,
            cluster,
            heartbeat_interval=heartbeat_interval,
            capacity=capacity,
            destinations=[
                ClusterDestination(cluster, on_cancelled=self._on_cancelled),
                *destinations,
            ],
            retry=retry,
            thresholds=thresholds,
        )
        self.completed = 0
        self.failed = 0
        self.refused = 0
        self.exit_reason: str | None = None
        self._registered = False
        self._closed = False
        self._critical = 0
        self._shutdown_requested = False
        self._old_handlers: dict[int, Any] = {}
        try:
            params = inspect.signature(cluster.claim_best_task).parameters
            self._claim_waits = "wait" in params
        except (TypeError, ValueError):
            self._claim_waits = False

    # --- lifecycle ------------------------------------------------------------------------
    def register(self) -> Worker:
        """Join the cluster and start heartbeating (idempotent)."""
        if not self._registered:
            self._install_signals()
            self._call(
                self.calls.register_node,
                self.agent_id,
                self.role,
                self.model,
                self.strength,
                self.heartbeat_interval,
                pid=os.getpid(),
            )  # the node's own process
            self._registered = True
            self.monitor.start()
            log.info(
                "worker %s registered as %s",
                self.agent_id,
                self.role,
                extra={"action": "worker_registered"},
            )
        return self

    def close(self, *, terminate: bool = True) -> None:
        """Stop heartbeating; with ``terminate``, mark the node terminated (its leases
        go back to the queue at once). Closes the client if the worker opened it."""
        if self._closed:
            return
        self._closed = True
        self.monitor.stop()
        if terminate and self._registered and self.monitor.node_lost is None:
            self._terminate()
        self._restore_signals()
        if self._owns_cluster:
            self.cluster.close()

    def __enter__(self) -> Worker:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- signals: SIGTERM / SIGINT -> graceful shutdown -------------------------------------
    def _install_signals(self) -> None:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._shutdown_requested:
            return
        self._shutdown_requested = True
        self._stopping.set()  # a wait for the store ends now
        log.info(
            "worker %s got signal %d: shutting down",
            self.agent_id,
            signum,
            extra={"action": "worker_signal"},
        )
        if self._critical == 0:  # else _call raises once the store call is over
            raise _Shutdown

    def _call(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """A store call the signal must not interrupt halfway."""
        self._critical += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self._critical -= 1
            if self._shutdown_requested and self._critical == 0 and self._old_handlers:
                raise _Shutdown

    def _terminate(self) -> None:
        """Mark the node terminated (its held tasks pending again at once). A store
        still unreachable after a shutdown signal is logged: the monitor recovers
        the leases once the node's window has passed."""
        try:
            self.calls.set_agent_status(self.agent_id, "terminated")
        except NotFoundError:
            pass
        except StoreUnavailableError as exc:
            log.warning(
                "worker %s could not mark itself terminated: %s",
                self.agent_id,
                exc,
                extra={"action": "worker_terminate_failed"},
            )

    def shutdown(self) -> None:
        """What SIGTERM does: a last heartbeat with ``status: "shutting-down"``, then
        terminated, so every held task is pending again at once."""
        self._shutdown_requested = True
        held = self.monitor.current_tasks
        if self.monitor.node_lost is None:
            self.monitor.stop(final={"status": "shutting-down"})
            self._terminate()
        self.exit_reason = "shutdown"
        log.info(
            "worker %s shut down; released tasks %s",
            self.agent_id,
            held or "none",
            extra={"action": "worker_shutdown"},
        )
        self.close(terminate=False)

    # --- the operator's cancellations -------------------------------------------------------
    def _on_cancelled(self, task_ids: list[int]) -> None:
        """A heartbeat's answer named ``task_ids`` as cancelled (the heartbeat thread):
        stop naming them, and stop their work in a thread of its own."""
        for task_id in task_ids:
            with self._cancel_lock:
                if task_id in self._cancelled:
                    continue
                self._cancelled.add(task_id)
                stop = self._stops.get(task_id)
            self.monitor.remove_task(task_id)
            log.warning(
                "task %s was cancelled by the operator or taken back%s",
                task_id,
                ": stopping its process" if stop is not None else "",
                extra={"action": "task_cancelled", "task_id": task_id},
            )
            if stop is not None:
                self._run_stop(task_id, stop)

    @staticmethod
    def _run_stop(task_id: int, stop: Callable[[], None]) -> None:
        threading.Thread(target=stop, name=f"corral-stop-{task_id}", daemon=True).start()

    def progress(self, note: str | None = None, *, task_id: int | None = None) -> bool:
        """Report progress on a held task (``task_id``; the one held when it is not
        given) with an optional ``note`` (at most 500 characters: longer is cut):
        its stuck deadline moves on (``report_progress``). At most one report per
        ``PROGRESS_REPORT_EVERY`` second per task is sent; True when this one was.
        A refused report (the lease was lost: the task was taken back or cancelled)
        stops the task's work as a cancellation does, and returns False. Safe from
        any thread."""
        with self._cancel_lock:
            if task_id is None:
                if len(self._held) != 1:
                    return False
                task_id = next(iter(self._held))
            task = self._held.get(task_id)
            now = time.monotonic()
            last = self._reported.get(task_id)
            if task is None or task_id in self._cancelled:
                return False
            if last is not None and now - last < PROGRESS_REPORT_EVERY:
                return False
            self._reported[task_id] = now
        if note is not None:
            note = note[:500]
        try:
            # The plain client: a report is not worth retrying through an outage.
            self.cluster.report_progress(task.id, self.agent_id, epoch=task.epoch, note=note)
        except (LeaseError, NotFoundError) as exc:
            log.warning(
                "progress on task %s refused: %s",
                task_id,
                exc,
                extra={"action": "progress_refused", "task_id": task_id},
            )
            self._on_cancelled([task_id])
            return False
        except StoreUnavailableError as exc:
            log.warning(
                "progress on task %s not reported: %s",
                task_id,
                exc,
                extra={"action": "progress_unreported", "task_id": task_id},
            )
            return False
        return True

    def cancelled(self, task_id: int) -> bool:
        """Whether the operator cancelled ``task_id`` while this worker held it (as
        a heartbeat's answer said): a long handler may check it and give up."""
        with self._cancel_lock:
            return task_id in self._cancelled

    @contextmanager
    def on_cancel(self, task_id: int, stop: Callable[[], None]) -> Iterator[None]:
        """While the block runs, ``stop`` is what a cancellation of ``task_id`` runs
        (in a thread of its own; at once when the cancellation is already known):
        how a handler stops the process it started for the task (``stop_child``)."""
        with self._cancel_lock:
            self._stops[task_id] = stop
            known = task_id in self._cancelled
        if known:
            self._run_stop(task_id, stop)
        try:
            yield
        finally:
            with self._cancel_lock:
                self._stops.pop(task_id, None)

    # --- claiming ---------------------------------------------------------------------------
    def _claim(self, wait: float | None) -> Task | None:
        """Claim now, or keep trying for ``wait`` seconds (the cluster's blocking claim
        when it has one, else polling with a short backoff)."""
        if self.monitor.node_lost is not None:
            raise self.monitor.node_lost
        deadline = time.monotonic() + (wait or 0.0)
        backoff = Backoff(base=_POLL_FIRST, cap=max(self.poll_interval, _POLL_FIRST))
        while True:
            remaining = deadline - time.monotonic()
            if self._claim_waits and remaining > 0:
                chunk = min(remaining, _MAX_WAIT_CHUNK)
                task = self._call(self.calls.claim_best_task, self.agent_id, self.role, wait=chunk)
            else:
                task = self._call(self.calls.claim_best_task, self.agent_id, self.role)
            if task is not None:
                return task
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self._claim_waits:
                time.sleep(min(backoff.next(), remaining))

    @contextmanager
    def claim(self, wait: float | None = None) -> Iterator[Claimed | None]:
        """Claim the best task (waiting up to ``wait`` seconds); yields None when there
        is none. Completes it with ``result`` when the block ends; an exception fails
        it with the error (and is not re-raised: the failure is recorded)."""
        self.register()
        task = self._claim(wait)
        if task is None:
            yield None
            return
        with self._hold(task) as held:
            yield held

    def _complete(self, task: Task, result: Any, *, chain: bool = False) -> Task | None:
        """Complete ``task``; with ``chain`` (and a client that has it) claim the next
        one in the same call (one commit per task) and return it."""
        nxt = None
        try:
            if chain:
                _, nxt = self._call(
                    self.calls.complete_and_claim,
                    task.id,
                    self.agent_id,
                    self.role,
                    task.epoch,
                    result,
                )
            else:
                self._call(self.calls.complete_task, task.id, self.agent_id, task.epoch, result)
        except InvalidInputError as exc:
            self._fail(task, TaskFailed(f"unusable result: {exc}"))
            return None
        except (LeaseError, NotFoundError) as exc:
            self.refused += 1
            log.warning(
                "completion of task %s refused (lease lost): %s",
                task.id,
                exc,
                extra={"action": "completion_refused", "task_id": task.id},
            )
            return None
        self.completed += 1
        self.monitor.record_task_completion()
        log.info("completed task %s", task.id, extra={"action": "task_completed"})
        return nxt

    def _fail(self, task: Task, exc: BaseException) -> None:
        error = _error_text(exc)
        try:
            self._call(self.calls.fail_task, task.id, self.agent_id, task.epoch, error, True)
        except (LeaseError, NotFoundError) as refused:
            self.refused += 1
            log.warning(
                "failure of task %s refused (lease lost): %s",
                task.id,
                refused,
                extra={"action": "failure_refused", "task_id": task.id},
            )
            return
        self.failed += 1
        self.monitor.record_task_failure()
        log.warning(
            "task %s failed: %s",
            task.id,
            error.splitlines()[-1] if error else "",
            extra={"action": "task_failed"},
        )

    # --- the loop -----------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Read the events since this node's cursor (STEP 1's catch_up); their count."""
        return len(self._call(self.calls.catch_up, self.agent_id).events)

    def run(self, handler: Callable[[Task], Any], *, max_tasks: int | None = None) -> int:
        """Claim and handle tasks until retired for lack of work, shut down by a
        signal, ``max_tasks`` handled, terminated by the cluster, or the store
        unreachable for longer than ``outage_tolerance``. Returns the exit code:
        ``EXIT_OK`` (0), ``EXIT_LOST`` (1) or ``EXIT_UNAVAILABLE`` (3)."""
        handled = 0
        try:
            self.register()
            task: Task | None = None
            while max_tasks is None or handled < max_tasks:
                task = task or self._claim(None) or self._idle()
                if task is None:
                    return EXIT_OK
                # Chain (finish and take the next in one call) unless this is the last.
                chain = max_tasks is None or handled + 1 < max_tasks
                with self._hold(task, chain=chain) as held:
                    held.result = handler(task)
                task = held.next
                handled += 1
                self.catch_up()
            self.exit_reason = "max_tasks"
            self.close()
            return EXIT_OK
        except _Shutdown:
            self.shutdown()
            return EXIT_OK
        except NotFoundError as exc:
            self.exit_reason = "lost"
            log.warning(
                "worker %s was terminated by the cluster: %s",
                self.agent_id,
                exc,
                extra={"action": "worker_lost"},
            )
            self.close(terminate=False)
            return EXIT_LOST
        except StoreUnavailableError as exc:
            self.exit_reason = "unavailable"
            log.error(
                "worker %s: the store stayed unreachable for %.0fs: %s",
                self.agent_id,
                self.outage_tolerance,
                exc,
                extra={"action": "worker_unavailable"},
            )
            self.close(terminate=False)
            return EXIT_UNAVAILABLE
        finally:
            if not self._closed and self.exit_reason is None:
                self.close()

    @contextmanager
    def _hold(self, task: Task, *, chain: bool = False) -> Iterator[Claimed]:
        """Run the body with ``task`` held; complete it on success (and, with
        ``chain``, claim the next task in the same call: ``held.next``), fail it with
        the error otherwise."""
        held = Claimed(task)
        with self._cancel_lock:  # a new lease: a former cancellation was another's
            self._cancelled.discard(task.id)
            self._held[task.id] = task
            self._reported.pop(task.id, None)
        self.monitor.add_task(task.id)
        log.info(
            "claimed task %s (epoch %s): %s",
            task.id,
            task.epoch,
            task.title,
            extra={"action": "task_claimed"},
        )
        try:
            yield held
        except Exception as exc:
            self._fail(task, exc)
        else:
            held.next = self._complete(task, held.result, chain=chain)
        finally:
            with self._cancel_lock:
                self._held.pop(task.id, None)
                self._reported.pop(task.id, None)
        self.monitor.remove_task(task.id)

    def _idle(self) -> Task | None:
        """No work: catch up, mark idle, keep claiming for ``idle_timeout_seconds``,
        then terminate, broadcast and return None. Returns a task if one arrives first
        (a bootstrap manager never retires: it waits for a task forever)."""
        self.catch_up()
        task = self._claim(None)
        if task is not None:
            return task
        self._call(self.calls.set_agent_status, self.agent_id, "idle")
        if self.role == MANAGER_ROLE:
            log.info(
                "manager %s idle; managers never retire",
                self.agent_id,
                extra={"action": "worker_idle"},
            )
            while True:
                task = self._claim(self.poll_interval)
                if task is not None:
                    return task
        log.info(
            "worker %s idle; retiring in %.1fs unless a task arrives",
            self.agent_id,
            self.idle_timeout_seconds,
            extra={"action": "worker_idle"},
        )
        deadline = time.monotonic() + self.idle_timeout_seconds
        while (remaining := deadline - time.monotonic()) > 0:
            task = self._claim(min(remaining, self.poll_interval))
            if task is not None:
                log.info(
                    "idle retirement cancelled: claimed task %s",
                    task.id,
                    extra={"action": "idle_cancelled"},
                )
                return task
        self.catch_up()  # the re-check
        task = self._claim(None)
        if task is not None:
            return task
        self._call(self.calls.set_agent_status, self.agent_id, "terminated")
        self._call(self.calls.broadcast, f"Node {self.agent_id} terminating due to lack of work")
        self.exit_reason = "idle"
        log.info(
            "worker %s terminated due to lack of work",
            self.agent_id,
            extra={"action": "worker_retired"},
        )
        self.close(terminate=False)
        return None
