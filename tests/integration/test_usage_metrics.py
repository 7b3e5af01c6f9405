"""/metrics' usage gauges (``corral_usage_tokens``, ``corral_usage_cost_usd``) on SQLite
and PostgreSQL: every scope but tasks', summed at read from the nodes' hourly rows,
agree with ``usage(scope, window)``, and a node's role and model are the ones it had
when it reported."""

from __future__ import annotations

from pathlib import Path

import pytest

import corral
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.server.metrics import usage_families
from tests.support.backends import postgres as pg

T0 = 1_700_000_000.0


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'usage.db'}"
    return pg.fresh_database(request)


def test_the_usage_gauges_agree_with_usage(url: str) -> None:
    clock = FakeClock(T0)
    with corral.connect(url, clock=clock) as c:
        assert isinstance(c, Cluster)
        c.register_node("dev-1", "developer", model="opus")
        c.register_node("dev-2", "developer", model="sonnet")
        c.register_node("lead", "architect")
        c.heartbeat("dev-1", usage={"input_tokens": 10, "cost_usd": 0.5})
        c.heartbeat("dev-2", usage={"output_tokens": 20})
        c.heartbeat("lead", usage={"input_tokens": 3})
        clock.set(T0 + 3600)  # the next hour: the day holds both, the hour only this one
        c.terminate_node("lead")
        c.register_node("lead", "developer", model="opus")  # again, as another role
        c.heartbeat("lead", usage={"input_tokens": 4, "output_tokens": 1})
        samples = {
            (s.name, s.labels["scope"], s.labels.get("kind"), s.labels["window"]): s.value
            for family in usage_families(c, clock.now())
            for s in family.samples
        }
        scopes = {scope for _, scope, _, _ in samples}
        assert scopes == {
            "cluster",
            "node:dev-1",
            "node:dev-2",
            "node:lead",
            "role:developer",
            "role:architect",
            "model:opus",
            "model:sonnet",
            "pool:dev",
        }
        for scope in scopes:
            for window in ("1h", "1d"):
                u = c.usage(scope, window)
                tokens = [
                    samples.get(("corral_usage_tokens", scope, kind, window), 0.0)
                    for kind in ("input", "output")
                ]
                assert tokens == [u.input_tokens, u.output_tokens], (scope, window)
                cost = samples.get(("corral_usage_cost_usd", scope, None, window))
                assert cost in (None, u.cost_usd), (scope, window)
        assert c.usage("role:architect", "1d").input_tokens == 3  # as it reported then
        assert c.usage("role:developer", "1d").input_tokens == 14
        assert c.usage("model:opus", "1h").input_tokens == 4
        assert c.usage("cluster", "1d").reports == 4
