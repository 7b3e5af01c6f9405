"""Pools under budgets and model caps (docs/guardrails.md): a pool in ``auto`` mode
covered by a spent budget, or whose model is at its cap, spawns nothing and says why,
from what it reads of a real cluster (SQLite, injected clock). The pool depends on
an agent that is not running, so no process is started."""

from __future__ import annotations

from pathlib import Path

import corral
from corral.clock import FakeClock
from corral.fleet.manifest import parse_fleet
from corral.fleet.pools import FleetSupervisor
from corral.scaling import FleetView, PoolLimits, PoolState, decide
from tests.support.pools import one_pool

T0 = 1_700_000_000.0
HOUR_END = 1_700_002_800.0

MANIFEST = one_pool(model="opus", max=4, cooldown=0)


def _cluster(tmp_path: Path, clock: FakeClock) -> corral.Cluster:
    c = corral.connect(f"sqlite:///{tmp_path / 'fleet.db'}", clock=clock)
    assert isinstance(c, corral.Cluster)
    c.configure(max_agents=10)
    c.add_tasks([{"title": f"Implement item {i}"} for i in range(6)])
    return c


def test_a_pool_stops_spawning_at_its_budget_and_says_why(tmp_path: Path) -> None:
    """Before: the deep board makes the pool spawn. Once its members' usage spends
    the pool's 1h budget: no spawn, the reason names the budget. The next hour: it
    spawns again."""
    clock = FakeClock(T0)
    c = _cluster(tmp_path, clock)
    c.configure(budgets=[{"scope": "pool:dev", "window": "1h", "tokens": 100}])
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=c)
    assert sup.step(T0, sup.observe())["dev"].action == "spawn"

    c.register_node("dev-1", "developer", model="opus")
    c.heartbeat("dev-1", usage={"input_tokens": 60, "output_tokens": 40})
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=c)
    d = sup.step(T0, sup.observe())["dev"]
    assert (d.action, d.change) == ("none", 0)
    assert d.reason == "budget spent: pool:dev budget of 100 tokens per 1h"

    clock.set(HOUR_END)
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=c)
    assert sup.step(HOUR_END, sup.observe())["dev"].action == "spawn"


def test_a_pool_whose_model_is_at_its_cap_does_not_spawn(tmp_path: Path) -> None:
    """model_caps opus = 1 and one live opus node: the pool spawns nothing, saying
    so; once that node is gone, it spawns again."""
    clock = FakeClock(T0)
    c = _cluster(tmp_path, clock)
    c.configure(model_caps={"opus": 1})
    c.register_node("lead", "architect", model="opus")
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=c)
    d = sup.step(T0, sup.observe())["dev"]
    assert (d.action, d.reason) == ("none", "model opus at its cap (1 live nodes)")
    c.terminate_node("lead")
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=c)
    assert sup.step(T0, sup.observe())["dev"].action == "spawn"


def test_a_held_pool_neither_spawns_nor_asks_but_still_retires() -> None:
    """The pure decision: a hold stops growth in every mode (no request in ``ask``);
    idle members past the timeout still retire."""
    view = FleetView("spawn_developer", 6, live=1, max_agents=10)
    for scale in ("auto", "ask"):
        limits = PoolLimits(min=0, max=4, cooldown=0, scale=scale)
        d = decide("developer", limits, PoolState(members=1), view, T0, hold="budget spent: x")
        assert (d.action, d.change, d.reason) == ("none", 0, "budget spent: x")
    idle = FleetView("maintain", 0, live=3, max_agents=10)
    limits = PoolLimits(min=0, max=4, cooldown=0, scale="auto")
    d = decide(
        "developer", limits, PoolState(members=3, idle=3, idle_expired=2), idle, T0, hold="x"
    )
    assert d.action == "retire"
