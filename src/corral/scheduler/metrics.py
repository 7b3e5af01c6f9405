"""The scheduler's scaling signals in ``/metrics`` (``corral.server.metrics``
registers this collector): inbox queue depth (what a KEDA ``ScaledObject`` scales
notification runners on), the oldest unread item's age, the time since the last
activation, live activations by kind and live runners by mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.scheduler.policy import KINDS, MODES

__all__ = ["SchedulerCollector"]


class SchedulerCollector(Collector):
    """Reads the store's scheduler statistics once per scrape."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        s = self.cluster.store.scheduler_stats(self.cluster.clock.now())
        yield GaugeMetricFamily(
            "corral_inbox_queue_depth",
            "Unread inbox items over every agent (scale notification runners on it).",
            value=s["inbox_depth"],
        )
        yield GaugeMetricFamily(
            "corral_inbox_oldest_unread_age_seconds",
            "Age of the oldest unread inbox item (0 when none).",
            value=s["oldest_unread_seconds"],
        )
        since = s["since_last_activation_seconds"]
        yield GaugeMetricFamily(
            "corral_seconds_since_last_activation",
            "Seconds since an activation last ended (-1: never).",
            value=-1.0 if since is None else since,
        )
        yield GaugeMetricFamily(
            "corral_agents", "Agents the scheduler activates.", value=s["agents"]
        )
        active = GaugeMetricFamily(
            "corral_activations_active", "Live activations by kind.", labels=["kind"]
        )
        for kind in KINDS:
            active.add_metric([kind], s["active_by_kind"].get(kind, 0))
        yield active
        runners = GaugeMetricFamily(
            "corral_runners", "Live runners by the mode they last asked in.", labels=["mode"]
        )
        for mode in MODES:
            runners.add_metric([mode], s["runners_by_mode"].get(mode, 0))
        yield runners
