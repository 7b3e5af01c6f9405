"""The background duties, deadline-driven.

``Monitor.tick(now)`` is one pass: recover the leases of dead nodes, retire idle
nodes, refresh the assessment, prune old events, and say when the next deadline is.
``Monitor.run()`` is that pass in a loop that sleeps until the next deadline (at most
``max_sleep``, so work that other processes add is seen promptly) or until woken.
With ``alerts=True`` (``corral serve``, ``corral up``, ``corral monitor``) each pass
of the loop is followed by the alerter's (``alert_pass(tick)``), which alerts only
after a tick that led: one alerter sends per cluster.

Each duty is a ``Duty``: a function giving its next deadline and a function doing the
work due at a moment. The deadlines come from index heads (``Store.deadlines``, one
short read), and the work visits only what is past its deadline, in short
transactions, so a wake costs the same whatever the fleet's size. To add a duty: give
the store a read of its next deadline from an index (a field of ``Deadlines`` filled
by ``deadlines()``, or a query of its own) and a method doing the due work in batches,
then append a ``Duty`` to ``DUTIES``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.backoff import Backoff
from corral.cluster import Cluster
from corral.deadlines import Deadlines
from corral.defaults import MONITOR_MAX_SLEEP, USAGE_ROLL_UP_EVERY
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.model import Assessment, Event
from corral.store.base import Store
from corral.types import Client
from corral.validation import check_positive

if TYPE_CHECKING:
    from corral.alerter import Alerter

__all__ = ["DUTIES", "Duty", "Monitor", "TickResult"]

# How long before a deadline the monitor's timer wakes it: the election check and the
# wake-up itself happen before the deadline, the work right at it.
EARLY = 0.002

# The longest a leading monitor goes without renewing its lead (a tick), whatever its
# max_sleep: on PostgreSQL the server ends a leader's session that stays silent past
# a bound (a stopped or cut-off leader's), which a monitor merely sleeping must not reach.
LEAD_RENEW = MONITOR_MAX_SLEEP

log = logging.getLogger("corral.monitor")

_PRUNE_EVERY = 3600.0

# What a duty's work returns: the events it recorded, or the assessment it made.
DutyOutcome = Sequence[Event] | Assessment | None


def _roll_up(store: Store, now: float) -> None:
    store.roll_up_usage(now)


def _prune(store: Store, now: float) -> None:
    store.prune_events(now)
    store.prune_notifications(now)  # read inbox items, as old (corral.scheduler)


@dataclass(frozen=True, slots=True)
class Duty:
    """One of the monitor's duties.

    ``due(store, deadlines, last_run)`` is when it next falls due (None: nothing to
    do), from the wake's ``Deadlines`` read or an index head of its own; ``last_run``
    is when this monitor last ran it (None: never). ``run(store, now)`` does the work
    due at ``now`` in short transactions (a batch each; the monitor comes back at once
    while the deadline is still past) and returns its events or its assessment.
    ``wakes``: whether its due time wakes the monitor (is a deadline); a duty that
    does not is done at the passes the monitor makes anyway (at least every
    ``max_sleep``) once it is due."""

    name: str
    due: Callable[[Store, Deadlines, float | None], float | None]
    run: Callable[[Store, float], DutyOutcome]
    wakes: bool = True


DUTIES: tuple[Duty, ...] = (
    Duty(
        "reap_dead", lambda store, due, last: due.dead_at, lambda store, now: store.reap_dead(now)
    ),
    # Stuck tasks (corral.store.sqlprogress): in progress without progress past their
    # deadline, flagged, requeued or failed by the stuck_action setting.
    Duty(
        "stuck_tasks",
        lambda store, due, last: due.stuck_at,
        lambda store, now: store.act_on_stuck(now),
    ),
    Duty(
        "retire_idle",
        lambda store, due, last: due.idle_retire_at,
        lambda store, now: store.retire_idle(now),
    ),
    # Activation leases (corral.scheduler), after the reaping: a runner's death ends
    # its activations at that moment.
    Duty(
        "expire_activations",
        lambda store, due, last: store.activation_deadline(),
        lambda store, now: store.expire_activations(now),
    ),
    # Tasks with time and order: a scheduled task becomes pending at its ready_at, and
    # a run past its timeout is taken back (docs/core.md, "Tasks with time and order").
    Duty(
        "make_tasks_ready",
        lambda store, due, last: due.task_ready_at,
        lambda store, now: store.make_tasks_ready(now),
    ),
    Duty(
        "time_out_tasks",
        lambda store, due, last: due.task_timeout_at,
        lambda store, now: store.time_out_tasks(now),
    ),
    Duty("assess", lambda store, due, last: due.assess_at, lambda store, now: store.assess(now)),
    # Usage reports kept on completion events (SQLite) added to their hours in batches:
    # the reads count them either way, this keeps the reads short, so it is no
    # deadline (it never wakes the monitor).
    Duty(
        "roll_up_usage",
        lambda store, due, last: float("-inf") if last is None else last + USAGE_ROLL_UP_EVERY,
        lambda store, now: _roll_up(store, now),
        wakes=False,
    ),
    Duty(
        "prune_events",
        lambda store, due, last: float("-inf") if last is None else last + _PRUNE_EVERY,
        lambda store, now: _prune(store, now),
    ),
)


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
    elif event.kind == "task_stuck":
        msg = (
            f"Stuck task {event.task_id} of {event.node_id}: no progress for"
            f" {d.get('silent_seconds', 0):.1f}s ({d.get('action')}, now {d.get('outcome')})"
        )
    elif event.kind == "manager_lost":
        msg = f"Bootstrap manager {event.node_id} lost; recovery task {event.task_id} created"
    else:
        msg = f"{event.kind} {event.node_id or ''} {event.task_id or ''}".strip()
    log.info(msg, extra={"action": event.kind, "node_id": event.node_id, "task_id": event.task_id})


class Monitor:
    def __init__(
        self,
        cluster: Client,
        *,
        max_sleep: float = MONITOR_MAX_SLEEP,
        name: str | None = None,
        duties: Sequence[Duty] = DUTIES,
        alerts: bool = False,
    ) -> None:
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
        self.duties = tuple(duties)
        self._last_run: dict[str, float] = {}  # duty name -> when this monitor ran it
        # (pid, stopped, since) of a process seen holding the store's write lock while
        # the duties failed; reported as an alert event once writes go through again
        self._stall: tuple[int, bool, float] | None = None
        # The deadlines as the last tick read them after its work: ``run`` hands them
        # to the tick it wakes for one of them (the duties' own queries decide what is
        # due, so a deadline moved since costs a query that finds nothing).
        self._due: Deadlines | None = None
        self.alerter: Alerter | None = None
        if alerts:
            from corral.alerter import Alerter

            self.alerter = Alerter(self.cluster)

    def tick(
        self, now: float | None = None, due: Deadlines | None = None, at: float | None = None
    ) -> TickResult:
        """Do every duty that is due at ``now``; return what happened and when the
        next duty falls due. ``due``: the deadlines to go by, when the caller knows
        them (else read now). ``at``: a deadline the caller woke just before: the
        election is checked first, then the tick waits for it (``run`` wakes
        ``EARLY`` seconds ahead, so the check's round trip and the wake-up's own
        latency are not between the deadline and its work)."""
        store = self.cluster.store
        leads = store.try_lead(self.name)
        if at is not None and now is None:
            until = time.monotonic() + EARLY  # never longer than the early wake-up
            while (left := at - self.cluster.clock.now()) > 0 and time.monotonic() < until:
                self._stop.wait(left)
        now = self.cluster.clock.now() if now is None else now
        if not leads:
            self._due = None
            return TickResult(next_deadline=now + self.max_sleep, leader=False)
        events: list[Event] = []
        assessed = None
        if due is None:
            due = store.deadlines()
        ran = False
        with store.acting_as(self.name):  # its events say which monitor acted
            for duty in self.duties:
                at = duty.due(store, due, self._last_run.get(duty.name))
                if at is None or at > now:
                    continue
                outcome = duty.run(store, now)
                self._last_run[duty.name] = now
                ran = ran or duty.wakes
                if isinstance(outcome, Assessment):
                    assessed = outcome
                elif outcome:
                    events += outcome
        for event in events:
            _log_event(event)
        if ran:
            due = store.deadlines()
        self._due = due
        upcoming = [
            t
            for duty in self.duties
            if duty.wakes and (t := duty.due(store, due, self._last_run.get(duty.name))) is not None
        ]
        return TickResult(
            events=events, assessment=assessed, next_deadline=min(upcoming, default=None)
        )

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
        known: Deadlines | None = None
        deadline: float | None = None
        while not self._stop.is_set():
            for_deadline = False  # the timer is set for a deadline the tick read
            try:
                result = self.tick(due=known, at=deadline if known is not None else None)
                if self.alerter is not None:
                    self.alert_pass(result)
                backoff.reset()
                if self._stall is not None:
                    self._report_stall()
                now = self.cluster.clock.now()
                # A leader renews its lead at least every LEAD_RENEW, whatever
                # max_sleep: a store may end a leader that stays silent longer.
                wait = min(self.max_sleep, LEAD_RENEW) if result.leader else self.max_sleep
                if result.next_deadline is not None and result.next_deadline - now < wait:
                    wait = max(0.0, result.next_deadline - now - EARLY)
                    deadline = result.next_deadline
                    for_deadline = True
            except StoreUnavailableError as exc:
                self._note_stall()
                log.warning("store unavailable: %s", exc, extra={"action": "monitor_retry"})
                wait = backoff.next()
            woken = self._wake.wait(wait)
            self._wake.clear()
            # Woken by its timer for a deadline the last tick read: go by what it read
            # (one round trip fewer between the deadline and its work). Woken by
            # ``wake()``, by the periodic re-check or after an error: read again.
            known = self._due if for_deadline and not woken else None
        if self.alerter is not None:
            self.alerter.close()
        log.info("monitor stopped", extra={"action": "monitor_stopped", "monitor": self.name})

    def alert_pass(self, tick: TickResult, now: float | None = None) -> list[Event]:
        """The alerter's pass after ``tick``: it alerts only when that tick led (one
        alerter sends per cluster), else it follows the events. Its failures are
        logged, never the monitor's end (a store outage goes to ``run``'s retry).
        Returns the alerts recorded."""
        if self.alerter is None:
            return []
        now = self.cluster.clock.now() if now is None else now
        try:
            with self.cluster.store.acting_as(self.name):
                return self.alerter.step(now, leading=tick.leader)
        except StoreUnavailableError:
            raise
        except Exception:
            log.exception("the alerter's pass failed", extra={"action": "alerter_failed"})
            return []

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
            {
                "reason": "store_lock_held",
                "pid": pid,
                "stopped": stopped,
                "seconds": round(now - since, 3),
                "monitor": self.name,
            },
            now,
        )
        self._stall = None

    def start_thread(self) -> threading.Thread:
        """Run the monitor in a daemon thread of this process."""
        thread = threading.Thread(target=self.run, name="corral-monitor", daemon=True)
        thread.start()
        return thread
