"""A short scripted fleet run: the whole lifecycle in about five seconds.

A bootstrap manager fills the board and spawns developers while the assessment says
so; the cap refuses one too many; developers claim by score, one crashes mid-task and
the monitor takes its work back at the heartbeat threshold; when the board is empty
the developers go idle, wait out their grace period and retire.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from corral.errors import CapacityError, NotFoundError
from corral.model import Event
from corral.monitor import Monitor
from corral.types import Client

__all__ = ["run_demo"]

TASKS = [
    ("Design the storage schema", "high"),
    ("Implement user authentication", "high"),
    ("Write tests for the login flow", "medium"),
    ("Plan the v2 rollout", "medium"),
    ("Implement rate limiting", "medium"),
    ("Code the export command", "low"),
    ("Implement audit logging", "high"),
    ("Write the operator guide", "low"),
    ("Test the failover path", "medium"),
    ("Implement search", "medium"),
]

DEMO_SETTINGS: dict[str, Any] = {
    "max_agents": 4,
    "idle_timeout_seconds": 1.5,
    "grace_period_seconds": 1.5,
    "workload_assessment_interval": 1.0,
    "heartbeat_interval": 0.5,
    "missed_beats": 3,
}


def _seconds(value: object) -> str:
    """A duration from an event, to a tenth of a second (events keep milliseconds)."""
    return f"{value:.1f}" if isinstance(value, int | float) else "?"


def _describe(e: Event) -> str | None:
    d = e.data
    return {
        "node_registered": lambda: f"{e.node_id} registered as {d.get('role')}",
        "task_claimed": lambda: f"{e.node_id} claimed task {e.task_id} (epoch {d.get('epoch')})",
        "task_completed": lambda: f"{e.node_id} completed task {e.task_id}",
        "lease_recovered": lambda: (
            f"monitor: {e.node_id} silent {_seconds(d.get('stale_seconds'))}s, task {e.task_id}"
            f" back to {d.get('outcome')}"
        ),
        "node_dead": lambda: f"monitor: {e.node_id} declared dead",
        "node_retired": lambda: (
            f"monitor: {e.node_id} retired after {_seconds(d.get('idle_seconds'))}s idle"
        ),
        "node_status": lambda: (
            f"{e.node_id}: {d.get('old')} -> {d.get('new')}"
            if d.get("old") != d.get("new")
            else f"{e.node_id} says it is {d.get('new')}"  # already so: its last task done
        ),
        "assessment": lambda: (
            f"assessment of {d.get('pending')} pending, {d.get('active')} live:"
            f" {d.get('status')} -> {d.get('recommendation')}"
        ),
        "broadcast": lambda: f"{e.node_id or 'operator'} says: {d.get('message')}",
    }.get(e.kind, lambda: None)()


def _developer(cluster: Client, node_id: str, stop: threading.Event, quirk: str) -> None:
    """A developer: claim by score, work, and retire when idle past the grace period.
    ``quirk`` "crash" goes silent holding a task; "stays" never retires itself."""
    s = cluster.settings()
    idle_since: float | None = None
    while not stop.is_set():
        try:
            cluster.heartbeat(node_id, health_status="healthy")
        except NotFoundError:
            return  # the monitor retired us
        if quirk == "stays" and idle_since is not None:
            time.sleep(0.2)
            continue
        task = cluster.claim_best_task(node_id, "developer")
        if task is not None:
            idle_since = None
            if quirk == "crash":
                return  # holds the lease and goes silent: the monitor must notice
            time.sleep(0.3)
            cluster.complete_task(task.id, node_id, task.epoch, result={"by": node_id})
            continue
        cluster.catch_up(node_id)
        if idle_since is None:
            cluster.set_agent_status(node_id, "idle")
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= s.idle_timeout_seconds:
            cluster.set_agent_status(node_id, "terminated")
            cluster.broadcast(f"Node {node_id} terminating due to lack of work", node_id=node_id)
            return
        time.sleep(0.2)


def run_demo(
    connect: Callable[[], Client], echo: Callable[[str], None], *, timeout: float = 60.0
) -> dict[str, Any]:
    """Run the scripted fleet on a fresh cluster; returns a summary of what happened."""
    cluster = connect()
    cluster.configure(**DEMO_SETTINGS)
    start = time.monotonic()
    wall = time.time()
    cursor = max((e.seq for e in cluster.events(limit=10_000)), default=0)

    def show_events() -> None:
        """Print every event after the cursor, in cursor (seq) order: the order the
        cluster committed them. A batch of task_added events is one line."""
        nonlocal cursor
        added: list[Event] = []

        def flush() -> None:
            if added:
                echo(f"{added[0].ts - wall:6.2f}s  manager added {len(added)} tasks")
                added.clear()

        for e in cluster.events(since=cursor, limit=10_000):
            cursor = e.seq
            if e.kind == "task_added":
                added.append(e)
                continue
            flush()
            line = _describe(e)
            if line:
                echo(f"{e.ts - wall:6.2f}s  {line}")
        flush()

    def show_refusal(node_id: str, exc: CapacityError) -> None:
        """The cap doing its job: the point of this step, not a failure."""
        show_events()
        echo(
            f"{time.time() - wall:6.2f}s  the cap at work: {node_id} asked to join a full"
            f" cluster and was turned away: {exc}"
        )

    stop = threading.Event()
    threads: list[threading.Thread] = []
    refused = 0
    # The board is filled before the monitor starts, so its first assessment describes
    # the work there is (not an empty cluster about to be filled).
    cluster.register_node("Node-BM", "bootstrap_manager", "claude-opus-4", heartbeat_interval=0.5)
    cluster.add_tasks([{"title": t, "priority": p} for t, p in TASKS])
    monitor = Monitor(connect(), max_sleep=0.1)
    monitor_thread = monitor.start_thread()
    try:
        n = 0
        while time.monotonic() - start < timeout:
            cluster.heartbeat("Node-BM")
            a = cluster.assess_workload()
            show_events()
            if a.recommendation.startswith("spawn_") and n < 6:
                n += 1
                node_id = f"Dev-{n}"
                try:
                    cluster.register_node(
                        node_id, "developer", "claude-sonnet-4-5", heartbeat_interval=0.5
                    )
                except CapacityError as exc:
                    refused += 1
                    show_refusal(node_id, exc)
                else:
                    quirk = {2: "crash", 3: "stays"}.get(n, "")
                    t = threading.Thread(
                        target=_developer, args=(connect(), node_id, stop, quirk), daemon=True
                    )
                    t.start()
                    threads.append(t)
            live = [x for x in cluster.list_nodes() if x.status != "terminated"]
            if len(live) == DEMO_SETTINGS["max_agents"] and not refused:
                try:
                    cluster.register_node("Dev-extra", "developer", "claude-haiku")
                except CapacityError as exc:
                    refused += 1
                    show_refusal("Dev-extra", exc)
            if a.status == "idle" and all(x.role == "bootstrap_manager" for x in live):
                break
            time.sleep(0.25)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        monitor.stop()
        monitor_thread.join(timeout=5)
    show_events()
    done = cluster.list_tasks(status="done", limit=1000)
    summary = {
        "tasks_done": len(done),
        "tasks_total": len(TASKS),
        # The developers that joined: how many depends on when the assessments ran
        # (a developer spawned for the crashed one's task, or not).
        "developers": len(threads),
        "refused_registrations": refused,
        "lease_recoveries": sum(
            1 for e in cluster.events(limit=10_000) if e.kind == "lease_recovered"
        ),
        "retired": sum(1 for e in cluster.events(limit=10_000) if e.kind == "node_retired")
        + sum(
            1
            for e in cluster.events(limit=10_000)
            if e.kind == "node_status" and e.data.get("new") == "terminated"
        ),
        "seconds": round(time.monotonic() - start, 2),
    }
    echo("")
    echo(cluster.read_state().text)
    cluster.close()
    return summary


def demo_ok(summary: dict[str, Any]) -> bool:
    return bool(
        summary["tasks_done"] == summary["tasks_total"] and summary["lease_recoveries"] >= 1
    )
