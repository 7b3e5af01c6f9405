"""The pools' step keeps what the pool decision's cooldown reads: a member's own exit
is a change of the pool (a retirement), so a spawn right after it waits out the
cooldown. The pool depends on an agent that is not running, so the step decides and
spawns nothing: no process is started."""

from __future__ import annotations

from pathlib import Path

from corral.fleet.manifest import parse_fleet
from corral.fleet.pools import FleetSupervisor, Observation
from tests.support.pools import one_pool

MANIFEST = one_pool()


def deep(pending: int) -> Observation:
    return Observation("spawn_developer", pending, max_agents=8, idle_timeout=30.0, nodes={})


def test_a_members_own_exit_starts_the_cooldown(tmp_path: Path) -> None:
    """A pool of one member whose member stopped by itself (its idle retirement): at
    that look the board turns deep, and the spawn waits until 10 s after the exit."""
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=None)
    sup.pools["dev"].size = 1  # the pool had one member; it has none now
    d = sup.step(100.0, deep(2))["dev"]
    assert (d.action, d.reason, d.retry_at) == ("none", "cooldown", 110.0)
    assert (sup.pools["dev"].last_change, sup.pools["dev"].last_direction) == (100.0, -1)
    d = sup.step(110.0, deep(2))["dev"]
    assert (d.action, d.change) == ("spawn", 2)


def test_a_first_spawn_is_not_held_back(tmp_path: Path) -> None:
    sup = FleetSupervisor(parse_fleet(MANIFEST), state_dir=tmp_path, client=None)
    d = sup.step(100.0, deep(2))["dev"]
    assert (d.action, d.change) == ("spawn", 2)
