"""/metrics: Prometheus text read from the store at scrape time, accepted by
``promtool check metrics`` (Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

import corral
from corral.clock import FakeClock
from tests.support.backends.http import TOKEN, serving


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_reflect_the_store_and_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    clock = FakeClock()
    with serving(tmp_path, clock=clock) as (url, embedded):
        client = corral.connect(url, token=TOKEN)
        client.register_node("w1", "developer", heartbeat_interval=5)
        client.register_node("a1", "architect")
        client.add_tasks(
            [{"title": "implement a"}, {"title": "implement b"}, {"title": "design c"}]
        )
        done = client.claim_best_task("w1", "developer")
        assert done is not None
        client.complete_task(done.id, "w1", done.epoch)
        held = client.claim_best_task("w1", "developer")
        assert held is not None
        client.broadcast("hello")
        # w1 falls silent: the monitor recovers its lease
        clock.advance(40)
        client.heartbeat("a1")
        corral.Monitor(embedded).tick()
        client.assess_workload()
        client.close()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as h:
            h.get("/v1/nodes/ghost")  # a 404 in the latency histogram
            r = h.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=r.text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    s = _samples(r.text)
    assert s[("corral_tasks", (("status", "done"),))] == 1
    assert s[("corral_tasks", (("status", "pending"),))] == 2
    assert s[("corral_task_claims_total", ())] == 2
    assert s[("corral_task_completions_total", ())] == 1
    assert s[("corral_lease_recoveries_total", ())] == 1
    assert s[("corral_nodes", (("role", "developer"), ("status", "terminated")))] == 1
    assert s[("corral_nodes", (("role", "architect"), ("status", "idle")))] == 1
    assert s[("corral_node_heartbeat_age_seconds", (("node", "a1"), ("role", "architect")))] == 0
    assert ("corral_node_heartbeat_age_seconds", (("node", "w1"), ("role", "developer"))) not in s
    assert s[("corral_node_inbox_depth", (("node", "a1"),))] > 0
    assert (
        s[("corral_assessment_status", (("status", "underutilized"),))]
        + s[("corral_assessment_status", (("status", "balanced"),))]
        + s[("corral_assessment_status", (("status", "overloaded"),))]
        + s[("corral_assessment_status", (("status", "idle"),))]
        == 1
    )
    assert any(k[0] == "corral_assessment_recommendation" and v == 1 for k, v in s.items())
    routes = {dict(k[1]).get("route") for k in s if k[0].startswith("corral_http_request")}
    assert "/v1/nodes/{node_id:path}/claim" in routes
    assert (
        s[
            (
                "corral_http_request_duration_seconds_count",
                (("method", "GET"), ("route", "/v1/nodes/{node_id:path}"), ("status", "404")),
            )
        ]
        == 1
    )
