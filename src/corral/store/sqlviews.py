"""The read-mostly operations of ``SQLStore``: assessment, state, events, series."""

from __future__ import annotations

from typing import Any

from corral import assessment, lifecycle
from corral.errors import NotFoundError
from corral.model import Assessment, CatchUp, Event, State
from corral.store.rows import _dumps, event_from_row, node_from_row, task_from_row
from corral.store.sqldb import Db, live, meta
from corral.store.sqlprocs import process_from_row

__all__ = [
    "assess",
    "broadcast",
    "catch_up",
    "events",
    "record_alert",
    "record_sample",
    "samples",
    "snapshot",
]


# --- cluster views --------------------------------------------------------------
def assess(db: Db, now: float) -> Assessment:
    # The counts read the fleet and the board: in a read transaction, so no write
    # waits while they run; the write that records them is a few rows.
    with db.read() as tx:
        c = dict(tx.one("assess_counts"))
    with db.write() as tx:
        s = db.settings_in(tx)
        counts = assessment.Counts(
            pending=c["pending"],
            in_progress=c["in_progress"],
            active_count=c["active_count"],
            working=c["working"],
            idle=c["idle"],
            max_agents=s.max_agents,
            architect_only=c["architect_only"],
        )
        status, rec = assessment.decide(counts)
        wd_old = meta(tx, "work_distribution")
        wd = {"last_assessment": now, "workload_status": status, "spawn_recommendation": rec}
        md = meta(tx, "cluster_metadata")
        md.update(
            max_agents=s.max_agents,
            active_agent_count=counts.active_count,
            idle_agent_count=counts.idle,
            pending_task_count=counts.pending,
            manager_id=c["manager_id"],
        )
        tx.run("meta_put", key="work_distribution", value=_dumps(wd))
        tx.run("meta_put", key="cluster_metadata", value=_dumps(md))
        if (wd_old.get("workload_status"), wd_old.get("spawn_recommendation")) != (status, rec):
            db.event(
                tx,
                now,
                "assessment",
                status=status,
                recommendation=rec,
                pending=counts.pending,
                active=counts.active_count,
            )
        return Assessment(
            status=status,
            recommendation=rec,
            max_agents=s.max_agents,
            active_count=counts.active_count,
            idle_count=counts.idle,
            working_count=counts.working,
            pending_tasks=counts.pending,
            in_progress=counts.in_progress,
            architect_only_pending=counts.architect_only,
            manager_id=c["manager_id"],
            assessed_at=now,
        )


def snapshot(db: Db, now: float, node_id: str | None = None, limit: int = 50) -> State:
    with db.read_latest() as tx:
        s = db.settings_in(tx)
        working = tx.all("tasks_in_progress", limit=limit)
        pending = tx.all("tasks_pending", limit=limit)
        counts = tx.one("assess_counts")
        nodes = [node_from_row(r) for r in tx.all("nodes_live")]
        last = tx.one("events_last")
        md = meta(tx, "cluster_metadata")
        wd = meta(tx, "work_distribution")
        if node_id is not None:
            row = tx.one("node_latest", id=node_id)
            last_hb = row["last_heartbeat"] if row else None
        else:
            last_hb = tx.one("last_heartbeat_any")["t"]
        processes = [process_from_row(r) for r in tx.all("processes_all")]
        stuck = {r["id"] for r in tx.all("nodes_all_stuck")}
    tasks = [task_from_row(r) for r in (*working, *pending)][:limit]
    total = counts["pending"] + counts["in_progress"]
    return State(
        now=now,
        summary=s.project_summary,
        tasks=tasks,
        tasks_omitted=max(0, total - len(tasks)),
        nodes=nodes,
        max_agents=s.max_agents,
        pending_tasks=counts["pending"],
        in_progress=counts["in_progress"],
        metadata=md,
        work_distribution=wd,
        last_event_ts=last["ts"] if last else None,
        last_heartbeat=last_hb,
        liveness_window=lifecycle.liveness_window(None, s),
        processes=processes,
        stuck_nodes=[n.id for n in nodes if n.id in stuck],
    )


def catch_up(db: Db, node_id: str, since: int | None, limit: int, now: float) -> CatchUp:
    with db.write() as tx:
        node = live(tx, node_id, "node_live_for_update")
        cursor = node["cursor"] if since is None else since
        events: list[Event] = []
        # Heartbeat samples are metrics, not news: skipped (the cursor moves past
        # them). A page that was all samples is followed by the next, a few times.
        for _ in range(10):
            rows = tx.all("events_since", since=cursor, limit=limit)
            for r in rows:
                if len(events) == limit:
                    break
                cursor = r["seq"]
                if r["kind"] != "heartbeat_sample":
                    events.append(event_from_row(r))
            if len(events) == limit or len(rows) < limit:
                break
        tx.run("node_set_cursor", cursor=cursor, now=now, incarnation=node["incarnation"])
        return CatchUp(events=events, cursor=cursor)


def events(db: Db, since: int, limit: int = 1000) -> list[Event]:
    with db.read_latest(single=True) as tx:
        return [event_from_row(r) for r in tx.all("events_since", since=since, limit=limit)]


def broadcast(db: Db, node_id: str | None, message: str, now: float) -> Event:
    with db.write() as tx:
        if node_id is not None:
            # The sender need only exist: a retiring worker broadcasts its
            # farewell right after marking itself terminated.
            if tx.one("node_latest", id=node_id) is None:
                raise NotFoundError(f"unknown node {node_id}", field="node_id")
            tx.run("node_touch", id=node_id, now=now)
        row = tx.one(
            "event_insert_returning",
            ts=now,
            kind="broadcast",
            node_id=node_id,
            task_id=None,
            data=_dumps({"message": message}),
        )
        return event_from_row(row)


# --- alerts and the heartbeat metrics series -----------------------------------
def record_alert(
    db: Db, node_id: str | None, message: str, data: dict[str, Any], now: float
) -> Event:
    with db.write() as tx:
        row = tx.one(
            "event_insert_returning",
            ts=now,
            kind="alert",
            node_id=node_id,
            task_id=None,
            data=_dumps({**data, "message": message}),
        )
        return event_from_row(row)


def record_sample(
    db: Db, node_id: str, sample: dict[str, Any], keep: int | None, now: float
) -> Event:
    with db.write() as tx:
        row = tx.one(
            "event_insert_returning",
            ts=now,
            kind="heartbeat_sample",
            node_id=node_id,
            task_id=None,
            data=_dumps(sample),
        )
        if keep is not None:
            tx.run("samples_prune", node_id=node_id, keep=keep)
        return event_from_row(row)


def samples(db: Db, node_id: str, limit: int) -> list[Event]:
    with db.read() as tx:
        rows = tx.all("samples_latest", node_id=node_id, limit=limit)
    return [event_from_row(r) for r in rows]
