"""The pools' step retires what ``corral.scaling.retiring`` names: an idle member
beyond the pool's reserve goes at once, the one idle longest, well before the idle
timeout; one kept for a pending task does not. The pool depends on an agent that is
not running, so its members are held (WAITING, no process): the retirement is the
supervisor's real stop of a held member, on the injected clock of the step."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from corral.fleet.manifest import parse_fleet
from corral.fleet.pools import FleetSupervisor, Observation
from corral.model import Node
from corral.supervisor.policy import State
from tests.support.pools import one_pool

MANIFEST = one_pool()


def idle_nodes(**since: float) -> dict[str, Node]:
    return {
        name: Node(name, "developer", "idle", idle_since=at, registered_at=0.0)
        for name, at in since.items()
    }


def calm(pending: int, nodes: dict[str, Node]) -> Observation:
    rec = "maintain" if pending else "terminate_idle"
    return Observation(rec, pending, max_agents=8, idle_timeout=30.0, nodes=nodes)


async def two_idle_members(tmp_path: Path) -> FleetSupervisor:
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=None)
    sup.on_recover({"dev-1": {}, "dev-2": {}})  # members a previous run left
    for member in ("dev-1", "dev-2"):
        await sup.start(member)  # held: relay is not running
    assert [a.spec.id for a in sup.members("dev")] == ["dev-1", "dev-2"]
    return sup


async def until_stopped(sup: FleetSupervisor, agent: str) -> None:
    deadline = time.monotonic() + 5.0
    while sup.agents[agent].state is not State.STOPPED:
        assert time.monotonic() < deadline, sup.agents[agent].state
        await asyncio.sleep(0.01)


def test_the_spare_idle_member_retires_at_once(tmp_path: Path) -> None:
    """dev-2 idle since 100, dev-1 since 110, nothing pending; at 115 (5 s after the
    newest went idle, far from the 30 s timeout) the pool retires dev-2, the one idle
    longer, and keeps dev-1 (its reserve) until 140."""

    async def scenario() -> None:
        sup = await two_idle_members(tmp_path)
        nodes = idle_nodes(**{"dev-1": 110.0, "dev-2": 100.0})
        d = sup.step(115.0, calm(0, nodes))["dev"]
        assert (d.action, d.change, d.desired) == ("retire", -1, 1)
        await until_stopped(sup, "dev-2")
        assert [a.spec.id for a in sup.members("dev")] == ["dev-1"]
        assert (sup.pools["dev"].last_change, sup.pools["dev"].last_direction) == (115.0, -1)
        # dev-1 alone: kept just before its timeout, retired at it
        d = sup.step(139.9, calm(0, idle_nodes(**{"dev-1": 110.0})))["dev"]
        assert (d.action, d.change) == ("none", 0)
        d = sup.step(140.0, calm(0, idle_nodes(**{"dev-1": 110.0})))["dev"]
        assert (d.action, d.change) == ("retire", -1)
        await until_stopped(sup, "dev-1")

    asyncio.run(scenario())


def test_an_idle_member_kept_for_a_pending_task_does_not_retire(tmp_path: Path) -> None:
    """The same two idle members with a task pending (one is about to claim it): the
    pool keeps both, neither is stopped."""

    async def scenario() -> None:
        sup = await two_idle_members(tmp_path)
        nodes = idle_nodes(**{"dev-1": 110.0, "dev-2": 100.0})
        d = sup.step(115.0, calm(1, nodes))["dev"]
        assert (d.action, d.change) == ("none", 0)
        assert [a.spec.id for a in sup.members("dev")] == ["dev-1", "dev-2"]
        assert all(sup.agents[m].state is State.WAITING for m in ("dev-1", "dev-2"))

    asyncio.run(scenario())
