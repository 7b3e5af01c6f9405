"""One feed for every open dashboard: the cluster read once per change, fanned out.

The feed follows the event log the way ``/v1/events`` does (woken by every write
through this server, else every ``poll`` seconds) and, when events arrived, reads one
``Snapshot`` through the cluster's public operations. Every open page's stream waits
on the feed and renders its panels from the same snapshot, so 50 open pages cost the
store the same reads per event as one. Reads are at most one per ``min_interval``
(a burst of events is one read) and at least one per ``refresh`` while any page is
open (ages move on without events). The feed runs only while a page is open.
Each snapshot read also samples the Fleet panel's last hour (``history``) from the
counts it holds: the sparklines cost no read of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from corral.dashboard.history import History, Trend
from corral.model import Event, Node, Process, Settings, Task

if TYPE_CHECKING:
    from corral.cluster import Cluster
    from corral.scheduler.records import Agent, Assignment
    from corral.server.app import ServerState
    from corral.spawning import SpawnRequest
    from corral.store.stats import ClusterStats
    from corral.workflows.model import Handler

__all__ = [
    "EVENTS_KEPT",
    "ROWS_SHOWN",
    "SCALE_KEPT",
    "TASKS_SHOWN",
    "Feed",
    "Snapshot",
    "read_snapshot",
    "scale_event",
]

log = logging.getLogger("corral.dashboard")

EVENTS_KEPT = 200  # the newest events the Events panel can show
TASKS_SHOWN = 100  # tasks per list (pending, in progress, failed)
ROWS_SHOWN = 100  # rows per list of the other panels (requests, runs, agents, activations)
SCALE_KEPT = 200  # the newest pool and spawn request events the Pools panel can show
_BATCH = 1000


@dataclass(slots=True)
class Snapshot:
    """What every panel shows, read at ``now`` after event ``seq``. ``rendered``
    caches each panel's HTML per filter (filled by the views)."""

    seq: int
    now: float
    settings: Settings
    stats: ClusterStats  # with the last assessment and the counts it recorded
    nodes: list[Node]
    pending: list[Task]
    in_progress: list[Task]
    failed: list[Task]
    events: list[Event]  # oldest first, at most EVENTS_KEPT
    processes: list[Process] = field(default_factory=list)  # at most ROWS_SHOWN * 10
    spawn_pending: list[SpawnRequest] = field(default_factory=list)
    idle_runs: list[Handler] = field(default_factory=list)  # longest idle first
    agents: list[Agent] = field(default_factory=list)  # by id, the first ROWS_SHOWN
    assignments: list[Assignment] = field(default_factory=list)  # oldest first
    scale_events: list[Event] = field(default_factory=list)  # oldest first, SCALE_KEPT
    rendered: dict[tuple[str, str], str] = field(default_factory=dict)
    trend: Trend | None = None  # the feed's last hour (Fleet's sparklines), if any


def scale_event(e: Event) -> bool:
    """An event the Pools panel shows: a pool's size changed, or a spawn request's
    step (requested, accepted, declined, withdrawn, fulfilled)."""
    return (e.kind == "alert" and e.data.get("reason") == "pool_scaled") or e.kind.startswith(
        "spawn_request"
    )


def read_snapshot(
    cluster: Cluster, seq: int, events: list[Event], scale_events: list[Event] | None = None
) -> Snapshot:
    """Read a snapshot through the cluster's operations (one thread hop's worth).
    Only reads, each made once: ``stats`` holds the counts of every panel and the
    assessment shown, the last one recorded (the monitor's, every
    ``workload_assessment_interval``) with the counts recorded beside it; the lists
    are read with ``TASKS_SHOWN`` or ``ROWS_SHOWN`` as their limit, except the nodes
    (every node: the Nodes panel counts them by its filter and shows a page). A task
    list ``stats`` counts no task of is not read (finding none can take a scan)."""
    now = cluster.clock.now()
    settings = cluster.settings()
    stats = cluster.stats()

    def tasks(status: str) -> list[Task]:
        if not stats.tasks.get(status):
            return []
        return cluster.list_tasks(status, limit=TASKS_SHOWN)

    return Snapshot(
        seq=seq,
        now=now,
        settings=settings,
        stats=stats,
        nodes=cluster.list_nodes(),
        pending=tasks("pending"),
        in_progress=tasks("in_progress"),
        failed=tasks("failed"),
        events=events,
        processes=cluster.list_processes()[: ROWS_SHOWN * 10],
        spawn_pending=cluster.spawn_requests("pending", limit=ROWS_SHOWN),
        idle_runs=cluster.list_handlers(idle=True, limit=ROWS_SHOWN),
        agents=cluster.list_agents(limit=ROWS_SHOWN),
        assignments=cluster.list_assignments(limit=ROWS_SHOWN),
        scale_events=list(scale_events or []),
    )


class _Subscriber:
    def __init__(self) -> None:
        self.latest: Snapshot | None = None
        self.ready = asyncio.Event()

    async def next(self, timeout: float) -> Snapshot | None:
        """The newest snapshot not taken yet, or None after ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout)
        if not self.ready.is_set():
            return None
        self.ready.clear()
        return self.latest


class Feed:
    """The fan-out of one server's cluster to its open dashboards."""

    def __init__(
        self,
        st: ServerState,
        *,
        min_interval: float = 0.1,
        refresh: float = 5.0,
    ) -> None:
        self.st = st
        self.min_interval = min_interval
        self.refresh = refresh
        self.reads = 0  # snapshots read since the server started
        self.latest: Snapshot | None = None
        self._subs: set[_Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self._cursor: int | None = None
        self._events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        self._scale: deque[Event] = deque(maxlen=SCALE_KEPT)  # kept past EVENTS_KEPT
        self._read_at = 0.0
        self._lock = threading.Lock()  # a page's first read may run beside the feed's
        self.history = History()  # sampled from each snapshot read: no read of its own

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[_Subscriber]:
        """A subscriber that is handed every new snapshot (the newest only, when it
        falls behind); first the current one, or the first the feed reads."""
        sub = _Subscriber()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        elif self.latest is not None:
            sub.latest = self.latest
            sub.ready.set()
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    async def current(self) -> Snapshot:
        """The newest snapshot: the feed's while it runs and is fresh, else one read
        now (a page's first paint)."""
        latest = self.latest
        if (
            latest is not None
            and self._task is not None
            and not self._task.done()
            and time.monotonic() - self._read_at < self.refresh
        ):
            return latest
        snap: Snapshot = await self.st.run(self._read)
        if self._task is None or self._task.done():
            self.latest = snap  # kept for the next page while no feed runs
        return snap

    def _follow(self, upto: int | None = None) -> bool:
        """Read the events after the cursor (up to event ``upto``, when given); True
        when there were any."""
        cluster = self.st.cluster
        assert self._cursor is not None
        moved = False
        while True:
            batch = cluster.events(self._cursor, _BATCH)
            full = len(batch) == _BATCH
            if upto is not None and batch and batch[-1].seq > upto:
                batch = [e for e in batch if e.seq <= upto]
                full = False
            if batch:
                self._events.extend(batch)
                self._scale.extend(e for e in batch if scale_event(e))
                self._cursor = batch[-1].seq
                moved = True
            if not full:
                return moved

    def _read(self) -> Snapshot:
        """A first read (a page while no feed runs, or a feed starting): the events
        start again from the newest, however long no page was open."""
        with self._lock:
            self._cursor = None
            self._events.clear()
            self._scale.clear()
        snap = self._poll(force=True)
        assert snap is not None
        return snap

    def _poll(self, force: bool = False) -> Snapshot | None:
        """One step: a new snapshot when events arrived (or ``refresh`` passed)."""
        with self._lock:
            if self._cursor is None:
                # A first read: the snapshot's own stats say where the event log ends
                # (no read of its own); the newest EVENTS_KEPT events up to there.
                snap = read_snapshot(self.st.cluster, 0, [], [])
                self._cursor = max(0, snap.stats.last_event - EVENTS_KEPT)
                self._follow(upto=snap.stats.last_event)
                snap.seq = self._cursor
                snap.events = list(self._events)
                snap.scale_events = list(self._scale)
            else:
                moved = self._follow()
                if not (force or moved) and time.monotonic() - self._read_at < self.refresh:
                    return None
                snap = read_snapshot(
                    self.st.cluster, self._cursor, list(self._events), list(self._scale)
                )
            stats = snap.stats
            pending = stats.tasks.get("pending", 0)
            self.history.record(snap.now, pending, len(stats.live_nodes), stats.completions)
            snap.trend = self.history.trend(snap.now)
            self.reads += 1
            self._read_at = time.monotonic()
            return snap

    def _publish(self, snap: Snapshot) -> None:
        self.latest = snap
        for sub in self._subs:
            sub.latest = snap
            sub.ready.set()

    async def _run(self) -> None:
        first = True
        failing = False
        while self._subs:
            changed = self.st.changed()  # taken before reading: no wake-up is missed
            started = time.monotonic()
            try:
                snap: Snapshot | None = await self.st.run(self._read if first else self._poll)
            except Exception as exc:  # a store outage: the pages keep their last view
                if not failing:
                    log.warning("dashboard feed read failed: %s", exc, extra={"action": "feed"})
                failing = True
                await asyncio.sleep(max(self.st.sse_poll, 1.0))
                continue
            if failing:
                log.info("dashboard feed reads again", extra={"action": "feed"})
            first = failing = False
            if snap is not None:
                self._publish(snap)
            with anyio.move_on_after(self.st.sse_poll):
                await changed.wait()
            rest = self.min_interval - (time.monotonic() - started)
            if rest > 0:
                await asyncio.sleep(rest)
