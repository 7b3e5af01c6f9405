"""Each dashboard panel in a real browser (Debian's chromium, Playwright) over a real
``corral serve`` with a busy cluster: every panel the page has renders, headed by its
name, with what the cluster holds; the Fleet panel's sparklines are there, labelled.

Set ``CORRAL_DOCS_SCREENSHOTS=1`` to write each panel's picture to
docs/images/dashboard-<panel>.png (docs/dashboard.md shows them; the run then also
waits, up to two minutes, for the sparklines to have three samples to draw); otherwise
the pictures go to the test's temporary directory."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

import corral
from tests.integration.test_dashboard_browser import ROOT, _console, _log_in

# The fixtures (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.integration.test_dashboard_browser import served as served
from tests.support.backends.http import TOKEN

pytestmark = pytest.mark.slow

LIVE = 1000  # ms
MAX_HEIGHT = 900  # px: the tallest picture
PANELS = ("Fleet", "Nodes", "Tasks", "Processes", "Pools", "Workflows", "Activations", "Events")
WAIT = {"step": "ask", "event_type": "Answer", "waiter_id": "w1", "deadline": None}
DOCS = os.environ.get("CORRAL_DOCS_SCREENSHOTS") == "1"


def _busy(c: Any) -> None:
    """A fleet with something in every panel: nodes of each kind, tasks pending, in
    progress, failed and done, supervised processes, a pending spawn request, an idle
    workflow run, agents to activate, and the assessment."""
    now = time.time()
    c.configure(max_agents=12)
    c.register_node("manager-1", "bootstrap_manager", "claude-opus-4")
    for i, role in enumerate(("developer", "developer", "developer", "architect", "architect")):
        c.register_node(f"w{i + 1}", role, "claude-sonnet-4-5")
    c.register_node("w-gone", "developer")
    c.terminate_node("w-gone")
    titles = [
        ("Migrate the sessions table", "low"),
        ("Fix the flaky login test", "high"),
        ("Design the cache layer", "medium"),
        ("Review the API docs", "medium"),
        ("Add retries to the webhook", "high"),
        ("Write the release notes", "low"),
        ("Profile the claim path", "medium"),
        ("Split the settings module", "low"),
    ]
    c.add_tasks([{"title": t, "priority": p} for t, p in titles])
    failed = c.claim_best_task("w2", "developer")
    assert failed is not None
    c.fail_task(failed.id, failed.assigned_to, failed.epoch, "disk full", retry=False)
    done = c.claim_best_task("w1", "developer")
    assert done is not None
    c.complete_task(done.id, "w1", done.epoch, "merged")
    for node, role in (("w1", "developer"), ("w3", "developer"), ("w4", "architect")):
        assert c.claim_best_task(node, role) is not None
    c.heartbeat("w1", health="ok")
    c.report_processes(
        "host-a",
        [
            {
                "agent": "relay",
                "state": "RUNNING",
                "pid": 4242,
                "restarts": 1,
                "started_at": now - 900,
                "last_beat": now - 1,
                "flags": [],
                "last_exit": None,
            },
            {
                "agent": "w1",
                "state": "RUNNING",
                "pid": 4250,
                "restarts": 0,
                "started_at": now - 600,
                "last_beat": now - 2,
                "flags": [],
                "last_exit": None,
            },
            {
                "agent": "flaky",
                "state": "STOPPED",
                "pid": None,
                "restarts": 5,
                "started_at": None,
                "last_beat": None,
                "flags": ["restart-exhausted"],
                "last_exit": {
                    "code": 1,
                    "stderr_tail": [
                        "Traceback (most recent call last):",
                        "ValueError: no config at ./flaky.toml",
                    ],
                },
            },
        ],
    )
    c.request_spawn("dev", "developer", reason="spawn_developer: 5 pending tasks")
    c.serve_workflows("wf-host", [{"name": "review"}])
    run = c.run_workflow("review")
    c.take_workflow_work("wf-host")
    c.report_handler("wf-host", run, "idle", [WAIT])
    for agent in ("triage-bot", "nightly-report", "pr-reviewer"):
        c.add_agent(agent)
    c.notify("pr-reviewer", {"pr": 1234})
    c.assess_workload()


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _panels(page: Page) -> list[str]:
    """The page's panels, by their h2 headings, in order."""
    return [h.strip() for h in page.locator("main section.panel > h2").all_inner_texts()]


def _sparkline_points(page: Page) -> int:
    d = page.locator('#fleet svg[data-spark="pending"] path').get_attribute("d") or ""
    return len(re.findall(r"[ML]", d))


def test_each_panel_renders_and_is_pictured(browser: Browser, served: str, tmp_path: Path) -> None:
    # One column: each panel at its own height.
    page = browser.new_page(viewport={"width": 960, "height": 900})
    messages = _console(page)
    _log_in(page, served)
    with corral.connect(served, token=TOKEN) as client:
        _busy(client)
        shown = _panels(page)
        assert set(PANELS) <= set(shown), shown
        fleet = page.locator("#fleet")
        expect(fleet.locator('[data-figure="status"]')).to_have_text("overloaded", timeout=LIVE)
        expect(page.locator("#nodes").get_by_role("rowheader", name="w5")).to_be_visible()
        for name in ("Pending tasks", "Live nodes", "Throughput"):
            expect(
                fleet.get_by_role("img", name=re.compile(f"^{name}, the last hour"))
            ).to_be_visible()
        if DOCS:
            # Three samples (one per 30 s bucket) for the sparklines to draw a line,
            # the fleet changing in each bucket.
            deadline = time.monotonic() + 120
            seen = 0
            while (points := _sparkline_points(page)) < 3:
                assert time.monotonic() < deadline, "the sparklines never got 3 samples"
                if points > seen:
                    seen = points
                    client.add_tasks([{"title": f"Follow-up {seen}.{i}"} for i in range(3)])
                    client.register_node(f"extra-{seen}", "developer")
                    for _ in range(seen):
                        task = client.claim_best_task(f"extra-{seen}", "developer")
                        if task is not None:
                            client.complete_task(task.id, f"extra-{seen}", task.epoch, "ok")
                page.wait_for_timeout(200)
    expect(page.get_by_role("status")).to_have_text("live")
    out = ROOT / "docs" / "images" if DOCS else tmp_path
    page.evaluate("window.scrollTo(0, 0)")  # the boxes below are the page's coordinates
    for name in shown:
        section = page.locator("main section.panel").filter(
            has=page.get_by_role("heading", level=2, name=name, exact=True)
        )
        expect(section).to_have_count(1)
        body = section.locator("> div[sse-swap]")
        expect(body).not_to_be_empty()
        shot = out / f"dashboard-{_slug(name)}.png"
        box = section.bounding_box()
        assert box is not None and box["height"] > 50, name
        # A long panel (Events) is pictured down to MAX_HEIGHT.
        page.screenshot(
            path=str(shot),
            clip={
                "x": box["x"],
                "y": box["y"],
                "width": box["width"],
                "height": min(box["height"], MAX_HEIGHT),
            },
            full_page=True,
        )
        assert shot.stat().st_size > 3_000, shot
    assert messages == []
