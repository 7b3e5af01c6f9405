"""Heartbeat destinations: the document's renderings, retries, failure counting and
alerts, isolation of a slow destination, and the webhook, GitHub and metrics
destinations against real local HTTP servers and a real store."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.worker.destinations import (
    ClusterDestination,
    Delivery,
    DestinationError,
    GitHubDestination,
    MetricsDestination,
    RetryPolicy,
    WebhookDestination,
    format_uptime,
    heartbeat_comment,
    metrics_sample,
)
from corral.worker.heartbeat import HeartbeatMonitor
from tests.support.worker_app import wait_for

EXAMPLE = {
    "worker_id": "worker-local-1",
    "timestamp": 1704067200000,
    "health_status": "healthy",
    "current_tasks": ["task-123", "task-456"],
    "capacity_available": 3,
    "metrics": {
        "cpu_usage": 45.2,
        "memory_usage": 2048,
        "tasks_completed": 42,
        "tasks_failed": 2,
        "uptime": 7200,
    },
}

DOC_COMMENT = """💓 **Worker Heartbeat**

Worker: `worker-local-1`
Status: ✅ healthy
Timestamp: 2024-01-01T00:00:00.000Z
Active Tasks: 2
Available Capacity: 3

**Metrics:**
- CPU: 45.2%
- Memory: 2048.0 MB
- Uptime: 2h 0m
- Completed: 42"""


def test_github_comment_is_the_documents_markdown() -> None:
    assert heartbeat_comment(EXAMPLE) == DOC_COMMENT


def test_metrics_sample_is_the_documents_record() -> None:
    assert metrics_sample(EXAMPLE) == {
        "timestamp": 1704067200000,
        "health_status": "healthy",
        "task_count": 2,
        "capacity_available": 3,
        "metrics": EXAMPLE["metrics"],
    }


@pytest.mark.parametrize(
    ("s", "text"), [(0, "0s"), (42, "42s"), (932, "15m 32s"), (7200, "2h 0m"), (7325.9, "2h 2m")]
)
def test_format_uptime(s: float, text: str) -> None:
    assert format_uptime(s) == text


class Flaky:
    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def send(self, payload: Any) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise DestinationError(f"failure {self.calls}")


def test_three_attempts_five_seconds_apart_by_default() -> None:
    sleeps: list[float] = []
    d = Delivery(Flaky(2), sleep=sleeps.append)
    assert d.deliver(EXAMPLE) is True
    assert sleeps == [5.0, 5.0] and d.consecutive_failures == 0 and d.sent == 1


def test_retry_numbers_are_configurable() -> None:
    sleeps: list[float] = []
    flaky = Flaky(10)
    d = Delivery(flaky, policy=RetryPolicy(retry_attempts=5, retry_delay=0.5), sleep=sleeps.append)
    assert d.deliver(EXAMPLE) is False
    assert sleeps == [0.5] * 4 and flaky.calls == 5 and d.consecutive_failures == 1


def test_alert_once_after_three_failed_sends_in_a_row_then_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alerts: list[tuple[str, int, str]] = []
    flaky = Flaky(12)
    d = Delivery(flaky, on_alert=lambda *a: alerts.append(a), sleep=lambda s: None)
    caplog.set_level(logging.INFO, logger="corral.heartbeat")
    assert [d.deliver(EXAMPLE) for _ in range(2)] == [False, False]
    assert alerts == []
    d.deliver(EXAMPLE)
    assert alerts == [("flaky", 3, "DestinationError: failure 9")]
    assert "heartbeat destination flaky failed 3 times in a row" in caplog.text
    d.deliver(EXAMPLE)
    assert len(alerts) == 1 and d.consecutive_failures == 4
    assert d.deliver(EXAMPLE) is True and d.consecutive_failures == 0
    assert "recovered after 4 failures" in caplog.text


def test_alert_is_an_event_in_the_cluster(sqlite_cluster: Cluster) -> None:
    sqlite_cluster.register_node("W1", "developer")
    hb = HeartbeatMonitor(
        "W1",
        sqlite_cluster,
        retry=RetryPolicy(retry_attempts=1),
        destinations=[ClusterDestination(sqlite_cluster), Flaky(99)],
    )
    for _ in range(3):
        hb.beat()
        hb.deliveries[1].flush(5)
    alerts = [e for e in sqlite_cluster.events(0) if e.kind == "alert"]
    assert len(alerts) == 1
    assert alerts[0].node_id == "W1"
    assert alerts[0].data["destination"] == "flaky"
    assert alerts[0].data["consecutive_failures"] == 3
    assert sqlite_cluster.get_node("W1").last_heartbeat is not None  # the cluster got them


class Stuck:
    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()

    def send(self, payload: Any) -> None:
        self.release.wait(10)
        raise DestinationError("timed out")


def test_a_stuck_destination_holds_up_neither_the_beat_nor_the_cluster(
    sqlite_cluster: Cluster, clock: FakeClock
) -> None:
    sqlite_cluster.register_node("W1", "developer")
    stuck = Stuck()
    hb = HeartbeatMonitor(
        "W1",
        sqlite_cluster,
        clock=clock,
        sleep=lambda s: None,
        destinations=[ClusterDestination(sqlite_cluster), stuck],
    )
    for i in range(5):
        clock.advance(1)
        hb.beat()
        assert sqlite_cluster.get_node("W1").last_heartbeat == clock.now(), i
    stuck.release.set()
    assert hb.deliveries[1].flush(5)
    assert hb.deliveries[1].dropped >= 3  # newer beats replaced ones never sent
    hb.stop()


# --- HTTP destinations against local servers --------------------------------------------
class Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]
    status: int = 201

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen = {"method": self.command, "path": self.path, "headers": dict(self.headers)}
        type(self).requests.append({**seen, "body": json.loads(body)})
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": 1}')

    def do_GET(self) -> None:
        type(self).requests.append({"method": "GET", "path": self.path})
        self.send_response(405)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Recorder]]]:
    handler = type("Rec", (Recorder,), {"requests": [], "status": 201})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def test_github_destination_posts_the_comment_with_the_token(
    server: tuple[str, type[Recorder]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, rec = server
    monkeypatch.setenv("CORRAL_TEST_GH_TOKEN", "s3cret")
    gh = GitHubDestination(
        "org/repo", 123, base_url=f"{base}/api/v3", token_env="CORRAL_TEST_GH_TOKEN"
    )
    gh.send(EXAMPLE)
    [req] = rec.requests
    assert req["method"] == "POST"
    assert req["path"] == "/api/v3/repos/org/repo/issues/123/comments"
    assert req["headers"]["Authorization"] == "Bearer s3cret"
    assert req["headers"]["Accept"] == "application/vnd.github+json"
    assert req["body"] == {"body": DOC_COMMENT}


def test_github_destination_through_the_monitor_per_task_issue(
    server: tuple[str, type[Recorder]], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    base, rec = server
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    monkeypatch.setenv("GITHUB_API_URL", base)
    gh = GitHubDestination(
        "org/repo", lambda p: int(p["current_tasks"][0]) if p["current_tasks"] else None
    )
    hb = HeartbeatMonitor("W1", destinations=[gh], clock=clock)
    hb.beat()  # no task: no comment
    hb.add_task(7)
    hb.beat()
    assert hb.deliveries[0].flush(5)
    [req] = rec.requests
    assert req["path"] == "/repos/org/repo/issues/7/comments"
    assert req["headers"]["Authorization"] == "Bearer tok"
    assert req["body"]["body"].startswith("💓 **Worker Heartbeat**\n\nWorker: `W1`")
    assert "Active Tasks: 1\n" in req["body"]["body"]
    hb.stop()


def test_github_destination_without_a_token_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with pytest.raises(DestinationError, match="GITHUB_TOKEN"):
        GitHubDestination("org/repo", 1, base_url="http://127.0.0.1:9").send(EXAMPLE)


def test_webhook_posts_the_json_and_a_500_is_a_failure(server: tuple[str, type[Recorder]]) -> None:
    base, rec = server
    WebhookDestination(f"{base}/hook", headers={"X-Key": "k"}).send(EXAMPLE)
    assert rec.requests[0]["body"] == EXAMPLE and rec.requests[0]["headers"]["X-Key"] == "k"
    rec.status = 500
    with pytest.raises(DestinationError, match="HTTP 500"):
        WebhookDestination(f"{base}/hook").send(EXAMPLE)


def test_unreachable_webhook_is_a_failure_not_a_crash() -> None:
    d = Delivery(WebhookDestination("http://127.0.0.1:9/x", timeout=1), sleep=lambda s: None)
    assert d.deliver(EXAMPLE) is False and "cannot reach" in (d.last_error or "")


def test_metrics_series_keeps_the_newest_points(sqlite_cluster: Cluster) -> None:
    sqlite_cluster.register_node("worker-local-1", "developer")
    dest = MetricsDestination(sqlite_cluster, keep=5, prune_every=1)
    for i in range(12):
        dest.send({**EXAMPLE, "timestamp": i})
    series = sqlite_cluster.metrics_series("worker-local-1", limit=100)
    assert [e.data["timestamp"] for e in series] == [7, 8, 9, 10, 11]
    assert series[-1].data == {**metrics_sample(EXAMPLE), "timestamp": 11}


def test_metrics_pruning_is_amortized_but_bounded(sqlite_cluster: Cluster) -> None:
    dest = MetricsDestination(sqlite_cluster, keep=20)  # prunes every 2nd point
    assert dest.prune_every == 2
    for i in range(55):
        dest.send({**EXAMPLE, "timestamp": i})
    n = len(sqlite_cluster.metrics_series("worker-local-1", limit=1000))
    assert 20 <= n < 20 + dest.prune_every


def test_threaded_delivery_sends_from_its_own_thread(server: tuple[str, type[Recorder]]) -> None:
    base, rec = server
    d = Delivery(WebhookDestination(f"{base}/h"), threaded=True)
    d.submit(EXAMPLE)
    wait_for(lambda: rec.requests, what="the webhook request")
    assert d.flush(5) and d.sent == 1
    d.close()
