"""The pool decision (corral.scaling): bounds, max_agents before the spawn, the
cooldown, the three modes, retirement of idle members only; hypothesis over random
pools and fleets, plus a simulation that never flaps; which idle members retire
(``retiring``: the reserve, the spares, the timeout) on an injected clock."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from corral.scaling import (
    IDLE_RESERVE,
    SCALE_MODES,
    FleetView,
    PoolLimits,
    PoolState,
    count_members,
    decide,
    desired_workers,
    idle_past_timeout,
    retiring,
)

RECS = ("spawn_developer", "spawn_architect", "terminate_idle", "maintain")


@st.composite
def limits(draw: st.DrawFn) -> PoolLimits:
    lo = draw(st.integers(0, 4))
    return PoolLimits(
        min=lo,
        max=draw(st.integers(max(lo, 1), 6)),
        cooldown=draw(st.floats(0, 30)),
        scale=draw(st.sampled_from(SCALE_MODES)),
    )


@st.composite
def pools(draw: st.DrawFn) -> PoolState:
    members = draw(st.integers(0, 7))
    idle = draw(st.integers(0, members))
    return PoolState(
        members=members,
        idle=idle,
        idle_expired=draw(st.integers(0, idle)),
        requested=draw(st.integers(0, 3)),
        last_change=draw(st.none() | st.floats(0, 100)),
        last_direction=draw(st.sampled_from((-1, 0, 1))),
    )


@st.composite
def fleets(draw: st.DrawFn, pool: PoolState | None = None) -> FleetView:
    max_agents = draw(st.integers(1, 10))
    return FleetView(
        recommendation=draw(st.sampled_from(RECS)),
        pending=draw(st.integers(0, 12)),
        live=draw(st.integers(0, 12)),
        max_agents=max_agents,
    )


NOW = st.floats(0, 200)


@given(limits(), pools(), fleets(), NOW)
def test_a_spawn_never_passes_max_nor_max_agents(
    lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float
) -> None:
    d = decide("developer", lim, pool, fleet, now)
    if d.change > 0:
        assert d.action in ("spawn", "ask")
        assert pool.members + pool.requested + d.change <= lim.max
        assert fleet.live + d.change <= fleet.max_agents  # checked before the spawn


@given(limits(), pools(), fleets(), NOW)
def test_inside_the_cooldown_only_an_auto_pool_goes_on_the_way_it_went(
    lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float
) -> None:
    """Inside the cooldown nothing reverses the last change; only an ``auto`` pool
    whose last change is known changes at all, and then the same way."""
    d = decide("developer", lim, pool, fleet, now)
    if pool.last_change is not None and now < pool.last_change + lim.cooldown and d.change:
        assert lim.scale == "auto" and pool.last_direction != 0
        assert d.change * pool.last_direction > 0


@given(limits(), pools(), fleets(), NOW)
def test_only_idle_members_retire_and_never_below_min(
    lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float
) -> None:
    d = decide("developer", lim, pool, fleet, now)
    if d.change < 0:
        assert d.action == "retire"
        assert -d.change <= pool.idle_expired
        assert pool.members + d.change >= lim.min


@given(limits(), pools(), fleets(), NOW)
def test_the_modes(lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float) -> None:
    d = decide("developer", lim, pool, fleet, now)
    if d.action == "ask":
        assert lim.scale == "ask"
    if lim.scale == "off" and d.change > 0:
        assert pool.members + pool.requested + d.change <= lim.min
    if lim.scale == "ask" and d.action == "spawn":  # only the floor spawns unasked
        assert pool.members + pool.requested + d.change <= lim.min


@given(limits(), pools(), fleets(), NOW)
def test_growth_above_the_floor_needs_the_recommendation_for_the_role(
    lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float
) -> None:
    """Above the floor a pool grows on its role's spawn recommendation or on
    ``maintain`` (a task waiting behind busy members), never on another's or on
    ``terminate_idle``, and only for tasks no idle member or request will take."""
    d = decide("developer", lim, pool, fleet, now)
    planned = pool.members + pool.requested
    if d.change > 0 and planned + d.change > lim.min:
        assert fleet.recommendation in ("spawn_developer", "maintain")
        assert fleet.pending > pool.idle + pool.requested


@given(limits(), pools(), fleets(), NOW)
def test_a_wanted_spawn_happens_when_nothing_holds_it_back(
    lim: PoolLimits, pool: PoolState, fleet: FleetView, now: float
) -> None:
    pool = PoolState(pool.members, pool.idle, pool.idle_expired, 0, None)
    d = decide("developer", lim, pool, fleet, now)
    room = min(lim.max - pool.members, fleet.max_agents - fleet.live)
    unserved = fleet.pending - pool.idle
    deep = fleet.recommendation in ("spawn_developer", "maintain") and unserved > 0
    if lim.scale == "auto" and deep and room > 0:
        assert (d.action == "spawn" and d.change == min(unserved, room)) or (
            pool.members < lim.min and d.change > 0
        )


def test_examples() -> None:
    auto = PoolLimits(min=0, max=3, cooldown=5, scale="auto")
    deep = FleetView("spawn_developer", pending=10, live=1, max_agents=8)
    d = decide("developer", auto, PoolState(), deep, 0.0)
    assert (d.action, d.change, d.desired) == ("spawn", 3, 3)
    # the other role's recommendation does nothing
    assert decide("architect", auto, PoolState(), deep, 0.0).change == 0
    # maintain: one member at work, two tasks waiting behind it: two more members
    # (before the tune the pool waited for a third task, the assessment's "deep")
    busy = FleetView("maintain", pending=2, live=1, max_agents=8)
    d = decide("developer", auto, PoolState(members=1), busy, 0.0)
    assert (d.action, d.change, d.desired) == ("spawn", 2, 3)
    # ... but not for tasks an idle member will take, nor on terminate_idle
    assert decide("developer", auto, PoolState(members=2, idle=1), busy, 0.0).change == 1
    calm = FleetView("terminate_idle", pending=1, live=1, max_agents=8)
    assert decide("developer", auto, PoolState(members=1), calm, 0.0).change == 0
    # max_agents: one place left
    tight = FleetView("spawn_developer", pending=10, live=7, max_agents=8)
    assert decide("developer", auto, PoolState(), tight, 0.0).change == 1
    full = FleetView("spawn_developer", pending=10, live=8, max_agents=8)
    assert decide("developer", auto, PoolState(), full, 0.0).reason == "max_agents reached"
    # cooldown: a change of unknown direction, or one that reverses the last, waits
    d = decide("developer", auto, PoolState(members=1, last_change=0.0), deep, 2.0)
    assert (d.change, d.reason, d.retry_at) == (0, "cooldown", 5.0)
    shrunk = PoolState(members=1, last_change=0.0, last_direction=-1)
    assert decide("developer", auto, shrunk, deep, 2.0).reason == "cooldown"
    # ... growth after growth does not (auto): a task 2 s after the first gets a member
    grown = PoolState(members=1, last_change=0.0, last_direction=1)
    d = decide("developer", auto, grown, deep, 2.0)
    assert (d.action, d.change) == ("spawn", 2)
    # ... nor a retirement after one; but a retirement right after growth waits
    idle = FleetView("terminate_idle", pending=0, live=2, max_agents=8)
    gone = PoolState(members=2, idle=2, idle_expired=2, last_change=0.0, last_direction=-1)
    assert decide("developer", auto, gone, idle, 2.0).change == -2
    came = replace(gone, last_direction=1)
    assert decide("developer", auto, came, idle, 2.0).reason == "cooldown"
    # ask mode: every change waits out the cooldown
    asked = PoolLimits(min=0, max=3, cooldown=5, scale="ask")
    assert decide("developer", asked, grown, deep, 2.0).reason == "cooldown"
    # idle members past the timeout retire, down to min
    calm = FleetView("terminate_idle", pending=0, live=3, max_agents=8)
    lim = PoolLimits(min=1, max=3, cooldown=5, scale="auto")
    d = decide("developer", lim, PoolState(members=3, idle=3, idle_expired=3), calm, 0.0)
    assert (d.action, d.change, d.desired) == ("retire", -2, 1)
    # ask: the floor is spawned, the rest asked
    ask = PoolLimits(min=1, max=3, cooldown=5, scale="ask")
    assert decide("developer", ask, PoolState(), deep, 0.0).action == "spawn"
    d = decide("developer", ask, PoolState(members=1), deep, 0.0)
    assert (d.action, d.change) == ("ask", 2)
    # requests waiting count as planned: the want is not asked twice
    d = decide("developer", ask, PoolState(members=1, requested=2), deep, 0.0)
    assert d.change == 0
    # off: a fixed pool of min
    off = PoolLimits(min=2, max=3, cooldown=5, scale="off")
    assert decide("developer", off, PoolState(), deep, 0.0).change == 2
    assert decide("developer", off, PoolState(members=2), deep, 0.0).change == 0


@given(
    limits(),
    st.lists(st.tuples(st.sampled_from(RECS), st.integers(0, 12), st.floats(0.1, 10)), max_size=40),
)
def test_a_simulated_pool_changes_at_most_once_per_cooldown(
    lim: PoolLimits, steps: list[tuple[str, int, float]]
) -> None:
    """Apply each decision at once (spawned members register idle, retired ones go);
    a change that reverses the one before it comes at least a cooldown after it (in
    the modes other than auto every change does)."""
    now, pool, changes = 0.0, PoolState(), []
    for rec, pending, dt in steps:
        now += dt
        fleet = FleetView(rec, pending, live=pool.members, max_agents=8)
        d = decide("developer", lim, pool, fleet, now)
        if d.change:
            way = 1 if d.change > 0 else -1
            changes.append((now, way))
            members = pool.members + d.change
            pool = PoolState(members, members, members, 0, now, way)
        else:
            pool = replace(pool, idle=pool.members, idle_expired=pool.members, requested=0)
    for (a, way_a), (b, way_b) in itertools.pairwise(changes):
        if way_a != way_b or lim.scale != "auto":
            assert b >= a + lim.cooldown


@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.sampled_from(RECS),
    st.integers(0, 12),
    st.integers(0, 10),
    st.integers(1, 10),
)
def test_desired_workers_is_the_pool_decision_without_a_pool(
    w: int, idle: int, rec: str, pending: int, live: int, cap: int
) -> None:
    idle = min(idle, w)
    n = desired_workers(
        "developer",
        workers=w,
        idle=idle,
        recommendation=rec,
        pending=pending,
        live=live,
        max_agents=cap,
    )
    view = FleetView(rec, pending, live, cap)
    d = decide("developer", PoolLimits(0, cap, 0.0, "auto"), PoolState(w, idle), view, 0.0)
    assert n == d.desired
    assert n >= 0
    if rec == "spawn_developer" and pending > idle and live < cap and w < cap:
        assert n > w


# ---- retirement: which idle members go (corral.scaling.retiring) ---------------------

T = 30.0  # the cluster's idle_timeout in these examples


def test_one_idle_member_is_kept_until_idle_timeout() -> None:
    """The reserve: a pool's only idle member stays until it has been idle
    ``idle_timeout`` (the clock is ``now``: just before, nothing; at it, it goes)."""
    one = [("idle", 100.0)]
    assert retiring(one, T, 129.999) == []
    assert retiring(one, T, 130.0) == [0]
    assert count_members(one, T, 129.999) == (1, 0)
    assert count_members(one, T, 130.0) == (1, 1)


def test_idle_members_beyond_the_reserve_retire_at_once_the_longest_idle_first() -> None:
    """Three idle members, none near the timeout: the one idle most recently is kept,
    the two others are spare and go now, the one idle longest first."""
    members = [("idle", 110.0), ("working", None), ("idle", 100.0), ("idle", 115.0)]
    assert retiring(members, T, 115.0) == [2, 0]
    assert count_members(members, T, 115.0) == (3, 2)
    # the one kept still goes at its own timeout
    assert retiring(members, T, 144.999) == [2, 0]
    assert retiring(members, T, 145.0) == [2, 0, 3]


def test_pending_tasks_keep_an_idle_member_each() -> None:
    """An idle member is about to claim a pending task: the pool keeps one idle member
    per pending task and the reserve besides, so two idle members and one pending task
    keep both; with none pending one goes."""
    two = [("idle", 100.0), ("idle", 101.0)]
    assert retiring(two, T, 102.0, pending=1) == []
    assert retiring(two, T, 102.0, pending=0) == [0]
    assert count_members(two, T, 102.0, pending=1) == (2, 0)
    # ... until the timeout, pending or not (as before the tune)
    assert retiring(two, T, 130.0, pending=5) == [0]


def test_the_reserve_is_a_parameter() -> None:
    two = [("idle", 100.0), ("idle", 101.0)]
    assert IDLE_RESERVE == 1
    assert retiring(two, T, 102.0, reserve=0) == [0, 1]
    assert retiring(two, T, 102.0, reserve=2) == []
    # a negative count keeps nothing more than zero does
    assert retiring(two, T, 102.0, pending=-3, reserve=-1) == [0, 1]


def test_only_idle_nodes_retire() -> None:
    """A member still starting (None), one whose node is terminated (being replaced),
    one at work: none retires, whatever the clock; they count as idle or not as
    before (a starting member will claim once registered)."""
    members: list[tuple[str | None, float | None]] = [
        (None, None),
        ("terminated", 0.0),
        ("working", 0.0),
        ("idle", 50.0),
    ]
    assert retiring(members, T, 1_000.0, reserve=0) == [3]
    assert count_members(members, T, 1_000.0, reserve=0) == (3, 1)


def test_an_idle_member_with_no_idle_since_counts_as_the_newest() -> None:
    members: list[tuple[str | None, float | None]] = [("idle", None), ("idle", 100.0)]
    assert retiring(members, T, 500.0) == [1]  # kept: the one with no time; never expires
    assert retiring(members, T, 500.0, reserve=0) == [1, 0]


@given(
    st.lists(
        st.tuples(
            st.sampled_from((None, "idle", "working", "terminated")),
            st.none() | st.floats(0, 100),
        ),
        max_size=8,
    ),
    st.integers(0, 4),
    st.integers(0, 3),
    st.floats(0, 60),
    st.floats(0, 200),
)
def test_retiring_keeps_the_newest_pending_plus_reserve_and_no_one_else_past_timeout(
    members: list[tuple[str | None, float | None]],
    pending: int,
    reserve: int,
    timeout: float,
    now: float,
) -> None:
    """Whatever the pool: only idle members, each once, the one idle longest first;
    every idle member goes unless it is one of the ``pending + reserve`` idle most
    recently and not yet past the timeout; and decide never retires more than it names."""
    due = retiring(members, timeout, now, pending=pending, reserve=reserve)
    assert len(set(due)) == len(due)
    assert all(members[i][0] == "idle" for i in due)

    def since(i: int) -> float:
        s = members[i][1]
        return math.inf if s is None else s

    assert due == sorted(due, key=lambda i: (since(i), i))
    idle = sorted((since(i), i) for i, (s, _) in enumerate(members) if s == "idle")
    newest = {i for _, i in idle[len(idle) - min(len(idle), pending + reserve) :]}
    for _, i in idle:
        expected = i not in newest or idle_past_timeout(members[i][1], timeout, now)
        assert (i in due) == expected
    idle_n, expired = count_members(members, timeout, now, pending=pending, reserve=reserve)
    assert expired == len(due) and idle_n >= expired


def test_the_pool_decision_retires_the_spare_not_the_reserve() -> None:
    """Two idle members, nothing pending, the pool's last change a spawn 20 s ago:
    one retires now (the spare), down to one; the same a second after the spawn waits
    out the cooldown (a retirement right after growth is a reversal)."""
    auto = PoolLimits(min=0, max=3, cooldown=10, scale="auto")
    members = [("idle", 15.0), ("idle", 18.0)]
    idle, expired = count_members(members, T, 20.0)
    calm = FleetView("terminate_idle", pending=0, live=2, max_agents=8)
    pool = PoolState(2, idle, expired, last_change=0.0, last_direction=1)
    d = decide("developer", auto, pool, calm, 20.0)
    assert (d.action, d.change, d.desired) == ("retire", -1, 1)
    assert retiring(members, T, 20.0) == [0]
    d = decide("developer", auto, replace(pool, last_change=19.0), calm, 20.0)
    assert (d.action, d.reason, d.retry_at) == ("none", "cooldown", 29.0)
