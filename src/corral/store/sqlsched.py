"""The activation scheduler of ``SQLStore``: agents, their inboxes and the
activation leases (``corral.scheduler``).

An assignment is one claim statement (the head of one class of the order, taken and
marked held by the runner) and the activation row, in one write transaction; the
order itself is ``corral.scheduler.policy``'s, encoded by the three partial indexes
of the ``agents`` table. A release or an expiry frees the agent in one transaction.
"""

from __future__ import annotations

from typing import Any

from corral.errors import InvalidInputError, LeaseError, NotFoundError
from corral.model import Event
from corral.scheduler.policy import Counts, allowance, next_due, tally
from corral.scheduler.records import Agent, Assignment, Notification
from corral.store.rows import _dumps, _loads, event_from_row
from corral.store.sqldb import Db

__all__ = [
    "activation_deadline",
    "add_agent",
    "agent_from_row",
    "assign",
    "expire_activations",
    "get_agent",
    "list_agents",
    "list_assignments",
    "notify",
    "prune_notifications",
    "read_inbox",
    "release_activation",
    "scheduler_stats",
]

_BATCH = 100  # activations the monitor expires per transaction
_PRUNE_BATCH = 5000  # read inbox items pruned per transaction
INBOX_ITEMS = 100  # the most inbox items an inbox assignment carries
_CLAIM = {"inbox": "claim_inbox", "scheduled": "claim_scheduled", "discovery": "claim_discovery"}
_CLASSES = {
    "notification": ("inbox",),
    "exploration": ("scheduled", "discovery"),
    "hybrid": ("inbox", "scheduled", "discovery"),
}


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def agent_from_row(row: Any) -> Agent:
    return Agent(
        id=row["id"],
        config=_loads(row["config"]) or {},
        unread=row["unread"],
        last_activated_at=_f(row["last_activated_at"]),
        activation_count=row["activation_count"],
        held_by=row["held_by"],
        epoch=row["epoch"],
        next_due_at=_f(row["next_due_at"]),
        next_due_task=row["next_due_task"],
        cap_day=row["cap_day"],
        posts_today=row["posts_today"],
        comments_today=row["comments_today"],
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def notification_from_row(row: Any) -> Notification:
    return Notification(
        id=row["id"],
        agent_id=row["agent_id"],
        payload=_loads(row["payload"]),
        created_at=float(row["created_at"]),
        read_at=_f(row["read_at"]),
    )


def _assignment(act: Any, inbox: list[Notification], config: dict[str, Any]) -> Assignment:
    return Assignment(
        id=act["id"],
        agent_id=act["agent_id"],
        runner_id=act["runner_id"],
        kind=act["kind"],
        epoch=act["epoch"],
        mode=act["mode"],
        claimed_at=float(act["claimed_at"]),
        expires_at=float(act["expires_at"]),
        task=act["task"],
        due_at=_f(act["due_at"]),
        inbox=inbox,
        allowance={"posts": act["posts_left"], "comments": act["comments_left"]},
        config=config,
    )


def add_agent(db: Db, agent_id: str, config: dict[str, Any], now: float, actor: str) -> Agent:
    due = next_due(config, now)
    with db.write() as tx:
        row = tx.one(
            "agent_upsert",
            id=agent_id,
            config=_dumps(config),
            min_interval=config.get("min_activation_interval"),
            next_due_at=None if due is None else due[0],
            next_due_task=None if due is None else due[1],
            now=now,
        )
        db.event(tx, now, "agent_added", agent=agent_id, actor=actor)
        return agent_from_row(row)


def get_agent(db: Db, agent_id: str) -> Agent:
    with db.read() as tx:
        row = tx.one("agent_get", id=agent_id)
    if row is None:
        raise NotFoundError(f"unknown agent {agent_id}; add it first", field="agent_id")
    return agent_from_row(row)


def list_agents(db: Db, after: str, limit: int) -> list[Agent]:
    with db.read() as tx:
        return [agent_from_row(r) for r in tx.all("agents_page", after=after, limit=limit)]


def notify(db: Db, agent_id: str, payload: Any, now: float) -> Notification:
    with db.write() as tx:
        if tx.one("agent_unread_add", id=agent_id) is None:
            raise NotFoundError(f"unknown agent {agent_id}; add it first", field="agent_id")
        row = tx.one("notification_insert", agent_id=agent_id, payload=_dumps(payload), now=now)
        db.event(tx, now, "notified", agent=agent_id, notification=row["id"])
        return notification_from_row(row)


def read_inbox(db: Db, agent_id: str, limit: int, now: float) -> list[Notification]:
    with db.write() as tx:
        if tx.one("agent_for_update", id=agent_id) is None:
            raise NotFoundError(f"unknown agent {agent_id}; add it first", field="agent_id")
        items = [
            notification_from_row(r)
            for r in tx.all("notifications_unread", agent_id=agent_id, limit=limit)
        ]
        if items:
            n = tx.run("notifications_mark_read", agent_id=agent_id, upto=items[-1].id, now=now)
            tx.run("agent_unread_sub", id=agent_id, n=n)
            db.event(tx, now, "inbox_read", agent=agent_id, read=n)
        return items


def assign(db: Db, runner_id: str, mode: str, now: float) -> Assignment | None:
    with db.write() as tx:
        s = db.settings_in(tx)
        # The runner's node locked first (PostgreSQL), as its end and a release do.
        if tx.one("sched_runner_lock", id=runner_id) is None:
            raise NotFoundError(
                f"runner {runner_id} is not a live node; register it (role runner) first",
                field="runner_id",
            )
        tx.run("runner_seen", id=runner_id, mode=mode, now=now)
        row, kind = None, ""
        for kind in _CLASSES[mode]:
            row = tx.one(
                _CLAIM[kind], runner=runner_id, now=now, interval=s.min_activation_interval
            )
            if row is not None:
                break
        if row is None:
            return None
        tx.run("sched_runner_working", id=runner_id, now=now)
        config = _loads(row["config"]) or {}
        left = allowance(
            config, Counts(row["cap_day"], row["posts_today"], row["comments_today"]), now
        )
        inbox: list[Notification] = []
        if kind == "inbox":
            inbox = [
                notification_from_row(r)
                for r in tx.all("notifications_unread", agent_id=row["id"], limit=INBOX_ITEMS)
            ]
        scheduled = kind == "scheduled"
        act = tx.one(
            "activation_insert",
            agent_id=row["id"],
            runner_id=runner_id,
            mode=mode,
            kind=kind,
            epoch=row["epoch"],
            task=row["next_due_task"] if scheduled else None,
            due_at=row["next_due_at"] if scheduled else None,
            inbox_upto=inbox[-1].id if inbox else None,
            posts_left=left.posts,
            comments_left=left.comments,
            now=now,
            expires_at=now + s.activation_ttl,
        )
        db.event(
            tx,
            now,
            "activation_assigned",
            runner_id,
            agent=row["id"],
            assignment=act["id"],
            activation_kind=kind,
            epoch=row["epoch"],
            mode=mode,
            inbox=len(inbox),
        )
        return _assignment(act, inbox, config)


def list_assignments(db: Db, limit: int) -> list[Assignment]:
    with db.read() as tx:
        return [_assignment(r, [], {}) for r in tx.all("activations_all", limit=limit)]


def release_activation(
    db: Db,
    assignment_id: int,
    runner_id: str,
    epoch: int,
    outcome: dict[str, Any],
    now: float,
) -> Agent:
    with db.write() as tx:
        tx.one("sched_runner_lock", id=runner_id)
        act = tx.one("activation_for_update", id=assignment_id)
        if act is None:
            raise LeaseError(
                f"assignment {assignment_id} is not held: it was released or expired,"
                " or never issued",
                field="assignment_id",
            )
        if act["runner_id"] != runner_id:
            raise LeaseError(
                f"assignment {assignment_id} is held by {act['runner_id']}, not {runner_id}",
                field="runner_id",
            )
        if act["expires_at"] <= now:
            raise LeaseError(
                f"assignment {assignment_id} expired at {act['expires_at']:.3f}"
                " (its TTL passed or its runner's node ended)",
                field="assignment_id",
            )
        if act["epoch"] != epoch:
            raise LeaseError(
                f"assignment {assignment_id} is at epoch {act['epoch']}, not {epoch}",
                field="epoch",
            )
        posts, comments = outcome.get("posts", 0), outcome.get("comments", 0)
        for key, n, left in (
            ("posts", posts, act["posts_left"]),
            ("comments", comments, act["comments_left"]),
        ):
            if left is not None and n > left:
                raise InvalidInputError(
                    f"outcome.{key} is {n}, over the {left} left of today's cap",
                    field=f"outcome.{key}",
                )
        agent = tx.one("agent_for_update", id=act["agent_id"])
        read = 0
        if act["inbox_upto"] is not None:
            read = tx.run(
                "notifications_mark_read",
                agent_id=act["agent_id"],
                upto=act["inbox_upto"],
                now=now,
            )
        counts = tally(
            Counts(agent["cap_day"], agent["posts_today"], agent["comments_today"]),
            posts,
            comments,
            now,
        )
        due_at, due_task = agent["next_due_at"], agent["next_due_task"]
        if act["kind"] == "scheduled":
            due = next_due(_loads(agent["config"]) or {}, now)
            due_at, due_task = (None, None) if due is None else due
        row = tx.one(
            "agent_release",
            id=act["agent_id"],
            now=now,
            read=read,
            cap_day=counts.day,
            posts=counts.posts,
            comments=counts.comments,
            next_due_at=due_at,
            next_due_task=due_task,
        )
        tx.run("activation_delete", id=assignment_id)
        tx.run("sched_runner_done", id=runner_id, now=now)
        recorded = {**outcome, "inbox_read": read}
        db.event(
            tx,
            now,
            "activation_released",
            runner_id,
            agent=act["agent_id"],
            assignment=assignment_id,
            activation_kind=act["kind"],
            epoch=epoch,
            outcome=recorded,
            held_seconds=round(now - act["claimed_at"], 3),
        )
        return agent_from_row(row)


# --- the monitor's duty ------------------------------------------------------------
def activation_deadline(db: Db) -> float | None:
    with db.read() as tx:
        t = tx.one("next_activation_expiry")["t"]
    return None if t is None else float(t)


def expire_activations(db: Db, now: float) -> list[Event]:
    with db.write() as tx:
        start = tx.one("events_last")
        for act in tx.all("activations_expired", now=now, limit=_BATCH):
            live = tx.one("sched_runner_alive", id=act["runner_id"]) is not None
            tx.run("agent_unhold", id=act["agent_id"], now=now)
            tx.run("activation_delete", id=act["id"])
            db.event(
                tx,
                now,
                "activation_expired",
                act["runner_id"],
                agent=act["agent_id"],
                assignment=act["id"],
                activation_kind=act["kind"],
                epoch=act["epoch"],
                reason="ttl" if live else "runner_gone",
                held_seconds=round(now - act["claimed_at"], 3),
            )
        since = start["seq"] if start else 0
        return [event_from_row(r) for r in tx.all("events_since", since=since, limit=10_000)]


def prune_notifications(db: Db, now: float) -> int:
    pruned = 0
    while True:
        with db.write() as tx:
            cutoff = now - db.settings_in(tx).event_retention_seconds
            n = tx.run("notifications_prune", cutoff=cutoff, limit=_PRUNE_BATCH)
        pruned += n
        if n < _PRUNE_BATCH:
            return pruned


def scheduler_stats(db: Db, now: float) -> dict[str, Any]:
    with db.read() as tx:
        row = tx.one("sched_stats")
        active = {r["kind"]: r["n"] for r in tx.all("sched_active_by_kind")}
        runners = {r["mode"]: r["n"] for r in tx.all("sched_runners_by_mode")}
    oldest, last = row["oldest_unread"], row["last_activation"]
    return {
        "agents": row["agents"],
        "inbox_depth": row["inbox_depth"],
        "oldest_unread_seconds": 0.0 if oldest is None else max(0.0, now - oldest),
        "since_last_activation_seconds": None if last is None else max(0.0, now - last),
        "active_by_kind": active,
        "runners_by_mode": runners,
    }
