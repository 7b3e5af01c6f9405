"""A heartbeat's health from its metrics: CPU above 70 % or memory above 4096 MB is
``degraded``; CPU above 90 % or memory above 8192 MB is ``unhealthy``; else ``healthy``.
A beat that says nothing about health keeps the node's last one (``health_after_beat``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.types import HealthStatus

__all__ = ["HealthThresholds", "health_after_beat", "health_status"]


class HealthThresholds:
    """CPU in percent, memory in MB; 70 / 90 % and 4096 / 8192 MB by default."""

    __slots__ = ("cpu_degraded", "cpu_unhealthy", "mem_degraded", "mem_unhealthy")

    def __init__(
        self,
        cpu_degraded: float = 70.0,
        cpu_unhealthy: float = 90.0,
        mem_degraded: float = 4096.0,
        mem_unhealthy: float = 8192.0,
    ) -> None:
        self.cpu_degraded = cpu_degraded
        self.cpu_unhealthy = cpu_unhealthy
        self.mem_degraded = mem_degraded
        self.mem_unhealthy = mem_unhealthy


DEFAULT_THRESHOLDS = HealthThresholds()


def health_status(
    metrics: Mapping[str, Any], thresholds: HealthThresholds = DEFAULT_THRESHOLDS
) -> HealthStatus:
    cpu = float(metrics.get("cpu_usage") or 0.0)
    mem = float(metrics.get("memory_usage") or 0.0)
    if cpu > thresholds.cpu_unhealthy or mem > thresholds.mem_unhealthy:
        return "unhealthy"
    if cpu > thresholds.cpu_degraded or mem > thresholds.mem_degraded:
        return "degraded"
    return "healthy"


def health_after_beat(old: str | None, beat: str | None) -> str | None:
    """A node's health after a heartbeat whose health (told, or derived from its
    metrics) is ``beat``: that one, or the node's last (``old``) when the beat has none
    (no ``health_status``, no ``metrics``). Encoded in SQL as ``coalesce(:health,
    health)`` (the named queries ``node_heartbeat_steady`` and ``node_heartbeat``);
    tests/unit/test_health.py checks both dialects' statements against this. Every change
    is a ``node_health`` event with this ``old``."""
    return old if beat is None else beat
