"""The queue's metrics for ``/metrics``, derived from the event log, and the gauges
the alert rules read (``deploy/prometheus/alerts.yml``).

``QueueCounts`` turns events into counts: each ``task_claimed`` event carries the
task's ``created_at`` (its wait is the claim's time minus it) and its role; each
``task_completed`` its ``claimed_at`` (its run is the completion's time minus it); an
event with ``outcome: failed`` is a task failed for good, a ``lease_recovered`` one a
lease taken back from a dead node (unlike ``corral_lease_recoveries_total``, which
counts the events still in the log, this counter never drops when events are
pruned). A task's role is its claim's (remembered while the task is in flight), else
its holder's (the node's registered role), else ``unknown``. ``QueueCollector``
reads the events after its cursor at scrape time, so no request does any extra
read: the counts start at the first scrape (a Prometheus counter starting at 0) and
follow the whole cluster's events, whichever process served the calls.

``AlertStateCollector`` reads, at scrape time, what the alert rules need beyond the
counters: each supervised process's restart count and ``restart-exhausted`` flag,
the oldest pending spawn request's age, and the idle workflow runs past their
waiters' deadline.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from corral import alerts
from corral.model import Event

if TYPE_CHECKING:
    from corral.cluster import Cluster

__all__ = [
    "RUN_BUCKETS",
    "WAIT_BUCKETS",
    "AlertStateCollector",
    "QueueCollector",
    "QueueCounts",
]

# seconds: a task's wait (created to claimed) and its run (claimed to completed)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
RUN_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 600, 1800, 3600, 4 * 3600)
_BATCH = 10_000
_MAX_BATCHES = 10  # events read per scrape at most (the rest at the next one)
UNKNOWN = "unknown"
# events after which a task is no longer held by its claim (beside those with an outcome)
_ENDS_CLAIM = frozenset({"task_completed", "task_cancelled", "task_requeued"})


class _Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, seen = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            seen += n
            out.append((repr(float(bound)), float(seen)))
        out.append(("+Inf", float(seen + self.counts[-1])))
        return out


class QueueCounts:
    """Waits, runs, completions and failures by role, from events fed in seq order."""

    def __init__(self) -> None:
        self.wait: dict[str, _Histogram] = {}
        self.run: dict[str, _Histogram] = {}
        self.completed: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.recovered: dict[str, int] = {}
        self.in_flight: dict[int, str] = {}  # task id -> its claim's role

    def observe(self, events: Iterable[Event], node_roles: Mapping[str, str]) -> None:
        """Count ``events``; ``node_roles`` (node id -> role) names the role of a task
        whose claim came before the counting began (or a claim without one)."""
        for e in events:
            d = e.data
            task = e.task_id
            if e.kind == "task_claimed" and task is not None:
                role = str(d.get("role") or node_roles.get(e.node_id or "", UNKNOWN))
                self.in_flight[task] = role
                created = d.get("created_at")
                if isinstance(created, int | float):
                    self._hist(self.wait, role, WAIT_BUCKETS).observe(e.ts - created)
                continue
            if task is None or not _ends_claim(e):
                continue
            role = self.in_flight.pop(task, "") or node_roles.get(e.node_id or "", UNKNOWN)
            if e.kind == "task_completed":
                self.completed[role] = self.completed.get(role, 0) + 1
                claimed = d.get("claimed_at")
                if isinstance(claimed, int | float):
                    self._hist(self.run, role, RUN_BUCKETS).observe(e.ts - claimed)
            if e.kind == "lease_recovered":
                self.recovered[role] = self.recovered.get(role, 0) + 1
            if d.get("outcome") == "failed":
                self.failed[role] = self.failed.get(role, 0) + 1

    @staticmethod
    def _hist(table: dict[str, _Histogram], role: str, bounds: tuple[float, ...]) -> _Histogram:
        h = table.get(role)
        if h is None:
            h = table[role] = _Histogram(bounds)
        return h

    def families(self) -> Iterator[Metric]:
        wait = HistogramMetricFamily(
            "corral_task_wait_seconds",
            "Seconds from a task's creation to its claim, by the claim's role.",
            labels=["role"],
        )
        for role, h in sorted(self.wait.items()):
            wait.add_metric([role], h.buckets(), h.total)
        yield wait
        run = HistogramMetricFamily(
            "corral_task_run_seconds",
            "Seconds from a task's claim to its completion, by the claim's role.",
            labels=["role"],
        )
        for role, h in sorted(self.run.items()):
            run.add_metric([role], h.buckets(), h.total)
        yield run
        done = CounterMetricFamily(
            "corral_tasks_completed", "Tasks completed, by role.", labels=["role"]
        )
        for role, n in sorted(self.completed.items()):
            done.add_metric([role], n)
        yield done
        failed = CounterMetricFamily(
            "corral_tasks_failed",
            "Tasks failed for good (no attempts left, or not retried), by role.",
            labels=["role"],
        )
        for role, n in sorted(self.failed.items()):
            failed.add_metric([role], n)
        yield failed
        recovered = CounterMetricFamily(
            "corral_task_lease_recoveries",
            "Leases the monitor took back from dead nodes, by the task's role.",
            labels=["role"],
        )
        for role, n in sorted(self.recovered.items()):
            recovered.add_metric([role], n)
        yield recovered


class QueueCollector(Collector):
    """``QueueCounts`` over the cluster's events, read after its cursor at each
    scrape (the first scrape only places the cursor)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.counts = QueueCounts()
        self.cursor: int | None = None
        self._lock = threading.Lock()  # scrapes may overlap (a thread each)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._catch_up()
            families = list(self.counts.families())
        yield from families

    def _catch_up(self) -> None:
        store = self.cluster.store
        if self.cursor is None:
            self.cursor = store.stats().last_event
            return
        events: list[Event] = []
        for _ in range(_MAX_BATCHES):
            batch = store.events(self.cursor, _BATCH)
            if not batch:
                break
            self.cursor = batch[-1].seq
            events += batch
            if len(batch) < _BATCH:
                break
        if events:
            roles = {n.id: n.role for n in store.list_nodes()} if _needs_roles(events) else {}
            self.counts.observe(events, roles)


def _needs_roles(events: list[Event]) -> bool:
    """Whether an event's role may have to come from its node (a claim without one,
    or a claim's end the counts did not see begin)."""
    return any(e.kind == "task_claimed" or _ends_claim(e) for e in events)


def _ends_claim(e: Event) -> bool:
    """Whether ``e`` ends a task's claim: its completion, the operator's cancel or
    requeue, or any event that says where the task went (``outcome``: pending again
    or failed; a failure, a recovered or released lease, a timeout)."""
    return e.kind in _ENDS_CLAIM or "outcome" in e.data


class AlertStateCollector(Collector):
    """The gauges the alert rules read beyond the counters, read at scrape time."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        c = self.cluster
        now = c.clock.now()
        restarts = CounterMetricFamily(
            "corral_process_restarts",
            "Restarts of each supervised agent, as its host last reported them.",
            labels=["host", "agent"],
        )
        exhausted = GaugeMetricFamily(
            "corral_process_restart_exhausted",
            "1 while a supervised agent has used up its restarts (restart-exhausted).",
            labels=["host", "agent"],
        )
        for p in c.list_processes():
            restarts.add_metric([p.host, p.agent], p.restarts)
            exhausted.add_metric([p.host, p.agent], 1.0 if "restart-exhausted" in p.flags else 0)
        yield restarts
        yield exhausted
        pending = c.spawn_requests("pending", None, 1)  # oldest first
        yield GaugeMetricFamily(
            "corral_spawn_request_oldest_pending_age_seconds",
            "Age of the oldest pending spawn request (0 when none).",
            value=max(0.0, now - pending[0].created_at) if pending else 0.0,
        )
        late = sum(
            1
            for h in c.list_handlers(idle=True, limit=10_000)
            if alerts.past_deadline(h.active_waiters, now) is not None
        )
        yield GaugeMetricFamily(
            "corral_workflow_runs_past_deadline",
            "Idle workflow runs whose earliest waiter deadline has passed.",
            value=late,
        )
