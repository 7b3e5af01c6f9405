"""Where heartbeats go: the cluster, a webhook, GitHub issue comments, a metrics store.

A destination is anything with a ``name`` and ``send(payload)`` that raises on
failure. ``Delivery`` wraps one destination with its failure handling:
``retry_attempts`` tries ``retry_delay`` seconds apart, consecutive failed sends
counted, and after ``alert_after`` in a row one alert (a log line and an ``alert``
event in the cluster). A delivery may run in its own thread with a one-slot mailbox,
so a slow or failing destination never delays the worker or the other destinations.

The destinations: ``ClusterDestination`` (the default: the heartbeat the cluster's
liveness rests on), ``WebhookDestination`` (HTTP POST of the JSON),
``GitHubDestination`` (issue comments rendered by ``heartbeat_comment``, REST API) and
``MetricsDestination`` (a time series in the store with a retention limit).
Only the standard library is used: a worker stays light.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from corral.errors import CorralError, InvalidInputError
from corral.types import Client

__all__ = [
    "ClusterDestination",
    "Delivery",
    "Destination",
    "DestinationError",
    "GitHubDestination",
    "MetricsDestination",
    "RetryPolicy",
    "WebhookDestination",
    "format_uptime",
    "heartbeat_comment",
    "metrics_sample",
]

log = logging.getLogger("corral.heartbeat")

_STATUS_MARK = {"healthy": "✅", "degraded": "⚠️", "unhealthy": "❌"}


class DestinationError(CorralError):
    """A destination refused or could not take a heartbeat."""

    code = "destination_error"
    status = 502
    exit_code = 3
    hint = "The heartbeat is retried; check that the destination is reachable."


class Destination(Protocol):
    name: str

    def send(self, payload: Mapping[str, Any]) -> None:
        """Deliver one heartbeat; raise on failure."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """By default 3 attempts, 5 s apart (the ``retry_attempts`` and ``retry_delay``
    settings' defaults); an alert after 3 failed sends in a row."""

    retry_attempts: int = 3
    retry_delay: float = 5.0
    alert_after: int = 3


# --- pure renderings --------------------------------------------------------------------
def format_uptime(seconds: float) -> str:
    """``2h 0m`` past an hour, ``15m 32s`` past a minute, else ``42s``."""
    s = int(max(0.0, seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def _iso_ms(timestamp_ms: float) -> str:
    dt = datetime.fromtimestamp(timestamp_ms / 1000.0, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(timestamp_ms) % 1000:03d}Z"


def heartbeat_comment(payload: Mapping[str, Any]) -> str:
    """One heartbeat as a GitHub issue comment in Markdown: a "Worker Heartbeat" header,
    worker, status, time, tasks and capacity, then the metrics as a list."""
    m = payload.get("metrics") or {}
    health = str(payload.get("health_status", "healthy"))
    return "\n".join(
        [
            "💓 **Worker Heartbeat**",
            "",
            f"Worker: `{payload['worker_id']}`",
            f"Status: {_STATUS_MARK.get(health, '❔')} {health}",
            f"Timestamp: {_iso_ms(float(payload['timestamp']))}",
            f"Active Tasks: {len(payload.get('current_tasks') or [])}",
            f"Available Capacity: {payload.get('capacity_available', 0)}",
            "",
            "**Metrics:**",
            f"- CPU: {float(m.get('cpu_usage', 0.0)):.1f}%",
            f"- Memory: {float(m.get('memory_usage', 0.0)):.1f} MB",
            f"- Uptime: {format_uptime(float(m.get('uptime', 0)))}",
            f"- Completed: {int(m.get('tasks_completed', 0))}",
        ]
    )


def metrics_sample(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The document's "Metrics Collection" record for one heartbeat."""
    return {
        "timestamp": payload["timestamp"],
        "health_status": payload["health_status"],
        "task_count": len(payload.get("current_tasks") or []),
        "capacity_available": payload["capacity_available"],
        "metrics": dict(payload["metrics"]),
    }


# --- destinations -----------------------------------------------------------------------
class ClusterDestination:
    """``cluster.heartbeat(worker_id, **payload)``: stores the whole ``HeartbeatData``
    as the node's heartbeat and renews its leases. Extra fields (e.g.
    ``status="shutting-down"``) ride along. The answer names the tasks of
    ``current_tasks`` the operator cancelled; ``on_cancelled`` is called with them."""

    name = "cluster"

    def __init__(
        self, cluster: Client, *, on_cancelled: Callable[[list[int]], None] | None = None
    ) -> None:
        self.cluster = cluster
        self.on_cancelled = on_cancelled

    def send(self, payload: Mapping[str, Any]) -> None:
        node = self.cluster.heartbeat(payload["worker_id"], **payload)
        # An answer without the field (an older server's, a test double's) names none.
        cancelled = getattr(node, "cancelled_tasks", None)
        if cancelled and self.on_cancelled is not None:
            self.on_cancelled(list(cancelled))


def _post_json(
    url: str, body: Any, headers: Mapping[str, str], timeout: float
) -> tuple[int, bytes]:
    import urllib.error  # imported on first use: most workers never post
    import urllib.request

    data = json.dumps(body, separators=(",", ":")).encode()
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("User-Agent", "corral-worker")
    for key, value in headers.items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode("utf-8", "replace")
        raise DestinationError(f"HTTP {exc.code} from {url}: {detail}".strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        raise DestinationError(f"cannot reach {url}: {exc}") from None


class WebhookDestination:
    """POST the heartbeat JSON to ``url``; any 2xx is success."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        name: str = "webhook",
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"webhook url must be http(s)://…, got {url!r}", field="url")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.name = name

    def send(self, payload: Mapping[str, Any]) -> None:
        _post_json(self.url, dict(payload), self.headers, self.timeout)


class GitHubDestination:
    """A heartbeat comment on a GitHub issue (``POST /repos/{repo}/issues/{n}/comments``).

    ``issue`` is a number, or a function of the payload giving the number (or None to
    skip this beat, e.g. when the worker holds no task). ``base_url`` defaults to
    ``$GITHUB_API_URL`` or ``https://api.github.com`` (GitHub Enterprise:
    ``https://HOST/api/v3``); the token is read from ``$<token_env>`` at each send.
    """

    def __init__(
        self,
        repo: str,
        issue: int | Callable[[Mapping[str, Any]], int | None],
        *,
        base_url: str | None = None,
        token_env: str = "GITHUB_TOKEN",
        timeout: float = 10.0,
        name: str = "github",
    ) -> None:
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise InvalidInputError(f"repo must be OWNER/NAME, got {repo!r}", field="repo")
        self.repo = repo
        self.issue = issue
        self.base_url = (
            base_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
        ).rstrip("/")
        self.token_env = token_env
        self.timeout = timeout
        self.name = name

    def send(self, payload: Mapping[str, Any]) -> None:
        number = self.issue(payload) if callable(self.issue) else self.issue
        if number is None:
            return
        token = os.environ.get(self.token_env)
        if not token:
            raise DestinationError(f"no GitHub token: set ${self.token_env}")
        url = f"{self.base_url}/repos/{self.repo}/issues/{int(number)}/comments"
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        _post_json(url, {"body": heartbeat_comment(payload)}, headers, self.timeout)


class MetricsDestination:
    """The heartbeat's metrics as a time series in the store (``heartbeat_sample``
    events), keeping the newest ``keep`` points per worker. Pruning runs every
    ``prune_every`` points (default ``keep // 10``) to keep each write cheap."""

    name = "metrics"

    def __init__(
        self, cluster: Client, *, keep: int = 1000, prune_every: int | None = None
    ) -> None:
        if keep < 1:
            raise InvalidInputError("keep must be at least 1", field="keep")
        self.cluster = cluster
        self.keep = keep
        self.prune_every = prune_every or max(1, keep // 10)
        self._count = 0

    def send(self, payload: Mapping[str, Any]) -> None:
        self._count += 1
        keep = self.keep if self._count % self.prune_every == 0 else None
        self.cluster.record_metrics(payload["worker_id"], metrics_sample(payload), keep=keep)


# --- delivery: retries, failure counting, alerts ------------------------------------------
AlertHook = Callable[[str, int, str], None]


class Delivery:
    """One destination with its retries and failure count.

    ``deliver(payload)`` sends now (in the caller's thread); ``submit(payload)`` hands
    the payload to the delivery's own thread when ``threaded`` (a newer payload
    replaces one not yet sent). ``sleep`` is injectable for tests.
    """

    def __init__(
        self,
        destination: Destination,
        *,
        policy: RetryPolicy | None = None,
        on_alert: AlertHook | None = None,
        threaded: bool = False,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        self.destination = destination
        self.policy = policy or RetryPolicy()
        self.on_alert = on_alert
        self.threaded = threaded
        self._sleep = sleep or time.sleep
        self.consecutive_failures = 0
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self.alerts = 0
        self.last_error: str | None = None
        self._cond = threading.Condition()
        self._pending: Mapping[str, Any] | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.destination.name

    def deliver(self, payload: Mapping[str, Any]) -> bool:
        """Send with retries; True on success. Never raises for a send failure."""
        attempts = max(1, self.policy.retry_attempts)
        error = ""
        for attempt in range(1, attempts + 1):
            try:
                self.destination.send(payload)
            except Exception as exc:  # a destination's failure is data, not a crash
                error = f"{type(exc).__name__}: {exc}"
                log.debug(
                    "heartbeat to %s failed (attempt %d/%d): %s",
                    self.name,
                    attempt,
                    attempts,
                    error,
                )
                if attempt < attempts:
                    self._sleep(self.policy.retry_delay)
                continue
            self._succeeded()
            return True
        self._failed(error)
        return False

    def _succeeded(self) -> None:
        if self.consecutive_failures >= self.policy.alert_after:
            log.info(
                "heartbeat destination %s recovered after %d failures",
                self.name,
                self.consecutive_failures,
                extra={"action": "heartbeat_destination_recovered"},
            )
        self.consecutive_failures = 0
        self.sent += 1

    def _failed(self, error: str) -> None:
        self.failed += 1
        self.consecutive_failures += 1
        self.last_error = error
        if self.consecutive_failures == self.policy.alert_after:
            self.alerts += 1
            log.warning(
                "heartbeat destination %s failed %d times in a row: %s",
                self.name,
                self.consecutive_failures,
                error,
                extra={"action": "heartbeat_alert", "destination": self.name},
            )
            if self.on_alert is not None:
                try:
                    self.on_alert(self.name, self.consecutive_failures, error)
                except Exception as exc:
                    log.warning("could not record the alert for %s: %s", self.name, exc)

    # --- threaded mode --------------------------------------------------------------
    def submit(self, payload: Mapping[str, Any]) -> None:
        if not self.threaded:
            self.deliver(payload)
            return
        with self._cond:
            if self._closed:
                return
            if self._pending is not None:
                self.dropped += 1
            self._pending = payload
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"corral-heartbeat-{self.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                payload, self._pending = self._pending, None
                self._busy = True
            try:
                self.deliver(payload)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._pending is None and not self._busy, timeout=timeout
            )

    def close(self, timeout: float | None = 1.0) -> None:
        """Stop the thread after the payload in flight (the queued one is dropped)."""
        with self._cond:
            self._closed = True
            self._pending = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
