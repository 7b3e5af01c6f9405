"""The pool decision: how many members a pool of one role should have, and what to
do about it now. Pure: a function of data and ``now``.

A pool keeps ``min`` members always (its floor). Above the floor it follows the
cluster's assessment for its role:

- ``spawn_<role>``, or ``maintain`` (the assessment's ``balanced``: a task or two
  pending while nodes work), with pending tasks that no idle or starting member will
  take: grow by that many, up to ``max`` (``maintain`` was tuned in: a task waiting
  behind busy members no longer waits for the board to turn deep; see
  docs/economics.md);
- members whose node is idle beyond what the pool needs retire, down to ``min``
  (:func:`retiring`): the pool keeps one idle member for each pending task and
  :data:`IDLE_RESERVE` more, the idle most recently, each until the cluster's
  ``idle_timeout`` (the idle protocol's own threshold); every other idle member is
  spare and retires at once (tuned in: 27 to 34% fewer idle worker-seconds on the
  simulator's traces at a p95 wait no worse; see docs/economics.md). Nobody is
  retired mid-task;
- otherwise keep the members it has.

Growth is capped by ``max_agents``: the headroom is ``max_agents`` less every live
node of the cluster and every member started but not yet registered, read before the
spawn (never corrected after). A change that reverses the pool's last one (a
retirement after growth, growth after a retirement; the pools count a member's own
exit as a retirement) waits out ``cooldown`` seconds, so the pool never flaps; in
``auto`` mode growth after growth, or a retirement after a retirement, is no flap and
is not held back (tuned in: a second task arriving seconds after the first no longer
waits for the cooldown; see docs/economics.md). In the other modes, and when the last
change's direction is not known, every change waits out the cooldown. The first change
(``last_change`` None) is never delayed.

``scale`` says who acts: ``off`` keeps exactly ``min`` members (a fixed pool);
``auto`` spawns and retires; ``ask`` retires like ``auto`` but each spawn above the
floor waits as a request an operator accepts (requests already waiting count as
planned members, so one want is one request).

:func:`desired_workers` is the same decision for a role with no pool (floor 0,
ceiling ``max_agents``), the number ``/metrics`` publishes for an outside scaler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "IDLE_RESERVE",
    "SCALE_MODES",
    "Decision",
    "FleetView",
    "PoolLimits",
    "PoolState",
    "count_members",
    "decide",
    "desired_workers",
    "idle_past_timeout",
    "retiring",
]

SCALE_MODES = ("off", "ask", "auto")
IDLE_RESERVE = 1  # idle members a pool keeps beyond its pending tasks (till idle_timeout)
Action = Literal["spawn", "ask", "retire", "none"]


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """A pool's bounds: ``min`` <= members <= ``max``, ``cooldown`` seconds between
    changes, ``scale`` one of :data:`SCALE_MODES`."""

    min: int = 0
    max: int = 1
    cooldown: float = 10.0
    scale: str = "auto"


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the pool has.

    ``members``: members alive or starting (not retired, not stopped);
    ``idle``: of those, members not holding a task (a member still starting counts:
    it will claim as soon as it registers);
    ``idle_expired``: members due to retire (:func:`retiring`: idle past the idle
    timeout, or idle beyond what the pool keeps);
    ``requested``: spawn requests waiting for an operator, or accepted and not yet
    spawned; ``last_change``: when the pool last spawned or retired (None: never);
    ``last_direction``: 1 if that change grew the pool, -1 if it shrank it, 0 not
    known (an ask, a declined request: the cooldown then holds every change).
    """

    members: int = 0
    idle: int = 0
    idle_expired: int = 0
    requested: int = 0
    last_change: float | None = None
    last_direction: int = 0


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the cluster says: the assessment's ``recommendation``, its ``pending``
    tasks, its ``live`` nodes (plus every member started and not yet registered)
    and ``max_agents``."""

    recommendation: str = "maintain"
    pending: int = 0
    live: int = 0
    max_agents: int = 4


@dataclass(frozen=True, slots=True)
class Decision:
    """``desired``: the members the pool should have (before the cooldown);
    ``change``: how many to spawn (or request) now, negative to retire, 0 to wait;
    ``action``: what ``change`` means; ``reason``: why, for the fleet's event;
    ``retry_at``: when the decision may change by time alone (the cooldown's end)."""

    desired: int
    change: int
    action: Action
    reason: str
    retry_at: float | None = None


def idle_past_timeout(idle_since: float | None, idle_timeout: float, now: float) -> bool:
    """Whether a member idle since ``idle_since`` has been idle for the cluster's
    ``idle_timeout`` at ``now`` (the pool retires it; the SDK worker retires itself at
    the same moment)."""
    return idle_since is not None and now - idle_since >= idle_timeout


def retiring(
    members: Sequence[tuple[str | None, float | None]],
    idle_timeout: float,
    now: float,
    *,
    pending: int = 0,
    reserve: int = IDLE_RESERVE,
) -> list[int]:
    """Which of a pool's members retire at ``now``, by index into ``members`` (each its
    node's ``(status, idle_since)``, as :func:`count_members` takes them), the one idle
    longest first.

    Only members whose node is idle may retire (a starting or busy one never does).
    Of them the pool keeps the ``pending + reserve`` idle most recently (``pending``:
    the tasks waiting, which idle members are about to claim), each until it is
    :func:`idle_past_timeout`; every other idle member is spare and retires now.
    Why: for a worker kept idle, the next task it would serve comes after the pool's
    other idle members have each taken one, so a second idle member waits longer for
    work than the first, and the start-up it would save is the same. A member idle
    with no ``idle_since`` counts as idle most recently."""
    idle = [
        (float("inf") if since is None else since, i)
        for i, (status, since) in enumerate(members)
        if status == "idle"
    ]
    idle.sort()
    keep = max(0, pending) + max(0, reserve)
    spare = max(0, len(idle) - keep)
    out = []
    for n, (_, i) in enumerate(idle):
        if n < spare or idle_past_timeout(members[i][1], idle_timeout, now):
            out.append(i)
    return out


def count_members(
    members: Sequence[tuple[str | None, float | None]],
    idle_timeout: float,
    now: float,
    *,
    pending: int = 0,
    reserve: int = IDLE_RESERVE,
) -> tuple[int, int]:
    """``(idle, idle_expired)`` of a pool's members for :class:`PoolState`, each given
    as its node's ``(status, idle_since)``; status None for a member still starting
    (or whose node is terminated: it is being replaced). A starting member counts as
    idle (it claims once registered); ``idle_expired`` is how many :func:`retiring`
    names (``pending`` and ``reserve`` as it takes them)."""
    idle = sum(1 for status, _ in members if status in (None, "terminated", "idle"))
    return idle, len(retiring(members, idle_timeout, now, pending=pending, reserve=reserve))


def _target(role: str, limits: PoolLimits, pool: PoolState, fleet: FleetView) -> tuple[int, str]:
    """The members wanted, ignoring ``max_agents`` and the cooldown."""
    if limits.scale == "off":
        return limits.min, "fixed pool"
    planned = pool.members + pool.requested
    if planned < limits.min:
        return limits.min, "below min"
    if fleet.recommendation in (f"spawn_{role}", "maintain"):
        unserved = fleet.pending - pool.idle - pool.requested
        if unserved > 0:
            return max(limits.min, min(limits.max, planned + unserved)), fleet.recommendation
    if pool.idle_expired > 0 and pool.members > limits.min:
        left = max(limits.min, pool.members - pool.idle_expired)
        return left, "idle: spare, or past idle_timeout"
    return max(limits.min, min(limits.max, planned)), "steady"


def decide(
    role: str,
    limits: PoolLimits,
    pool: PoolState,
    fleet: FleetView,
    now: float,
    *,
    hold: str | None = None,
) -> Decision:
    """The pool's decision at ``now``; see the module docstring. ``hold``: why the
    pool may not grow now (a spent budget in its scope, its model at its cap:
    corral.budgets), so it spawns and asks for nothing, saying why; it still retires."""
    want, reason = _target(role, limits, pool, fleet)
    planned = pool.members + pool.requested
    if want > planned and hold is not None:
        return Decision(planned, 0, "none", hold)
    if want > planned:
        headroom = fleet.max_agents - fleet.live
        if headroom <= 0:
            return Decision(planned, 0, "none", "max_agents reached")
        want = planned + min(want - planned, headroom)
        if headroom < want - planned:
            reason += " (capped by max_agents)"
    # Only members idle past the timeout retire: nobody is stopped mid-task.
    if want > planned:
        delta = want - planned
    else:
        delta = max(min(0, want - pool.members), -pool.idle_expired)
    if delta > 0:
        want = planned + delta
    elif delta < 0:
        want = pool.members + delta
    else:
        want = max(want, pool.members)
    if delta == 0:
        return Decision(want, 0, "none", reason)
    if pool.last_change is not None and now < pool.last_change + limits.cooldown:
        onward = limits.scale == "auto" and delta * pool.last_direction > 0
        if not onward:  # a reversal (or a change of unknown direction) waits
            return Decision(want, 0, "none", "cooldown", pool.last_change + limits.cooldown)
    if delta < 0:
        return Decision(want, delta, "retire", reason)
    # Up to the floor the pool spawns itself whatever the mode; above it, ask asks.
    floor_part = max(0, min(delta, limits.min - planned))
    if limits.scale == "ask" and floor_part == 0:
        return Decision(want, delta, "ask", reason)
    return Decision(want, floor_part if limits.scale == "ask" else delta, "spawn", reason)


def desired_workers(
    role: str,
    *,
    workers: int,
    idle: int,
    recommendation: str,
    pending: int,
    live: int,
    max_agents: int,
) -> int:
    """Workers a role should have (no pool: floor 0, ceiling ``max_agents``, no
    cooldown): the number ``/metrics`` publishes for an outside autoscaler."""
    limits = PoolLimits(min=0, max=max_agents, cooldown=0.0, scale="auto")
    state = PoolState(members=workers, idle=idle)
    view = FleetView(recommendation, pending, live, max_agents)
    return decide(role, limits, state, view, 0.0).desired
