"""Prometheus metrics: a collector that reads the store at scrape time, plus the
server's own request latency histogram. One registry per app (never the global one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.defaults import NODE_STATUSES, TASK_STATUSES

__all__ = ["ClusterCollector", "Metrics"]

_ASSESSMENT_STATUSES = ("idle", "overloaded", "balanced", "underutilized")


class ClusterCollector(Collector):
    """Reads ``cluster.stats()`` once per scrape."""

    def __init__(self, cluster: Any) -> None:
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
        status = GaugeMetricFamily(
            "corral_assessment_status",
            "1 for the last assessment's workload status.",
            labels=["status"],
        )
        current = a.get("workload_status")
        for name in sorted({*_ASSESSMENT_STATUSES, *([current] if current else [])}):
            status.add_metric([name], 1.0 if name == current else 0.0)
        yield status
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
        for n in s.live_nodes:
            age.add_metric([n["id"], n["role"]], max(0.0, now - n["last_seen"]))
            inbox.add_metric([n["id"]], n["inbox"])
        yield age
        yield inbox


class Metrics:
    def __init__(self, cluster: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClusterCollector(cluster))
        self.latency = Histogram(
            "corral_http_request_duration_seconds",
            "HTTP API request latency by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.content_type = CONTENT_TYPE_LATEST
        self._children: dict[tuple[str, str, int], Any] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.latency.labels(method, route, str(status))
        child.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
