"""``corral_desired_workers{role}`` for ``/metrics``: the workers each role should
have, by the same decision the pools follow (:func:`corral.scaling.desired_workers`),
so that an outside autoscaler (a KEDA ``ScaledObject`` on Kubernetes) and ``corral
up``'s pools follow one policy."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import GaugeMetricFamily

from corral.defaults import MANAGER_ROLE
from corral.scaling import desired_workers

__all__ = ["desired_workers_family"]

_LIVE = ("working", "idle", "waiting")


def desired_workers_family(stats: Any, roles: tuple[str, ...]) -> GaugeMetricFamily:
    """One sample per role (the manager's excluded) from a ``ClusterStats``."""
    family = GaugeMetricFamily(
        "corral_desired_workers",
        "Workers each role should have (the pools' decision: the assessment's spawn "
        "recommendation for the role, within max_agents; idle ones retire by themselves).",
        labels=["role"],
    )
    by_status: dict[str, dict[str, int]] = stats.nodes
    live = sum(n for status in _LIVE for n in by_status.get(status, {}).values())
    rec = str(stats.assessment.get("spawn_recommendation") or "maintain")
    pending = int(stats.tasks.get("pending", 0))
    for role in roles:
        if role == MANAGER_ROLE:
            continue
        workers = sum(by_status.get(status, {}).get(role, 0) for status in _LIVE)
        idle = by_status.get("idle", {}).get(role, 0)
        cap = int(stats.max_agents)
        n = desired_workers(
            role,
            workers=workers,
            idle=idle,
            recommendation=rec,
            pending=pending,
            live=live,
            max_agents=cap,
        )
        family.add_metric([role], float(n))
    return family
