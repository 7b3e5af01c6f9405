"""Node lifecycle rules: capacity, liveness, idleness, strength. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from corral.defaults import MANAGER_ROLE
from corral.model import Node, Settings

__all__ = [
    "derive_strength",
    "idle_expired",
    "idle_retire_at",
    "initial_status",
    "liveness_window",
    "next_idle_since",
    "registration_allowed",
    "reregistration_allowed",
    "stamp_due",
    "status_after_finishing",
    "status_allowed",
    "status_on_reregistering",
]


def registration_allowed(role: str, live_nodes: int, max_agents: int) -> bool:
    """Capacity: a new node fits while fewer than
    ``max_agents`` nodes are not terminated; a bootstrap manager always fits.
    (Re-registering a live node is not a new node and is always allowed.)"""
    return role == MANAGER_ROLE or live_nodes < max_agents


def reregistration_allowed(old_role: str, role: str, live_nodes: int, max_agents: int) -> bool:
    """Capacity for a live node that registers again (``live_nodes`` counts it).

    It keeps its place while it keeps a role that earned one: a counted role for
    any role, a manager's for a manager's. A manager that takes a counted role makes
    a new claim on a place: it fits as a new node would, while the other live nodes
    are fewer than ``max_agents``."""
    if old_role != MANAGER_ROLE or role == MANAGER_ROLE:
        return True
    return registration_allowed(role, live_nodes - 1, max_agents)


def status_on_reregistering(status: str, old_role: str, role: str, holds_task: bool) -> str:
    """A live node's status after it registers again.

    In the same role it keeps its status. In a new role it starts as a new node in
    that role would (``initial_status``: a manager working, any other idle), unless
    it holds a task: then it keeps its status (working or waiting on it)."""
    if role == old_role or holds_task:
        return status
    return initial_status(role)


def status_allowed(status: str, holds_task: bool) -> bool:
    """Whether a node may say ``status`` (``set_agent_status``): an idle node has
    nothing to work on, so a node that holds a task's lease cannot be idle (it
    completes the task, gives it up with ``fail_task``, or says ``waiting``)."""
    return not (status == "idle" and holds_task)


def initial_status(role: str) -> str:
    """A new node is idle until it claims work (so one that never does is retired
    like any idle node); a bootstrap manager starts working: it coordinates."""
    return "working" if role == MANAGER_ROLE else "idle"


def status_after_finishing(status: str, role: str, holds_other: bool) -> str:
    """A node's status once it is done with a task (completed, or given up with
    ``fail_task``) and claimed nothing in the same call.

    A ``working`` node that holds no other task has nothing to work on: it becomes
    ``idle`` (its current task cleared, ``idle_since`` set, so it is retired at its
    idle limit unless it claims again). A bootstrap manager stays ``working`` (it
    coordinates), and a node that said ``waiting`` keeps saying so. A claim in the same
    call (``complete_and_claim``) makes the node ``working`` on the new task. Encoded in
    SQL once per dialect, as the rule ``idle_after_finishing`` of its ``queries.sql``
    (included by ``node_done_with``, SQLite's ``node_now_idle`` and PostgreSQL's
    one-statement completions); tests/unit/test_node_truth.py checks every case on each."""
    if status == "working" and role != MANAGER_ROLE and not holds_other:
        return "idle"
    return status


STAMP_FRACTION = 0.1


def stamp_due(dead_at: float, window: float, now: float) -> bool:
    """Whether a call by a node should re-stamp its activity (and death deadline).

    Heartbeats always stamp. Claims and completions stamp only once a tenth of the
    window has passed since the last stamp, so a busy node writes its row rarely and
    a silent one is still dead within 90-100% of its window after its last call.
    Encoded in SQL once per dialect, as the rule ``stamp_due`` of its ``queries.sql``."""
    return dead_at - now < window * (1 - STAMP_FRACTION)


def liveness_window(heartbeat_interval: float | None, settings: Settings) -> float:
    """Seconds of silence after which a node is dead: ``missed_beats`` of its own
    heartbeat interval (the cluster's when it declared none), but never more than
    ``stale_threshold``."""
    interval = heartbeat_interval or settings.heartbeat_interval
    return min(settings.missed_beats * interval, settings.stale_threshold)


def next_idle_since(
    old_status: str, old_idle_since: float | None, new_status: str, now: float
) -> float | None:
    """``idle_since`` is set on entering idle, kept while idle, cleared otherwise."""
    if new_status != "idle":
        return None
    if old_status == "idle" and old_idle_since is not None:
        return old_idle_since
    return now


def idle_retire_at(node: Node, settings: Settings) -> float | None:
    """When the monitor retires ``node`` for idleness; None if it never will."""
    if node.status != "idle" or node.idle_since is None or node.role == MANAGER_ROLE:
        return None
    return node.idle_since + settings.idle_limit


def idle_expired(node: Node, settings: Settings, now: float) -> bool:
    """Whether the monitor retires ``node`` at ``now``: the SQL query
    ``nodes_idle_expired`` encodes exactly this, with the same arithmetic
    (``idle_since <= now - idle_limit``); tests/unit/test_lifecycle.py proves them equal."""
    if node.status != "idle" or node.idle_since is None or node.role == MANAGER_ROLE:
        return False
    return node.idle_since <= now - settings.idle_limit


def derive_strength(model: str | None, table: Sequence[Sequence[str]]) -> str | None:
    """The strength of the first table entry whose text occurs in the model name."""
    if not model:
        return None
    name = model.lower()
    for needle, strength in table:
        if needle.lower() in name:
            return strength
    return "medium"
