"""The scheduler's scaling signals in /metrics (inbox queue depth, oldest unread age,
time since the last activation, activations by kind, runners by mode), accepted by
``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx

import corral
from corral.clock import FakeClock
from tests.integration.test_server_metrics import _samples
from tests.support.backends.http import TOKEN, serving


def test_scheduler_signals_in_metrics(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    clock = FakeClock()
    with serving(tmp_path, clock=clock) as (url, _embedded):
        c = corral.connect(url, token=TOKEN)
        for runner in ("n1", "e1", "h1"):
            c.register_node(runner, "runner", heartbeat_interval=600)
        for a in ("a", "b", "c", "d"):
            c.add_agent(a)
        c.notify("a", 1)
        clock.advance(30)
        c.notify("b", 2)
        c.notify("b", 3)
        done = c.get_assignment("h1", "hybrid")  # b: two unread
        assert done is not None
        c.release_assignment(done.id, "h1", done.epoch)
        clock.advance(45)
        explored = c.get_assignment("e1", "exploration")
        assert explored is not None and explored.kind == "discovery"
        notified = c.get_assignment("n1", "notification")
        assert notified is not None and notified.agent_id == "a"
        c.close()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as h:
            r = h.get("/metrics")
    assert r.status_code == 200
    check = subprocess.run(
        [promtool, "check", "metrics"], input=r.text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    s = _samples(r.text)
    assert s[("corral_inbox_queue_depth", ())] == 1  # a's item, delivered but not yet read
    assert s[("corral_inbox_oldest_unread_age_seconds", ())] == 75
    assert s[("corral_seconds_since_last_activation", ())] == 45
    assert s[("corral_agents", ())] == 4
    assert s[("corral_activations_active", (("kind", "inbox"),))] == 1
    assert s[("corral_activations_active", (("kind", "discovery"),))] == 1
    assert s[("corral_activations_active", (("kind", "scheduled"),))] == 0
    for mode in ("notification", "exploration", "hybrid"):
        assert s[("corral_runners", (("mode", mode),))] == 1
