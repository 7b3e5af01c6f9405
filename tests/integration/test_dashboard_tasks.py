"""The Tasks panel's actions in a real browser (Debian's chromium, Playwright) against
a real ``corral serve``: a bulk Requeue on a filter shows the dry run's count first and
then requeues exactly the matching tasks; Cancel on a selection (kept through the
stream's redraws) cancels exactly those; a bad filter is refused with its message and
changes nothing; the action needs the session's CSRF token; a task a real ``corral
worker`` runs, cancelled on the page, has its process stopped and its completion
refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

import corral
from corral.server.auth import Tokens
from corral.types import Client
from tests.integration.test_dashboard_browser import LIVE, _console, _log_in

# The fixtures: the browser and a corral serve process (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.integration.test_dashboard_browser import served as served
from tests.integration.test_worker_cancel import _child_stopped as child_stopped
from tests.integration.test_worker_cancel import _env as worker_env
from tests.integration.test_worker_cancel import _log as worker_log
from tests.integration.test_worker_cancel import _stop as stop_worker
from tests.integration.test_worker_cancel import _worker as start_worker
from tests.support.backends.http import TOKEN
from tests.support.worker_app import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def client(served: str) -> Iterator[Client]:
    with corral.connect(served, token=TOKEN) as c:
        yield c


def _fail(c: Client, node: str, title: str) -> int:
    task = c.add_task(title, priority="high")
    held = c.claim_best_task(node, "developer")
    assert held is not None and held.id == task.id
    c.fail_task(held.id, node, held.epoch, error="it broke", retry=False)
    return task.id


def _statuses(c: Client) -> dict[int, str]:
    return {t.id: t.status for t in c.list_tasks(limit=1000)}


def test_a_bulk_requeue_on_a_filter_counts_first_then_requeues_exactly_those(
    browser: Browser, served: str, client: Client
) -> None:
    c = client
    c.register_node("w1", "developer")
    flaky = [_fail(c, "w1", "Fix the flaky login test"), _fail(c, "w1", "Fix the flaky upload")]
    other_failed = _fail(c, "w1", "Migrate the old table")
    c.add_task("Fix the flaky export", priority="low")  # pending: not requeued
    c.add_task("Fix the flaky import", priority="high")
    held = c.claim_best_task("w1", "developer")  # in progress: the status filter leaves it
    assert held is not None
    before = _statuses(c)

    page = browser.new_page()
    messages = _console(page)
    _log_in(page, served)
    failed = page.locator('[data-list="failed"]')
    expect(failed.locator("tbody tr")).to_have_count(3, timeout=LIVE)
    page.get_by_label("Task status").select_option("failed")
    page.get_by_label("Title contains").fill("FLAKY")
    page.get_by_role("button", name="Requeue matching").click()
    area = page.locator("#task-action")
    expect(area.locator("[data-count]")).to_have_text("2")
    expect(area).to_contain_text(f"2 tasks match the filter: task-{flaky[0]}, task-{flaky[1]}.")
    assert _statuses(c) == before  # the count first: nothing changed yet

    page.get_by_role("button", name="Confirm: requeue 2 tasks").click()
    expect(area).to_contain_text(f"Requeued 2 tasks: task-{flaky[0]}, task-{flaky[1]}.")
    after = _statuses(c)
    assert {i for i in after if after[i] != before[i]} == set(flaky)
    assert [after[i] for i in flaky] == ["pending", "pending"]
    assert after[other_failed] == "failed" and after[held.id] == "in_progress"
    for task_id in flaky:
        expect(page.locator(f'[data-list="pending"] tr[data-task="{task_id}"]')).to_be_visible(
            timeout=LIVE
        )
    events = [e for e in c.events(limit=1000) if e.kind == "task_requeued"]
    assert sorted(e.task_id for e in events if e.task_id is not None) == flaky
    assert {e.data["actor"] for e in events} == {"operator"}
    page.get_by_role("button", name="Dismiss").click()
    expect(area).to_be_empty()
    assert messages == []


def test_cancel_on_a_selection_kept_through_redraws(
    browser: Browser, served: str, client: Client
) -> None:
    c = client
    ids = [c.add_task(f"Write chapter {n}").id for n in range(1, 5)]
    page = browser.new_page()
    _log_in(page, served)
    pending = page.locator('[data-list="pending"]')
    expect(pending.locator("tbody tr")).to_have_count(4, timeout=LIVE)
    page.get_by_label(f"Select task-{ids[0]}").check()
    page.get_by_label(f"Select task-{ids[2]}").check()
    # A change redraws the panel from the stream: the ticks stay.
    c.add_task("Write the index")
    expect(pending.locator("tbody tr")).to_have_count(5, timeout=LIVE)
    expect(page.get_by_label(f"Select task-{ids[0]}")).to_be_checked()
    expect(page.get_by_label(f"Select task-{ids[2]}")).to_be_checked()
    expect(page.get_by_label(f"Select task-{ids[1]}")).not_to_be_checked()

    page.get_by_label("Reason").fill("out of scope")
    page.get_by_role("button", name="Cancel selected").click()
    area = page.locator("#task-action")
    expect(area).to_contain_text(f"Cancelled 2 tasks: task-{ids[0]}, task-{ids[2]}.")
    statuses = _statuses(c)
    assert [statuses[i] for i in ids] == ["cancelled", "pending", "cancelled", "pending"]
    assert c.get_task(ids[0]).error == "cancelled by operator: out of scope"
    expect(pending.locator(f'tr[data-task="{ids[0]}"]')).to_have_count(0, timeout=LIVE)


def test_a_bad_filter_is_refused_with_its_message_and_changes_nothing(
    browser: Browser, served: str, client: Client
) -> None:
    c = client
    c.add_task("Write chapter 1")
    before = _statuses(c)
    page = browser.new_page()
    _log_in(page, served)
    page.get_by_label("Older than (s)").fill("-5")
    page.get_by_role("button", name="Cancel matching").click()
    expect(page.get_by_role("alert")).to_contain_text("min_age must be a number of seconds from 0")
    page.get_by_label("Older than (s)").fill("")
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.get_by_role("alert")).to_contain_text("Select tasks first")
    assert _statuses(c) == before
    # The endpoint itself: an unknown status is a 422 naming it; no CSRF token, 403.
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert token
    form: dict[str, str | float | bool] = {
        "action": "cancel",
        "scope": "matching",
        "task_status": "done",
        "confirm": "1",
    }
    bad = page.request.post(
        served + "/dashboard/tasks/act", form=form, headers={"X-CSRF-Token": token}
    )
    assert bad.status == 422 and "status must be one of pending, in_progress" in bad.text()
    refused = page.request.post(served + "/dashboard/tasks/act", form={**form, "task_status": ""})
    assert refused.status == 403
    assert _statuses(c) == before


def test_cancel_on_the_page_stops_a_real_workers_task_and_refuses_its_completion(
    browser: Browser, served: str, client: Client, tmp_path: Path
) -> None:
    """The issue's acceptance end to end: a real ``corral worker`` (its node token)
    runs a task's child; **Cancel selected** on the page cancels it, the worker's next
    heartbeat stops the child (SIGTERM), and its late completion is refused."""
    c = client
    task = c.add_task("Implement the long migration")
    env = worker_env(CORRAL_TOKEN=Tokens(TOKEN).node_token("W1"))
    worker = start_worker(served, tmp_path, env)
    try:
        wait_for(lambda: (tmp_path / "child.pid").exists(), timeout=20, what="the child")
        page = browser.new_page()
        _log_in(page, served)
        row = page.locator(f'[data-list="in_progress"] tr[data-task="{task.id}"]')
        expect(row).to_be_visible(timeout=LIVE)
        page.get_by_label(f"Select task-{task.id}").check()
        page.get_by_role("button", name="Cancel selected").click()
        expect(page.locator("#task-action")).to_contain_text(f"Cancelled 1 task: task-{task.id}.")
        child_stopped(tmp_path)
        refused = f"completion of task {task.id} refused"
        wait_for(lambda: refused in worker_log(tmp_path), what="the refused completion")
        assert "was cancelled by operator" in worker_log(tmp_path)
        assert c.get_task(task.id).status == "cancelled"
        expect(row).to_have_count(0, timeout=LIVE)
    finally:
        stop_worker(worker, tmp_path)
