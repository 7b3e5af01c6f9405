"""The monitor's duties: deaths, idleness, pruning (plain functions over a ``Db``)."""

from __future__ import annotations

from typing import Any

from corral.defaults import MANAGER_ROLE
from corral.model import Event, last_seen
from corral.store import sqltasks, sqlusage
from corral.store.base import Deadlines, TaskSpec
from corral.store.rows import Tx, _dumps, _loads
from corral.store.sqldb import Db, meta

__all__ = ["deadlines", "prune_events", "reap_dead", "retire_idle"]

_BATCH = 100  # nodes the monitor handles per transaction
# A due node another session holds locked (a client stopped inside a transaction)
# is skipped, never waited on; the monitor looks at it again this many seconds later.
LOCKED_RETRY = 0.05


def _after_locked(due: float | None, locked: tuple[float, float] | None) -> float | None:
    """``due``, or the retry time when the earliest due row is one the last pass at
    ``locked[0]`` skipped because another session held it locked."""
    if due is None or locked is None or due > locked[0]:
        return due
    return locked[1]


def deadlines(db: Db) -> Deadlines:
    # One statement (one round trip on PostgreSQL): two index heads
    # (nodes_dead_at, nodes_idle_since; None: no such node) and the settings'
    # version, whose settings are read only when they changed.
    row = db.read_row("deadline_heads")
    assert row is not None  # scalar subqueries: always one row
    dead, idle, version, wd, stuck = row
    s = db.settings_now(version)
    last = (_loads(wd) if wd else {}).get("last_assessment")
    retire = None if idle is None else idle + s.idle_limit
    ready, timeout = sqltasks.deadline_heads(db)
    return Deadlines(
        dead_at=_after_locked(dead, db.locked.get("dead")),
        idle_retire_at=_after_locked(retire, db.locked.get("idle")),
        assess_at=(last or 0.0) + s.workload_assessment_interval,
        task_ready_at=_after_locked(ready, db.locked.get("ready")),
        task_timeout_at=_after_locked(timeout, db.locked.get("timeout")),
        stuck_at=stuck,
    )


def reap_dead(db: Db, now: float) -> list[Event]:
    # Few round trips (each wakes the database on PostgreSQL): the events come back
    # from their INSERTs, and the due count from the first query.
    with db.capturing() as events, db.write_redone() as tx:
        nodes = tx.all("nodes_dead", now=now, limit=_BATCH)
        for node in nodes:
            silent = now - last_seen(
                node["last_activity"], node["last_heartbeat"], node["registered_at"]
            )
            tx.run("node_terminate", now=now, incarnation=node["incarnation"])
            sqltasks.release_all(
                db,
                tx,
                node,
                now,
                kind="lease_recovered",
                counts=True,
                reason="dead",
                stale_seconds=round(silent, 3),
            )
            db.event(
                tx,
                now,
                "node_dead",
                node["id"],
                role=node["role"],
                silent_seconds=round(silent, 3),
            )
            if node["role"] == MANAGER_ROLE:
                _manager_lost(db, tx, node, silent, now)
        # Due rows the query skipped, held by another session: come back to them.
        # (A full batch needs no check: its deadline is still due.)
        if len(nodes) >= _BATCH:
            locked = False
        elif nodes:
            locked = nodes[0]["due"] > len(nodes)  # counted by the same query
        else:
            locked = tx.one("nodes_dead_left", now=now) is not None
        db.locked["dead"] = (now, now + LOCKED_RETRY) if locked else None
    return events


def _manager_lost(db: Db, tx: Tx, node: Any, silent: float, now: float) -> None:
    s = db.settings_in(tx)
    title = f"Recover bootstrap manager {node['id']} (silent {silent:.0f}s)"
    description = (
        f"The bootstrap manager {node['id']} stopped heartbeating and was terminated. "
        "Start a new bootstrap manager session; it resumes from the cluster state."
    )
    spec = TaskSpec(title=title, description=description, priority="high", role=MANAGER_ROLE)
    row = sqltasks.insert_task(db, tx, spec, s, now)  # its roles by the rule of every task
    md = meta(tx, "cluster_metadata")
    md.update(ask_user=True, ask_user_reason=title, manager_id=None)
    tx.run("meta_put", key="cluster_metadata", value=_dumps(md))
    db.event(tx, now, "manager_lost", node["id"], row["id"], ask_user=True)


def retire_idle(db: Db, now: float) -> list[Event]:
    with db.capturing() as events, db.write_redone() as tx:
        s = db.settings_in(tx)
        cutoff = now - s.idle_limit
        nodes = tx.all("nodes_idle_expired", cutoff=cutoff, limit=_BATCH)
        for node in nodes:
            tx.run("node_terminate", now=now, incarnation=node["incarnation"])
            sqltasks.release_all(
                db, tx, node, now, kind="lease_released", counts=False, reason="retired"
            )
            db.event(
                tx,
                now,
                "node_retired",
                node["id"],
                reason="idle",
                idle_seconds=round(now - node["idle_since"], 3),
            )
        locked = len(nodes) < _BATCH and tx.one("nodes_idle_left", cutoff=cutoff) is not None
        db.locked["idle"] = (now, now + LOCKED_RETRY) if locked else None
    return events


def prune_events(db: Db, now: float) -> int:
    with db.write() as tx:
        s = db.settings_in(tx)
        # The usage reports on events (SQLite's completions) go to their hours first.
        while sqlusage.roll_up(db, tx) == sqlusage.ROLL_BATCH:
            pass
        return tx.run("events_prune", cutoff=now - s.event_retention_seconds)
