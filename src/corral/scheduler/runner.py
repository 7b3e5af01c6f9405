"""The runner SDK: a process that activates agents, one at a time.

    runner = corral.Runner("runner-1", "hybrid",
                           on_inbox=reply_to_mentions, on_discovery=explore)
    runner.run()

A ``Runner`` registers as a node of role ``runner`` and heartbeats
(``HeartbeatMonitor``), asks for an assignment in its mode, calls the handler for
the assignment's kind (``on_inbox``, ``on_discovery`` or ``on_scheduled``) and
releases the activation with the handler's outcome (a dict of counts such as
``posts``, ``comments``, ``inbox_read``, plus free-form fields; None is ``{}``). A
handler that raises still releases it, with the error in the outcome. The cluster
marks the node working while it holds an activation and idle once it holds none. With
nothing to do it asks again every ``poll_interval``; idle for the
cluster's ``idle_timeout_seconds`` it retires (terminates its node and returns 0),
unless ``retire=False`` (a pool that keeps its runners). SIGTERM/SIGINT: the current
activation finishes and is released, then the runner terminates its node.

It logs (``corral.runner``, INFO) one line per activation begun and released (with
its outcome and how long it took), its registration and how it ends; ``corral
runner`` prints them (:mod:`corral.daemonlog`).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from corral.daemonlog import event
from corral.errors import CorralError, InvalidInputError, LeaseError, NotFoundError
from corral.scheduler.policy import MODES
from corral.scheduler.records import Assignment
from corral.types import Client

__all__ = ["Handler", "Runner"]

log = logging.getLogger("corral.runner")

Handler = Callable[[Assignment], "dict[str, Any] | None"]


class Runner:
    """A runner node. ``url`` defaults like ``corral.connect``; pass ``cluster`` to
    reuse an open client."""

    def __init__(
        self,
        runner_id: str,
        mode: str = "hybrid",
        *,
        on_inbox: Handler | None = None,
        on_discovery: Handler | None = None,
        on_scheduled: Handler | None = None,
        url: str | None = None,
        cluster: Client | None = None,
        heartbeat_interval: float = 5.0,
        poll_interval: float = 1.0,
        idle_timeout_seconds: float | None = None,
        retire: bool = True,
        handle_signals: bool = True,
        sleep: Callable[[float], Any] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(MODES)}", field="mode")
        if poll_interval <= 0:
            raise InvalidInputError("poll_interval must be positive", field="poll_interval")
        self.runner_id = runner_id
        self.mode = mode
        self.handlers: dict[str, Handler | None] = {
            "inbox": on_inbox,
            "discovery": on_discovery,
            "scheduled": on_scheduled,
        }
        self._own_client = cluster is None
        if cluster is None:
            from corral.client import connect

            cluster = connect(url)
        self.cluster: Client = cluster
        self.heartbeat_interval = heartbeat_interval
        self.poll_interval = poll_interval
        self.idle_timeout_seconds = idle_timeout_seconds
        self.retire = retire
        self.handle_signals = handle_signals
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._mono = monotonic
        self.activations = 0
        self.exit_reason: str | None = None
        self._heart: Any = None

    # --- one activation ------------------------------------------------------------
    def step(self) -> Assignment | None:
        """Ask for one assignment, handle it and release it; None when nothing is due.
        ``LeaseError`` from the release means the activation was lost meanwhile (its
        TTL passed): it is logged, not raised."""
        a = self.cluster.get_assignment(self.runner_id, self.mode)
        if a is None:
            return None
        handler = self.handlers.get(a.kind)
        outcome: dict[str, Any] = {}
        began = self._mono()
        items = f", {len(a.inbox)} item(s)" if a.kind == "inbox" else ""
        log.info(
            "activation %s: %s (%s%s)",
            a.id,
            a.agent_id,
            a.kind,
            items,
            extra=event("activation_started", assignment=a.id, agent=a.agent_id, kind=a.kind),
        )
        try:
            got = handler(a) if handler is not None else None
            outcome = dict(got) if got else {}
        except Exception as exc:  # the activation ends either way
            log.exception("runner %s: the %s handler failed", self.runner_id, a.kind)
            outcome = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        took = self._mono() - began
        try:
            self.cluster.release_assignment(a.id, self.runner_id, a.epoch, outcome)
        except LeaseError as exc:
            log.warning("runner %s lost assignment %s: %s", self.runner_id, a.id, exc)
        else:
            failed = "error" in outcome or outcome.get("exit_code") not in (None, 0)
            log.log(
                logging.WARNING if failed else logging.INFO,
                "activation %s released in %.2f s: %s",
                a.id,
                took,
                json.dumps(outcome, default=str, ensure_ascii=False)[:500],
                extra=event(
                    "activation_released",
                    assignment=a.id,
                    agent=a.agent_id,
                    seconds=round(took, 3),
                    outcome=outcome,
                ),
            )
        self.activations += 1
        return a

    # --- the loop ----------------------------------------------------------------------
    def register(self) -> None:
        from corral.worker.heartbeat import HeartbeatMonitor

        self.cluster.register_node(
            self.runner_id, "runner", heartbeat_interval=self.heartbeat_interval
        )
        who = event("runner_registered", runner=self.runner_id, mode=self.mode)
        log.info("runner %s registered (mode %s)", self.runner_id, self.mode, extra=who)
        self._heart = HeartbeatMonitor(
            self.runner_id, self.cluster, heartbeat_interval=self.heartbeat_interval
        )
        self._heart.start()

    def stop(self) -> None:
        """Finish the current activation, then leave (from any thread)."""
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.stop()

    def run(self, *, max_activations: int | None = None) -> int:
        """Activate agents until retired, stopped, ``max_activations`` done, or the
        cluster terminated this node. Returns 0, or 1 when the node was lost."""
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.register()
        idle_since: float | None = None
        try:
            while not self._stop.is_set():
                if max_activations is not None and self.activations >= max_activations:
                    self.exit_reason = "max_activations"
                    break
                # The cluster marks the node working while it holds an activation
                # and idle once it holds none.
                if self.step() is not None:
                    idle_since = None
                    continue
                now = self._mono()
                if idle_since is None:
                    idle_since = now
                limit = self.idle_timeout_seconds
                if limit is None:
                    limit = self.cluster.settings().idle_timeout_seconds
                if self.retire and now - idle_since >= limit:
                    self.exit_reason = "retired"
                    break
                self._sleep(self.poll_interval)
            else:
                self.exit_reason = self.exit_reason or "stopped"
        except NotFoundError as exc:
            self.exit_reason = "lost"
            log.warning("runner %s was terminated by the cluster: %s", self.runner_id, exc)
            self.close(terminate=False)
            return 1
        log.info(
            "runner %s: %s after %d activation(s)",
            self.runner_id,
            self.exit_reason,
            self.activations,
            extra=event("runner_done", reason=self.exit_reason, activations=self.activations),
        )
        self.close()
        return 0

    def close(self, *, terminate: bool = True) -> None:
        if self._heart is not None:
            self._heart.stop(final={"status": "shutting-down"} if terminate else None)
            self._heart = None
        if terminate:
            try:
                self.cluster.terminate_node(self.runner_id)
            except CorralError as exc:
                log.info("runner %s: terminate: %s", self.runner_id, exc)
        if self._own_client:
            self.cluster.close()
