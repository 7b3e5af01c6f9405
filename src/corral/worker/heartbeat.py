"""The HeartbeatMonitor: a worker's periodic heartbeats, sent from the background.

A worker proves it lives by sending ``HeartbeatData`` every ``heartbeat_interval``
seconds from a background thread (or an asyncio task)::

    {"worker_id": "W1", "timestamp": 1704067200000, "health_status": "healthy",
     "current_tasks": ["123"], "capacity_available": 0,
     "metrics": {"cpu_usage": 0.4, "memory_usage": 21.3, "tasks_completed": 42,
                 "tasks_failed": 2, "uptime": 7200.0}}

CPU (percent of one core used by this process since the previous beat) and memory
(resident MB) come from psutil; health from ``corral.health.health_status`` with its
default thresholds unless others are given. Each heartbeat goes to every
destination (``corral.worker.destinations``), each with its own retries and alerting; the
cluster destination is the default and runs in the heartbeat thread, the others in
their own threads, so none can hold up another.

Beats are scheduled on a fixed grid (``next_beat``): a slow send does not make the
cadence drift, and a missed slot is skipped rather than sent in a burst.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import psutil

from corral.clock import Clock, SystemClock
from corral.errors import CorralError, InvalidInputError, StoreUnavailableError
from corral.health import DEFAULT_THRESHOLDS, HealthThresholds, health_status
from corral.types import Client, HealthStatus
from corral.worker.destinations import ClusterDestination, Delivery, Destination, RetryPolicy

if TYPE_CHECKING:
    import asyncio

__all__ = ["HeartbeatMonitor", "cluster_policy", "next_beat"]

log = logging.getLogger("corral.heartbeat")

_UNRECORDED_KEEP = 10  # alerts kept for the cluster while it cannot be reached


def cluster_policy(policy: RetryPolicy, interval: float) -> RetryPolicy:
    """The cluster destination's retries: ``policy`` with its tries fitting within one
    beat (``retry_delay`` at most ``interval / retry_attempts``). The cluster's beats
    are what keep the node's leases (it is dead after ``missed_beats`` intervals
    without one): a beat that failed in an outage is tried again within a fraction of
    a beat, not ``retry_delay`` later, past the node's window."""
    most = interval / max(1, policy.retry_attempts)
    if policy.retry_delay <= most:
        return policy
    return replace(policy, retry_delay=most)


def next_beat(previous: float, interval: float, now: float) -> float:
    """The next slot on the grid ``previous + k·interval`` that is after ``previous``
    and not before ``now`` (missed slots are skipped, not made up)."""
    due = previous + interval
    if due >= now:
        return due
    return previous + interval * math.ceil((now - previous) / interval)


class HeartbeatMonitor:
    """Sends a worker's heartbeats. ``cluster`` is any corral client (embedded or
    HTTP); ``destinations`` default to ``[ClusterDestination(cluster)]``.

    ``clock`` gives the payload's wall-clock timestamp; ``monotonic`` times the
    schedule and uptime; ``sleep`` is the retry delay; all three are injectable.
    """

    def __init__(
        self,
        worker_id: str,
        cluster: Client | None = None,
        *,
        heartbeat_interval: float = 5.0,
        capacity: int = 1,
        destinations: Iterable[Destination] | None = None,
        retry: RetryPolicy | None = None,
        thresholds: HealthThresholds | None = None,
        clock: Clock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
        on_node_lost: Callable[[Exception], None] | None = None,
    ) -> None:
        if heartbeat_interval <= 0:
            raise InvalidInputError(
                "heartbeat_interval must be positive", field="heartbeat_interval"
            )
        if capacity < 1:
            raise InvalidInputError("capacity must be at least 1", field="capacity")
        self.worker_id = worker_id
        self.cluster = cluster
        self.heartbeat_interval = float(heartbeat_interval)
        self.capacity = capacity
        self.thresholds = thresholds or DEFAULT_THRESHOLDS
        self.clock: Clock = clock or SystemClock()
        self._mono = monotonic
        self.on_node_lost = on_node_lost
        self.node_lost: Exception | None = None
        if destinations is None:
            if cluster is None:
                raise InvalidInputError("give a cluster or the destinations", field="cluster")
            destinations = [ClusterDestination(cluster)]
        policy = retry or RetryPolicy()
        self.deliveries = [
            Delivery(
                _Guard(d, self) if d.name == "cluster" else d,
                policy=cluster_policy(policy, self.heartbeat_interval)
                if d.name == "cluster"
                else policy,
                on_alert=self._alert,
                threaded=d.name != "cluster",
                sleep=sleep,
            )
            for d in destinations
        ]
        self._lock = threading.Lock()
        self._unrecorded: list[tuple[str, int, str]] = []  # alerts the cluster missed
        self._tasks: list[str] = []
        self._completed = 0
        self._failed = 0
        self._started_at = self._mono()
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # start the first measuring interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._atask: asyncio.Task[None] | None = None
        self.beats = 0

    # --- the monitor's API -------------------------------------------------------------
    def start(self) -> None:
        """Send a first heartbeat now, then one every ``heartbeat_interval``."""
        if self._thread is not None or self._atask is not None:
            return
        self._stop.clear()
        self._started_at = self._mono()
        self._thread = threading.Thread(target=self._loop, name="corral-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, *, final: Mapping[str, Any] | None = None, timeout: float = 5.0) -> None:
        """Stop beating. With ``final``, send one last heartbeat carrying those extra
        fields (e.g. ``{"status": "shutting-down"}``) to every destination first."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._thread = None
        if final is not None:
            self.beat(**final)
            for d in self.deliveries:
                d.flush(timeout)
        for d in self.deliveries:
            d.close(timeout)

    def add_task(self, task_id: int | str) -> None:
        with self._lock:
            if str(task_id) not in self._tasks:
                self._tasks.append(str(task_id))

    def remove_task(self, task_id: int | str) -> None:
        with self._lock:
            if str(task_id) in self._tasks:
                self._tasks.remove(str(task_id))

    def record_task_completion(self) -> None:
        with self._lock:
            self._completed += 1

    def record_task_failure(self) -> None:
        with self._lock:
            self._failed += 1

    def get_metrics(self) -> dict[str, Any]:
        """The document's ``WorkerMetrics``: cpu_usage (%), memory_usage (MB),
        tasks_completed, tasks_failed, uptime (s)."""
        with self._process.oneshot():
            cpu = self._process.cpu_percent(None)
            rss = self._process.memory_info().rss
        with self._lock:
            completed, failed = self._completed, self._failed
        return {
            "cpu_usage": round(cpu, 1),
            "memory_usage": round(rss / 2**20, 1),
            "tasks_completed": completed,
            "tasks_failed": failed,
            "uptime": round(self._mono() - self._started_at, 1),
        }

    def get_health_status(self, metrics: Mapping[str, Any] | None = None) -> HealthStatus:
        return health_status(metrics or self.get_metrics(), self.thresholds)

    # --- one beat -------------------------------------------------------------------------
    @property
    def current_tasks(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def payload(self) -> dict[str, Any]:
        """The document's ``HeartbeatData``, now."""
        metrics = self.get_metrics()
        tasks = self.current_tasks
        return {
            "worker_id": self.worker_id,
            "timestamp": int(self.clock.now() * 1000),
            "health_status": self.get_health_status(metrics),
            "current_tasks": tasks,
            "capacity_available": max(0, self.capacity - len(tasks)),
            "metrics": metrics,
        }

    def beat(self, **extra: Any) -> dict[str, Any]:
        """Send one heartbeat (plus ``extra`` fields) to every destination; the
        cluster's in this thread, the others handed to their threads."""
        payload = {**self.payload(), **extra}
        for d in self.deliveries:
            d.submit(payload)
            if self._unrecorded and not d.threaded and d.consecutive_failures == 0:
                self._record_unrecorded()  # the cluster took this beat: it is back
        self.beats += 1
        return payload

    # --- loops ------------------------------------------------------------------------------
    def _loop(self) -> None:
        due = self._mono()
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception:  # never let the heartbeat thread die
                log.exception("heartbeat failed")
            due = next_beat(due, self.heartbeat_interval, self._mono())
            if self._stop.wait(max(0.0, due - self._mono())):
                return

    async def start_async(self) -> None:
        """The asyncio variant of ``start``: beats from a task of the running loop
        (each beat hops to a thread once, the store being synchronous)."""
        import asyncio  # only asyncio users pay for it

        if self._thread is not None or self._atask is not None:
            return
        self._started_at = self._mono()
        self._atask = asyncio.get_running_loop().create_task(self._aloop())

    async def stop_async(self, *, final: Mapping[str, Any] | None = None) -> None:
        import asyncio

        task, self._atask = self._atask, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.to_thread(self.stop, final=final)

    async def _aloop(self) -> None:
        import asyncio

        due = self._mono()
        while True:
            try:
                await asyncio.to_thread(self.beat)
            except Exception:
                log.exception("heartbeat failed")
            due = next_beat(due, self.heartbeat_interval, self._mono())
            await asyncio.sleep(max(0.0, due - self._mono()))

    # --- failures --------------------------------------------------------------------------
    def _alert(self, destination: str, failures: int, error: str) -> None:
        if self.cluster is None or self.node_lost is not None:
            return
        try:
            self._record_alert(destination, failures, error)
        except StoreUnavailableError:
            # The cluster is what failed: the alert is recorded once a beat reaches it.
            with self._lock:
                if len(self._unrecorded) < _UNRECORDED_KEEP:
                    self._unrecorded.append((destination, failures, error))
            raise

    def _record_unrecorded(self) -> None:
        """After a beat the cluster took: record the alerts it could not take."""
        while self._unrecorded and self.node_lost is None:
            with self._lock:
                alert = self._unrecorded.pop(0)
            try:
                self._record_alert(*alert)
            except CorralError as exc:
                log.warning("could not record the alert for %s: %s", alert[0], exc)
                with self._lock:
                    self._unrecorded.insert(0, alert)
                return

    def _record_alert(self, destination: str, failures: int, error: str) -> None:
        assert self.cluster is not None
        self.cluster.alert(
            f"heartbeat destination {destination} of {self.worker_id} failed "
            f"{failures} times in a row: {error}"[:2000],
            self.worker_id,
            destination=destination,
            consecutive_failures=failures,
            error=error[:2000],
        )

    def _lost(self, exc: Exception) -> None:
        if self.node_lost is None:
            self.node_lost = exc
            log.warning(
                "node %s is no longer registered: %s",
                self.worker_id,
                exc,
                extra={"action": "node_lost"},
            )
            if self.on_node_lost is not None:
                self.on_node_lost(exc)

    def __enter__(self) -> HeartbeatMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Guard:
    """The cluster destination, except that "node not found" (the cluster has
    terminated this node) is reported once to the monitor instead of retried."""

    name = "cluster"

    def __init__(self, inner: Destination, monitor: HeartbeatMonitor) -> None:
        self.inner = inner
        self.monitor = monitor

    def send(self, payload: Mapping[str, Any]) -> None:
        from corral.errors import NotFoundError

        if self.monitor.node_lost is not None:
            return
        try:
            self.inner.send(payload)
        except NotFoundError as exc:
            self.monitor._lost(exc)
