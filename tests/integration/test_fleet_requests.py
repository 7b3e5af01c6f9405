"""Ask mode's requests outlive no reason: a pending request its pool no longer wants
(the board drained, the recommendation changed) is withdrawn with the reason, and
``corral ctl requests`` says why each pending one was asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.fleet.requests import unwanted
from corral.scaling import FleetView, PoolLimits, PoolState
from tests.integration.test_fleet_up import ASK as ASK_FLEET
from tests.integration.test_fleet_up import ctl
from tests.support.fleet_up import Up, copy_example, wait_for

ASK = PoolLimits(min=0, max=3, cooldown=600.0, scale="ask")


def test_a_request_is_unwanted_once_its_recommendation_is_gone() -> None:
    """A request is wanted while pending tasks no member (idle, starting or
    accepted) will take remain, whatever the cooldown or max_agents: a drained
    board wants none, a deep one keeps them."""
    deep = FleetView("spawn_developer", pending=3, live=4, max_agents=4)  # full: still wanted
    assert unwanted("developer", ASK, PoolState(last_change=0.0), deep, 3) == 0
    drained = FleetView("terminate_idle", pending=0, live=1, max_agents=4)
    assert unwanted("developer", ASK, PoolState(members=1, idle=1), drained, 1) == 1
    # a member at work, 2 tasks left: the recommendation is maintain, the want holds
    busy = FleetView("maintain", pending=2, live=2, max_agents=4)
    assert unwanted("developer", ASK, PoolState(members=1), busy, 2) == 0
    assert unwanted("developer", ASK, PoolState(members=1), busy, 3) == 1  # but 2 at most
    served = FleetView("maintain", pending=1, live=2, max_agents=4)
    assert unwanted("developer", ASK, PoolState(members=1, idle=1), served, 1) == 1
    # one member started for an accepted request takes one of 3 tasks: 2 still wanted
    partly = FleetView("spawn_developer", pending=3, live=1, max_agents=4)
    assert unwanted("developer", ASK, PoolState(members=1, idle=1), partly, 3) == 1
    # up to max: 1 member and 1 accepted to come leave room for 1 of 3 at max 3
    assert unwanted("developer", ASK, PoolState(members=1, requested=1), deep, 3) == 2
    auto = PoolLimits(min=0, max=3, scale="auto")
    assert unwanted("developer", auto, PoolState(), drained, 2) == 0  # asks only in ask mode


# test_fleet_up.py's ask-mode pool, with room for a third request
POOL = ASK_FLEET.replace("max = 2", "max = 3")


@pytest.mark.slow
def test_a_request_left_pending_after_the_board_drained_is_withdrawn(tmp_path: Path) -> None:
    """Accept one request, decline the next: the third is withdrawn once the board
    has drained (it stayed pending, and accepting it spawned a member with nothing
    to do); its event says why, and it can no longer be accepted."""
    copy_example(tmp_path)
    (tmp_path / "tasks.jsonl").write_text("".join(f'{{"title": "t{i}"}}\n' for i in range(3)))
    (tmp_path / "ask.toml").write_text(POOL)
    up = Up(tmp_path, "ask.toml")
    try:
        wait_for(lambda: len(up.cluster.spawn_requests(status="pending")) == 3, 30, "3 asked")
        listed = ctl(tmp_path, "requests")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.strip().splitlines()
        assert len(lines) == 3
        for line in lines:  # why each is pending
            assert "pending  (spawn_developer: 3 pending tasks, 0 members (0 idle))" in line
        first, second, third = (r.id for r in up.cluster.spawn_requests(status="pending"))
        assert ctl(tmp_path, "accept", str(first)).returncode == 0
        assert ctl(tmp_path, "decline", str(second)).returncode == 0
        wait_for(lambda: up.done() == 3, 60, "the board drained by the one member")
        gone = wait_for(lambda: up.events("spawn_request_withdrawn"), 30, "the withdrawal")
        assert [(e.data["id"], e.data["actor"]) for e in gone] == [(third, "pool")]
        assert gone[0].data["reason"].startswith("no longer wanted: ")
        assert "0 pending tasks" in gone[0].data["reason"]
        out = json.loads(ctl(tmp_path, "requests", "--json").stdout)
        assert [(r["id"], r["status"]) for r in out] == [
            (first, "accepted"),
            (second, "declined"),
            (third, "withdrawn"),
        ]
        again = ctl(tmp_path, "accept", str(third))
        assert again.returncode == 2 and "already withdrawn" in again.stderr
        assert {e.data["agent"] for e in up.events("process_state")} == {"ask-1"}
        wait_for(
            lambda: any(
                "withdrawn by pool (no longer wanted" in x.get("text", "") for x in up.lines
            ),
            5,
            "the printed withdrawal",
        )
    finally:
        assert up.stop() == 0
