"""Prometheus metrics: a collector that reads the store at scrape time, plus the
server's own request latency histogram. One registry per app (never the global one).
The queue's histograms and counters come from the event log, and the alert rules'
gauges from the store, at scrape time too (``corral.server.queue_metrics``).

The latency histogram is kept by hand (a list of bucket counts per label set, one
``bisect`` per request, no lock: only the event loop observes) and exposed by a
collector at scrape time; prometheus-client's ``Histogram`` cost several times as
much per request on the hot path (docs/performance.md).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import get_args

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from corral.budgets import window_bounds
from corral.cluster import Cluster
from corral.defaults import NODE_STATUSES, TASK_STATUSES
from corral.fleet.metrics import desired_workers_family
from corral.scheduler.metrics import SchedulerCollector
from corral.server.queue_metrics import AlertStateCollector, QueueCollector
from corral.types import WorkloadStatus

__all__ = ["LATENCY_BUCKETS", "ClusterCollector", "LatencyCollector", "Metrics"]

_ASSESSMENT_STATUSES: tuple[str, ...] = get_args(WorkloadStatus)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class ClusterCollector(Collector):
    """Reads ``cluster.stats()`` once per scrape."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        s = self.cluster.stats()
        now = self.cluster.clock.now()
        nodes = GaugeMetricFamily(
            "corral_nodes",
            "Nodes by status and role (newest incarnation of each id).",
            labels=["status", "role"],
        )
        for status in NODE_STATUSES:
            for role, n in sorted(s.nodes.get(status, {}).items()):
                nodes.add_metric([status, role], n)
        yield nodes
        tasks = GaugeMetricFamily("corral_tasks", "Tasks by status.", labels=["status"])
        for status in TASK_STATUSES:
            tasks.add_metric([status], s.tasks.get(status, 0))
        yield tasks
        yield GaugeMetricFamily(
            "corral_tasks_stuck",
            "Tasks in progress flagged stuck (no progress for their progress_timeout).",
            value=self.cluster.store.stuck_count(),
        )
        yield from usage_families(self.cluster, now)
        yield CounterMetricFamily(
            "corral_task_claims", "Claims made (all tasks' attempts).", value=s.claims
        )
        yield CounterMetricFamily(
            "corral_task_completions", "Tasks completed.", value=s.completions
        )
        yield CounterMetricFamily(
            "corral_lease_recoveries",
            "Leases taken back from dead nodes (lease_recovered events in the event log).",
            value=s.lease_recoveries,
        )
        yield GaugeMetricFamily("corral_max_agents", "The cluster's node cap.", value=s.max_agents)
        yield GaugeMetricFamily(
            "corral_last_event_seq", "The newest event's sequence number.", value=s.last_event
        )
        a = s.assessment
        gauge = GaugeMetricFamily(
            "corral_assessment_status",
            "1 for the last assessment's workload status.",
            labels=["status"],
        )
        current = a.get("workload_status")
        for name in sorted({*_ASSESSMENT_STATUSES, *([current] if current else [])}):
            gauge.add_metric([name], 1.0 if name == current else 0.0)
        yield gauge
        rec = GaugeMetricFamily(
            "corral_assessment_recommendation",
            "1 for the last assessment's spawn recommendation.",
            labels=["recommendation"],
        )
        if a.get("spawn_recommendation"):
            rec.add_metric([str(a["spawn_recommendation"])], 1.0)
        yield rec
        yield GaugeMetricFamily(
            "corral_assessment_timestamp_seconds",
            "When the workload was last assessed.",
            value=a.get("last_assessment") or 0.0,
        )
        age = GaugeMetricFamily(
            "corral_node_heartbeat_age_seconds",
            "Seconds since each live node was last heard from.",
            labels=["node", "role"],
        )
        inbox = GaugeMetricFamily(
            "corral_node_inbox_depth",
            "Events each live node has not caught up on.",
            labels=["node"],
        )
        for live in s.live_nodes:
            age.add_metric([live["id"], live["role"]], max(0.0, now - live["last_seen"]))
            inbox.add_metric([live["id"]], live["inbox"])
        yield age
        yield inbox
        yield CounterMetricFamily(
            "corral_store_write_lock_timeouts",
            "This process's writes that gave up waiting for the store's write lock (SQLite).",
            value=s.write_lock_timeouts,
        )
        yield desired_workers_family(s, self.cluster.settings().roles)
        held = s.write_lock_holder
        yield GaugeMetricFamily(
            "corral_store_write_lock_holder_stopped",
            "1 while a stopped process (SIGSTOP, a debugger) holds the write lock (SQLite).",
            value=1.0 if held and held["stopped"] else 0.0,
        )


def usage_families(cluster: Cluster, now: float) -> Iterator[GaugeMetricFamily]:
    """The usage sums of every scope (but tasks') in the hour and the UTC day holding
    ``now`` (docs/guardrails.md): tokens by kind, and cost."""
    tokens = GaugeMetricFamily(
        "corral_usage_tokens",
        "Tokens reported with usage, by scope, kind (input, output) and window (1h, 1d).",
        labels=["scope", "kind", "window"],
    )
    cost = GaugeMetricFamily(
        "corral_usage_cost_usd",
        "Cost in US dollars reported with usage, by scope and window (1h, 1d).",
        labels=["scope", "window"],
    )
    for window in ("1h", "1d"):
        start, end = window_bounds(window, now)
        for row in cluster.store.usage_by_scope(start, end):
            tokens.add_metric([row["scope"], "input", window], row["input_tokens"])
            tokens.add_metric([row["scope"], "output", window], row["output_tokens"])
            cost.add_metric([row["scope"], window], row["cost_usd"])
    yield tokens
    yield cost


class _Series:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: above every bound
        self.total = 0.0


class LatencyCollector(Collector):
    """``corral_http_request_duration_seconds`` by method, route and status."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, int], _Series] = {}

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "corral_http_request_duration_seconds",
            "HTTP API request latency by route and status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), series in list(self.series.items()):
            counts, total = list(series.counts), series.total
            buckets, seen = [], 0
            for bound, n in zip(LATENCY_BUCKETS, counts, strict=False):
                seen += n
                buckets.append((_bound(bound), float(seen)))
            buckets.append(("+Inf", float(seen + counts[-1])))
            family.add_metric([method, route, str(status)], buckets, total)
        yield family


def _bound(value: float) -> str:
    return repr(float(value))


class Metrics:
    def __init__(self, cluster: Cluster) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClusterCollector(cluster))
        self.registry.register(SchedulerCollector(cluster))
        self.queue = QueueCollector(cluster)
        self.registry.register(self.queue)
        self.registry.register(AlertStateCollector(cluster))
        self.latency = LatencyCollector()
        self.registry.register(self.latency)
        self.content_type = CONTENT_TYPE_LATEST

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request (called on the event loop only)."""
        key = (method, route, status)
        series = self.latency.series.get(key)
        if series is None:
            series = self.latency.series[key] = _Series()
        series.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        series.total += seconds

    def render(self) -> bytes:
        return generate_latest(self.registry)
