"""The alerter: one per cluster, run by the monitor that leads.

``Alerter.step(now, leading=...)`` is one pass: read the events after its cursor,
keep what it needs from them (pending spawn requests, the subjects other alerters
already alerted), and, when ``leading``, decide which conditions hold
(``corral.alerts``), record each alert as an ``alert`` event (``condition`` and
``subject`` in its data) and hand it to the ``AlertSender``, which POSTs it as JSON to
every ``alert_webhooks`` URL with the heartbeat destinations' retries
(``corral.worker.destinations.Delivery`` over a ``WebhookDestination``), in a thread
of its own so a slow webhook never delays the monitor.

What is read: the event feed on every pass (one indexed read after the cursor); a
host's processes when one of its ``process_state`` events arrives; and, while
leading, every ``ALERT_STATE_INTERVAL`` seconds, every process (crash loops and
``restart-exhausted``, whatever the events said) and the idle workflow runs (their
waiters' deadlines). A subject is alerted at most once per
``alert_rate_limit_seconds``; since every alert is an event, a standby that takes the
lead over knows which subjects were alerted recently.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from corral import alerts
from corral.alerts import Alert, AlertConfig, RateLimit
from corral.defaults import ALERT_STATE_INTERVAL
from corral.errors import StoreUnavailableError
from corral.model import Event, Process
from corral.worker.destinations import Delivery, RetryPolicy, WebhookDestination

if TYPE_CHECKING:
    from corral.cluster import Cluster

__all__ = ["AlertSender", "Alerter"]

log = logging.getLogger("corral.alerts")

_BATCH = 1000
_MAX_BATCHES = 20  # events read per pass at most (the rest on the next pass)
_SPAWN_ENDED = ("accepted", "declined", "withdrawn", "fulfilled")


class AlertSender:
    """POSTs alert payloads to webhooks, one after the other, in its own thread; each
    webhook a ``Delivery`` with the settings' retries."""

    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.deliveries: tuple[Delivery, ...] = ()
        self._key: tuple[Any, ...] | None = None
        self._queue: queue.Queue[tuple[tuple[Delivery, ...], Mapping[str, Any]] | None] = (
            queue.Queue()
        )
        self._thread: threading.Thread | None = None

    def configure(self, config: AlertConfig) -> None:
        """Use ``config``'s webhooks and retries (from the next alert on)."""
        key = (config.webhooks, config.retry_attempts, config.retry_delay)
        if key == self._key:
            return
        self._key = key
        policy = RetryPolicy(
            retry_attempts=config.retry_attempts,
            retry_delay=config.retry_delay,
            alert_after=1,  # log the first send that fails all its tries
        )
        self.deliveries = tuple(
            Delivery(
                WebhookDestination(
                    url,
                    headers={"User-Agent": "corral-alerter"},
                    timeout=self.timeout,
                    name=f"alert webhook {url}",
                ),
                policy=policy,
            )
            for url in config.webhooks
        )

    def submit(self, payload: Mapping[str, Any]) -> None:
        """Queue ``payload`` for every webhook configured now."""
        if not self.deliveries:
            return
        self._queue.put((self.deliveries, payload))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="corral-alerts", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            deliveries, payload = item
            for delivery in deliveries:
                delivery.deliver(payload)  # logs its failures; never raises for them
            self._queue.task_done()
        self._queue.task_done()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every alert queued has been sent (or given up); False on timeout."""
        done = self._queue.all_tasks_done
        with done:
            return done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout)

    def close(self, timeout: float = 1.0) -> None:
        """Stop after the alert in flight (the queued ones are dropped)."""
        if self._thread is None:
            return
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                break
        self._queue.put(None)
        self._thread.join(timeout)


class Alerter:
    """Follows the cluster's events and state; alerts when it leads."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        sender: AlertSender | None = None,
        state_interval: float = ALERT_STATE_INTERVAL,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.sender = sender or AlertSender()
        self.state_interval = state_interval
        self.limit = RateLimit()
        self.config = AlertConfig()
        self.cursor: int | None = None  # None: not started (the store could not be read)
        self.spawns: dict[int, float] = {}  # pending spawn request -> when asked
        try:
            self._start()
        except StoreUnavailableError as exc:
            log.warning("the alerter starts once the store answers: %s", exc)
        self._spawns_told: set[int] = set()
        self.restarts: dict[str, list[tuple[float, int]]] = {}  # subject -> (at, restarts)
        self._looping: set[str] = set()  # subjects in a crash loop, alerted
        self._exhausted: set[str] = set()  # subjects restart-exhausted, alerted
        self._runs_told: dict[str, float] = {}  # run -> the deadline it was alerted for
        self._state_at: float | None = None

    def _start(self) -> None:
        """Read the settings, the pending spawn requests and where the events end:
        alerts start with the events that follow."""
        self.config = AlertConfig.from_settings(self.cluster.settings())
        self.sender.configure(self.config)
        pending = self.cluster.spawn_requests("pending", None, 10_000)
        self.spawns = {r.id: r.created_at for r in pending}
        self.cursor = self.store.stats().last_event

    # --- one pass --------------------------------------------------------------------
    def step(self, now: float, *, leading: bool) -> list[Event]:
        """Read the new events; when ``leading``, alert on what holds at ``now``.
        Returns the alert events recorded."""
        if self.cursor is None:
            self._start()
            return []
        events, cursor = self._read(self.cursor)
        hosts: set[str] = set()
        found: list[Alert] = []
        for e in events:
            self._follow(e, hosts)
            if leading:
                found += alerts.from_event(e)
        if not leading:
            self.cursor = cursor
            return []
        due = self._state_at is None or now - self._state_at >= self.state_interval
        if due:
            self._state_at = now
            found += self._processes(self.cluster.list_processes(), now, every=True)
            found += self._workflows(now)
        else:
            for host in sorted(hosts):
                found += self._processes(self.cluster.list_processes(host), now, every=False)
        found += self._spawn_alerts(now)
        fired = [ev for alert in found if (ev := self._fire(alert, now)) is not None]
        # Past these events only now: a pass that failed half way reads them again
        # (the alerts it recorded hold their subjects back: nothing is sent twice).
        self.cursor = cursor
        self.limit.forget_before(now - self.config.rate_limit_seconds)
        return fired

    def _read(self, cursor: int) -> tuple[list[Event], int]:
        """The events after ``cursor`` (at most ``_MAX_BATCHES`` batches), and the
        cursor after them."""
        out: list[Event] = []
        for _ in range(_MAX_BATCHES):
            batch = self.store.events(cursor, _BATCH)
            if not batch:
                break
            cursor = batch[-1].seq
            out += batch
            if len(batch) < _BATCH:
                break
        return out, cursor

    def _follow(self, e: Event, hosts: set[str]) -> None:
        """What one event changes in what the alerter keeps."""
        d = e.data
        if (
            e.kind == "alert"
            and d.get("condition") in alerts.CONDITIONS
            and isinstance(d.get("subject"), str)
        ):
            self.limit.note(d["subject"], e.ts)  # alerted, by this alerter or another
        elif e.kind == "spawn_requested" and isinstance(d.get("id"), int):
            self.spawns[d["id"]] = e.ts
        elif e.kind.startswith("spawn_request_") and d.get("status") in _SPAWN_ENDED:
            self.spawns.pop(d.get("id"), None)  # type: ignore[arg-type]
            self._spawns_told.discard(d.get("id"))
        elif e.kind == "settings_changed":
            self.config = AlertConfig.from_settings(self.cluster.settings())
            self.sender.configure(self.config)
        elif e.kind in ("process_state", "process_removed") and isinstance(d.get("host"), str):
            hosts.add(d["host"])

    # --- the conditions read from state ------------------------------------------------
    def _processes(self, processes: Iterable[Process], now: float, *, every: bool) -> list[Alert]:
        c = self.config
        found: list[Alert] = []
        seen: set[str] = set()
        for p in processes:
            subject = f"process:{p.host}/{p.agent}"
            seen.add(subject)
            samples = self.restarts.setdefault(subject, [])
            if not samples or samples[-1][1] != p.restarts:  # a change is all that counts
                samples.append((now, p.restarts))
            # keep the window's samples and the last one before it
            old = [i for i, (at, _) in enumerate(samples) if at <= now - c.crash_loop_window]
            if len(old) > 1:
                del samples[: old[-1]]
            where = f"agent {p.agent} on {p.host}"
            facts = {"host": p.host, "agent": p.agent, "state": p.state, "restarts": p.restarts}
            if alerts.crash_loop(samples, now, c.crash_loop_window, c.crash_loop_restarts):
                if subject not in self._looping:
                    self._looping.add(subject)
                    n = alerts.restarts_within(samples, now, c.crash_loop_window)
                    found.append(
                        Alert(
                            "crash_loop",
                            subject,
                            f"{where} restarted {n} times in {c.crash_loop_window:g}s",
                            None,
                            {**facts, "window": c.crash_loop_window, "restarts_in_window": n},
                        )
                    )
            else:
                self._looping.discard(subject)
            if "restart-exhausted" in p.flags:
                if subject not in self._exhausted:
                    self._exhausted.add(subject)
                    why = alerts.one_line((p.last_exit or {}).get("describe") or "unknown")
                    found.append(
                        Alert(
                            "restart_exhausted",
                            subject,
                            f"{where} used up its restarts (last exit: {why})",
                            None,
                            facts,
                        )
                    )
            else:
                self._exhausted.discard(subject)
        if every:  # agents no host reports any more
            for subject in set(self.restarts) - seen:
                del self.restarts[subject]
                self._looping.discard(subject)
                self._exhausted.discard(subject)
        return found

    def _workflows(self, now: float) -> list[Alert]:
        found: list[Alert] = []
        told: dict[str, float] = {}
        for h in self.cluster.list_handlers(idle=True, limit=10_000):
            deadline = alerts.past_deadline(h.active_waiters, now)
            if deadline is None:
                continue
            told[h.handler_id] = deadline
            if self._runs_told.get(h.handler_id) == deadline:
                continue
            found.append(
                Alert(
                    "workflow_past_deadline",
                    f"workflow_run:{h.handler_id}",
                    f"workflow run {h.handler_id} ({h.workflow}) is idle past its deadline"
                    f" ({now - deadline:.0f}s ago)",
                    None,
                    {
                        "handler_id": h.handler_id,
                        "workflow": h.workflow,
                        "deadline": deadline,
                        "idle_since": h.idle_since,
                        "waiting_for": [w.get("event_type") for w in h.active_waiters],
                    },
                )
            )
        self._runs_told = told
        return found

    def _spawn_alerts(self, now: float) -> list[Alert]:
        after = self.config.spawn_pending_seconds
        found = []
        for rid in alerts.spawn_overdue(self.spawns, now, after):
            if rid in self._spawns_told:
                continue
            self._spawns_told.add(rid)
            found.append(
                Alert(
                    "spawn_request_pending",
                    f"spawn_request:{rid}",
                    f"spawn request {rid} has waited {now - self.spawns[rid]:.0f}s for an answer",
                    None,
                    {"request_id": rid, "requested_at": self.spawns[rid], "after": after},
                )
            )
        return found

    # --- firing ---------------------------------------------------------------------
    def _fire(self, alert: Alert, now: float) -> Event | None:
        held = self.limit.take(alert.subject, now, self.config.rate_limit_seconds)
        if held is None:
            log.info(
                "alert held back (rate limit): %s",
                alert.message,
                extra={"action": "alert_held", "subject": alert.subject},
            )
            return None
        data = {
            "condition": alert.condition,
            "subject": alert.subject,
            **alert.data,
            "held_back": held,
        }
        event = self.store.record_alert(alert.node_id, alert.message, data, now)
        log.warning(
            "alert: %s",
            alert.message,
            extra={"action": "alert", "condition": alert.condition, "subject": alert.subject},
        )
        self.sender.submit(
            {
                "kind": "alert",
                "seq": event.seq,
                "ts": event.ts,
                "condition": alert.condition,
                "subject": alert.subject,
                "message": alert.message,
                "text": f"corral alert: {alert.message}",  # what chat webhooks show
                "node_id": alert.node_id,
                "data": dict(alert.data),
                "held_back": held,
            }
        )
        return event

    def close(self) -> None:
        self.sender.close()
