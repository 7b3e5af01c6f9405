"""A node's health: derived from metrics, kept by a beat that says nothing about it,
and every change an event with the true old value (issue 32)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.health import health_after_beat, health_status

_HEALTH = st.sampled_from([None, "healthy", "degraded", "unhealthy"])
_ids = itertools.count()


def test_health_after_beat_is_the_beats_else_the_last() -> None:
    for old in (None, "healthy", "degraded", "unhealthy"):
        assert health_after_beat(old, None) == old
        for beat in ("healthy", "degraded", "unhealthy"):
            assert health_after_beat(old, beat) == beat


def test_metrics_thresholds() -> None:
    assert health_status({"cpu_usage": 70}) == "healthy"
    assert health_status({"cpu_usage": 70.1}) == "degraded"
    assert health_status({"memory_usage": 8193}) == "unhealthy"


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(beats=st.lists(st.tuples(_HEALTH, st.booleans()), max_size=8))
def test_the_stores_health_follows_health_after_beat(embedded: Any, beats: list[Any]) -> None:
    """Random beats (told, from metrics, or neither) on each store's SQL (the steady
    one-statement beat and the full one): the record's health is the fold of
    ``health_after_beat``, and the node_health events are exactly its changes."""
    embedded.configure(max_agents=10_000)
    node = f"N{next(_ids)}"
    embedded.register_node(node, "developer")
    since = embedded.events()[-1].seq
    want: str | None = None
    changes = []
    for told, as_metrics in beats:
        payload: dict[str, Any] = {}
        if told is not None and as_metrics:
            cpu = {"healthy": 5.0, "degraded": 80.0, "unhealthy": 95.0}[told]
            payload["metrics"] = {"cpu_usage": cpu}
        elif told is not None:
            payload["health_status"] = told
        new = health_after_beat(want, told)
        if new != want:
            changes.append((want, new))
        want = new
        assert embedded.heartbeat(node, **payload).health == want
        assert embedded.get_node(node).health == want
    got = [
        (e.data["old"], e.data["new"])
        for e in embedded.events(since=since)
        if e.kind == "node_health" and e.node_id == node
    ]
    assert got == changes
