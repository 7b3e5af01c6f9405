"""Counts for ``/metrics`` and ``/v1/stats``, read in one transaction at scrape time.

``Store.stats()`` is the port's method; every SQL store (``SQLStore``) serves it with
``stats_in`` over its read transaction and the named queries ``stats_nodes``,
``stats_tasks``, ``stats_event_count``, ``stats_live_nodes`` and ``stats_inbox`` (plus the
shared ``events_last``, ``meta_get`` and ``settings_all``). Every live node's inbox is counted
in one aggregate (``stats_inbox``: the newest ``MAX_INBOX`` events after the oldest live
cursor, read once), not one count per node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.config import settings_from_rows
from corral.model import last_seen
from corral.store.base import Store
from corral.store.rows import Tx
from corral.validation import MAX_LIMIT

__all__ = ["MAX_INBOX", "RECENT_WINDOW", "ClusterStats", "read_stats", "stats_in"]

MAX_INBOX = MAX_LIMIT  # a node's inbox is counted up to this (the most one read returns)
RECENT_WINDOW = 3600.0  # seconds: ``finished_last_hour`` counts the tasks finished in it


@dataclass(frozen=True, slots=True)
class ClusterStats:
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)  # status -> role -> n
    tasks: dict[str, int] = field(default_factory=dict)  # status -> n
    claims: int = 0  # every claim ever made (the sum of tasks' attempts)
    completions: int = 0  # tasks done
    lease_recoveries: int = 0  # lease_recovered events still in the event log
    last_recovery: float | None = None  # the newest lease_recovered event's time
    # status (done, failed, cancelled) -> tasks finished in the RECENT_WINDOW before
    # the read's ``now`` (empty when read without one)
    finished_last_hour: dict[str, int] = field(default_factory=dict)
    last_event: int = 0
    max_agents: int = 0
    assessment: dict[str, Any] = field(default_factory=dict)
    # the counts recorded with the last assessment (pending_task_count,
    # active_agent_count, idle_agent_count, max_agents, manager_id: read_state's metadata)
    metadata: dict[str, Any] = field(default_factory=dict)
    # per live node: id, role, status, last_seen, inbox (events after its cursor, at
    # most MAX_INBOX: a count on the index, bounded)
    live_nodes: list[dict[str, Any]] = field(default_factory=list)
    # the store's write lock (SQLite): this process's writes that gave up waiting for
    # it, and the process holding it now ({"pid", "stopped"}), if any
    write_lock_timeouts: int = 0
    write_lock_holder: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_stats(store: Store, now: float | None = None) -> ClusterStats:
    """``store.stats(now)`` (``NotImplementedError`` for a store without statistics)."""
    return store.stats(now)


def stats_in(
    store: Store, read: Callable[[], AbstractContextManager[Tx]], now: float | None = None
) -> ClusterStats:
    """The statistics of an SQL store, read in one of its ``read`` transactions; the
    tasks finished in the hour before ``now`` when it is given."""
    since = None if now is None else now - RECENT_WINDOW
    with read() as tx:
        node_rows = tx.all("stats_nodes")
        task_rows = tx.all("stats_tasks", since=since)
        recovered = tx.one("stats_event_count", kind="lease_recovered")
        last = tx.one("events_last")
        live = tx.all("stats_live_nodes")
        last_seq = int(last["seq"]) if last else 0
        # per distinct live cursor: the events after it (at most MAX_INBOX)
        inbox = {
            int(r["cursor"]): int(r["inbox"])
            for r in tx.all("stats_inbox", last=last_seq, cap=MAX_INBOX)
        }
        wd = tx.one("meta_get", key="work_distribution")
        md = tx.one("meta_get", key="cluster_metadata")
        settings = settings_from_rows((r["key"], r["value"]) for r in tx.all("settings_all"))
    holder = store.write_lock_holder()
    nodes: dict[str, dict[str, int]] = {}
    for r in node_rows:
        nodes.setdefault(r["status"], {})[r["role"]] = int(r["n"])
    return ClusterStats(
        nodes=nodes,
        tasks={r["status"]: int(r["n"]) for r in task_rows},
        claims=int(sum(int(r["attempts"]) for r in task_rows)),
        completions=int(next((r["n"] for r in task_rows if r["status"] == "done"), 0)),
        lease_recoveries=int(recovered["n"]),
        last_recovery=None if recovered["last"] is None else float(recovered["last"]),
        finished_last_hour={
            r["status"]: int(r["recent"])
            for r in task_rows
            if now is not None and r["status"] in ("done", "failed", "cancelled")
        },
        last_event=last_seq,
        max_agents=settings.max_agents,
        assessment=json.loads(wd["value"]) if wd else {},
        metadata=json.loads(md["value"]) if md else {},
        live_nodes=[
            {
                "id": r["id"],
                "role": r["role"],
                "status": r["status"],
                "last_seen": last_seen(r["last_activity"], r["last_heartbeat"], r["registered_at"]),
                "inbox": inbox.get(int(r["cursor"]), 0),
            }
            for r in live
        ],
        write_lock_timeouts=store.write_lock_timeouts(),
        write_lock_holder=(
            None if holder is None else {"pid": holder.pid, "stopped": holder.stopped}
        ),
    )
