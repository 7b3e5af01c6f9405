"""The background duties, deadline-driven.

``Monitor.tick(now)`` is one pass: recover the leases of dead nodes, retire idle
nodes, refresh the assessment, prune old events, and say when the next deadline is.
``Monitor.run()`` is that pass in a loop that sleeps until the next deadline (at most
``max_sleep``, so work that other processes add is seen promptly) or until woken.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field

from corral.backoff import Backoff
from corral.cluster import Cluster
from corral.defaults import MONITOR_MAX_SLEEP
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.model import Assessment, Event
from corral.types import Client
from corral.validation import check_positive

__all__ = ["Monitor", "TickResult"]

log = logging.getLogger("corral.monitor")

_PRUNE_EVERY = 3600.0


@dataclass(frozen=True, slots=True)
class TickResult:
    events: list[Event] = field(default_factory=list)
    assessment: Assessment | None = None
    next_deadline: float | None = None
    leader: bool = True


def _log_event(event: Event) -> None:
    d = event.data
    if event.kind == "node_retired":
        msg = f"Marked {event.node_id} as terminated (idle > {d.get('idle_seconds', 0):.0f}s)"
    elif event.kind == "node_dead":
        msg = f"Marked {event.node_id} as terminated (silent {d.get('silent_seconds', 0):.1f}s)"
    elif event.kind == "lease_recovered":
        msg = (
            f"Stale lock recovered: task {event.task_id} from {event.node_id}"
            f" (stale {d.get('stale_seconds', 0):.1f}s, attempt {d.get('attempt')},"
            f" now {d.get('outcome')})"
        )
    elif event.kind == "manager_lost":
        msg = f"Bootstrap manager {event.node_id} lost; recovery task {event.task_id} created"
    else:
        msg = f"{event.kind} {event.node_id or ''} {event.task_id or ''}".strip()
    log.info(msg, extra={"action": event.kind, "node_id": event.node_id, "task_id": event.task_id})


class Monitor:
    def __init__(self, cluster: Client, *, max_sleep: float = MONITOR_MAX_SLEEP,
                 name: str | None = None) -> None:  # fmt: skip
        if not isinstance(cluster, Cluster):  # the duties are store transactions
            raise InvalidInputError(
                "the monitor needs the store itself (a sqlite:// or postgresql:// url),"
                " not a remote client",
                field="url",
            )
        self.cluster: Cluster = cluster
        self.max_sleep = check_positive(max_sleep, "max_sleep")
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_prune = float("-inf")
        # (pid, stopped, since) of a process seen holding the store's write lock while
        # the duties failed; reported as an alert event once writes go through again
        self._stall: tuple[int, bool, float] | None = None

    def tick(self, now: float | None = None) -> TickResult:
        """Do every duty that is due at ``now``; return what happened and when the
        next duty falls due."""
        store = self.cluster.store
        now = self.cluster.clock.now() if now is None else now
        if not store.try_lead(self.name):
            return TickResult(next_deadline=now + self.max_sleep, leader=False)
        events: list[Event] = []
        assessed = None
        due = store.deadlines()
        with store.acting_as(self.name):  # its events say which monitor acted
            if due.dead_at is not None and due.dead_at <= now:
                events += store.reap_dead(now)
            if due.idle_retire_at is not None and due.idle_retire_at <= now:
                events += store.retire_idle(now)
            # Activation leases (corral.scheduler), after the reaping: a runner's
            # death ends its activations at that moment.
            expiry = store.activation_deadline()
            if expiry is not None and expiry <= now:
                events += store.expire_activations(now)
            if due.assess_at <= now:
                assessed = store.assess(now)
            if now - self._last_prune >= _PRUNE_EVERY:
                store.prune_events(now)
                store.prune_notifications(now)  # read inbox items, as old (scheduler)
                self._last_prune = now
        for event in events:
            _log_event(event)
        if events or assessed:
            due = store.deadlines()
        expiry = store.activation_deadline()
        upcoming = [
            t for t in (due.dead_at, due.idle_retire_at, due.assess_at, expiry) if t is not None
        ]
        return TickResult(events=events, assessment=assessed, next_deadline=min(upcoming))

    def wake(self) -> None:
        """Re-read the deadlines now (something changed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        """Loop ``tick`` until ``stop()``; store outages are logged and retried."""
        backoff = Backoff(base=0.1, cap=5.0)  # 0.1 s doubling to 5 s while unavailable
        log.info("monitor started", extra={"action": "monitor_started", "monitor": self.name})
        while not self._stop.is_set():
            try:
                result = self.tick()
                backoff.reset()
                if self._stall is not None:
                    self._report_stall()
                now = self.cluster.clock.now()
                wait = self.max_sleep
                if result.next_deadline is not None:
                    wait = min(wait, max(0.0, result.next_deadline - now))
            except StoreUnavailableError as exc:
                self._note_stall()
                log.warning("store unavailable: %s", exc, extra={"action": "monitor_retry"})
                wait = backoff.next()
            self._wake.wait(wait)
            self._wake.clear()
        log.info("monitor stopped", extra={"action": "monitor_stopped", "monitor": self.name})

    def _note_stall(self) -> None:
        """After a failed pass: a process holding the store's write lock (SQLite) is
        logged by pid, and remembered for the alert once it lets go."""
        holder = self.cluster.store.write_lock_holder()
        if holder is None:
            return
        now = self.cluster.clock.now()
        if self._stall is None or self._stall[0] != holder.pid:
            self._stall = (holder.pid, holder.stopped, now)
        elif holder.stopped:
            self._stall = (holder.pid, True, self._stall[2])
        state = "stopped " if holder.stopped else ""
        log.warning(
            "process %d (%sholding the store's write lock) blocks every writer;"
            " resume it (kill -CONT %d) or end it",
            holder.pid,
            state,
            holder.pid,
            extra={"action": "store_lock_held", "pid": holder.pid, "stopped": holder.stopped},
        )

    def _report_stall(self) -> None:
        """The store's writes go through again: record how long a process held them."""
        assert self._stall is not None
        pid, stopped, since = self._stall
        now = self.cluster.clock.now()
        state = "stopped " if stopped else ""
        self.cluster.store.record_alert(
            None,
            f"{state}process {pid} held the store's write lock; writes failed for"
            f" {now - since:.1f}s",
            {"reason": "store_lock_held", "pid": pid, "stopped": stopped,
             "seconds": round(now - since, 3), "monitor": self.name},
            now,
        )  # fmt: skip
        self._stall = None

    def start_thread(self) -> threading.Thread:
        """Run the monitor in a daemon thread of this process."""
        thread = threading.Thread(target=self.run, name="corral-monitor", daemon=True)
        thread.start()
        return thread
