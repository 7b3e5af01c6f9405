"""The Processes, Pools, Workflows, Activations and Events panels in a real browser
(Debian's chromium, Playwright) on a real ``corral up``: a relay it supervises and a
pool in ``ask`` mode. **Restart** on the relay runs it again as a new process (its
supervisor follows the request); **Accept** on the pool's pending spawn request starts
a member; a viewer sees every panel and no control; every new control is found by
role and name and reached by Tab (each panel's picture for the docs:
tests/integration/test_dashboard_screenshots.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.integration.test_dashboard_browser import _console

# The browser fixture (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.support.fleet_up import Up, copy_example, wait_for

pytestmark = pytest.mark.slow

NEW_PANELS = ("Processes", "Pools", "Workflows", "Activations", "Events")
LIVE = 5000  # ms: a supervisor follows a request within its 1 s poll, then reports

FLEET = """
[cluster]
settings = { max_agents = 6, idle_timeout_seconds = 60, grace_period_seconds = 5 }

[board]
seed = "tasks.jsonl"

[supervisor]
heartbeat_interval = 1
heartbeat_timeout = 5
stop_timeout = 5

[[agents]]
id = "relay"
cmd = "python3"
args = ["relay.py"]
cwd = "."
heartbeat = "pipe"
restart = "always"

[[pools]]
id = "ask"
cmd = "python3"
args = ["fleet_worker.py"]
cwd = "."
env = { FLEET_WORK_SECONDS = "30" }
role = "developer"
max = 1
cooldown = 600
scale = "ask"
"""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    """``corral up`` with the relay and an ask-mode pool over two tasks; its operator
    token is in the banner's token file."""
    copy_example(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"title": "t1"}\n{"title": "t2"}\n')
    (tmp_path / "fleet.toml").write_text(FLEET)
    running = Up(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _token(up: Up) -> str:
    path = Path(up.info["token_file"])
    return (path if path.is_absolute() else up.directory / path).read_text().strip()


def _log_in(page: Page, base: str, token: str) -> None:
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(base + "/")
    expect(page.get_by_role("status")).to_have_text("live")


def _relay(up: Up) -> int:
    """The relay's pid while it is RUNNING, else 0."""
    found = [p for p in up.cluster.list_processes() if p.agent == "relay"]
    return (found[0].pid or 0) if found and found[0].state == "RUNNING" else 0


def test_restart_and_accept_on_a_real_fleet(browser: Browser, up: Up) -> None:
    """Restart: the relay runs again as a new process (a new pid, its request done)
    and the page shows its ``restarts`` one higher (every restart counts, the
    operator's too; docs/supervisor.md). Accept: the pool's member starts."""
    base = up.info["http"]
    old = wait_for(lambda: _relay(up), 30, "the relay reported RUNNING")
    (before,) = [p.restarts for p in up.cluster.list_processes() if p.agent == "relay"]
    pending = wait_for(lambda: up.cluster.spawn_requests(status="pending"), 30, "a request")
    ask = pending[0].id

    page = browser.new_page()
    messages = _console(page)
    _log_in(page, base, _token(up))
    processes = page.locator("#processes")
    relay = processes.locator('tr[data-process="relay"]')
    expect(relay).to_contain_text(f"pid {old}", timeout=LIVE)
    restarts = relay.locator('[data-figure="restarts"]')
    expect(restarts).to_have_text(str(before), timeout=LIVE)

    restart = page.get_by_role("button", name="Restart relay on ")
    restart.focus()
    page.keyboard.press("Enter")  # the keyboard's way: the focused button
    expect(page.locator("#process-action")).to_contain_text("Asked ")
    new = wait_for(lambda: _relay(up) not in (0, old) and _relay(up), 10, "a new relay")
    expect(relay).to_contain_text(f"pid {new}", timeout=LIVE)
    expect(restarts).to_have_text(str(before + 1), timeout=LIVE)
    assert wait_for(lambda: up.events("process_action_done"), 10, "the request done")

    pools = page.locator("#pools")
    request_row = pools.locator(f'tr[data-request="{ask}"]')
    expect(request_row).to_contain_text("spawn_developer")
    page.get_by_role("button", name=f"Accept request-{ask}").click()
    expect(page.locator("#pool-action")).to_contain_text(f"request {ask}")
    expect(page.locator("#pool-action")).to_contain_text("accepted by operator")
    expect(request_row).to_have_count(0, timeout=LIVE)  # no longer pending
    # the member it starts: a supervised process, then a node of the pool
    member = processes.locator('tr[data-process="ask-1"]')
    expect(member).to_be_visible(timeout=15_000)
    wait_for(lambda: any(n.id == "ask-1" for n in up.cluster.list_nodes()), 30, "ask-1 registered")
    assert [r.status for r in up.cluster.spawn_requests() if r.id == ask] == ["accepted"]
    assert messages == []


def test_a_viewer_sees_each_panel_and_no_control(browser: Browser, up: Up) -> None:
    base = up.info["http"]
    wait_for(lambda: _relay(up), 30, "the relay reported")
    wait_for(lambda: up.cluster.spawn_requests(status="pending"), 30, "a request")
    viewer = up.cluster.create_token("watcher", "viewer").token
    assert viewer is not None  # a new token is shown once, on creation
    page = browser.new_page()
    _log_in(page, base, viewer)
    for name in NEW_PANELS:
        expect(page.get_by_role("heading", level=2, name=name)).to_be_visible()
    expect(page.locator('#processes tr[data-process="relay"]')).to_be_visible(timeout=LIVE)
    expect(page.locator("#pools tr[data-request]")).to_have_count(1, timeout=LIVE)
    for panel in ("processes", "pools", "workflows", "activations"):
        expect(page.locator(f"#{panel} button")).to_have_count(0)
        expect(page.locator(f"#{panel} input")).to_have_count(0)
    for name in ("Restart", "Start", "Stop", "Accept", "Decline", "Send event"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)


def test_every_new_control_is_labelled_and_reached_by_tab(browser: Browser, up: Up) -> None:
    """Each new panel's control has an accessible name (found by role and name) and is
    reached by pressing Tab from the top of the page."""
    base = up.info["http"]
    wait_for(lambda: _relay(up), 30, "the relay reported")
    ask = wait_for(lambda: up.cluster.spawn_requests(status="pending"), 30, "a request")[0].id
    page = browser.new_page()
    _log_in(page, base, _token(up))
    host = up.cluster.list_processes()[0].host
    controls = [
        page.get_by_role("button", name=f"{verb} relay on {host}", exact=True)
        for verb in ("Start", "Stop", "Restart")
    ]
    controls += [
        page.get_by_role("button", name=f"{verb} request-{ask}", exact=True)
        for verb in ("Accept", "Decline")
    ]
    controls += [
        page.get_by_role("textbox", name="Idle for more than (min)"),
        page.get_by_role("button", name="Filter runs"),
        page.get_by_role("textbox", name="Event node"),
        page.get_by_role("textbox", name="Event task"),
        page.get_by_role("button", name="Filter events"),
    ]
    for c in controls:
        expect(c).to_have_count(1, timeout=LIVE)
    wanted = {c.evaluate("e => e.outerHTML") for c in controls}
    reached: set[str] = set()
    page.locator("body").focus()
    for _ in range(400):
        page.keyboard.press("Tab")
        html = page.evaluate("document.activeElement ? document.activeElement.outerHTML : ''")
        if html in wanted:
            reached.add(html)
        if reached == wanted:
            break
    assert reached == wanted, sorted(wanted - reached)


def test_send_event_keeps_what_was_typed_through_redraws(browser: Browser, up: Up) -> None:
    """A run idle on its host waits for an Answer: the operator types the event's data,
    the stream redraws the panels meanwhile (a node registers), the typing is kept, and
    **Send event** delivers it to the run's host."""
    c = up.cluster
    c.serve_workflows("wf-host", [{"name": "hitl"}])
    run = c.run_workflow("hitl")
    c.take_workflow_work("wf-host")
    wait = {"step": "ask", "event_type": "Answer", "waiter_id": "w1", "deadline": None}
    c.report_handler("wf-host", run, "idle", [wait])
    page = browser.new_page()
    messages = _console(page)
    _log_in(page, up.info["http"], _token(up))
    expect(page.locator(f'#workflows tr[data-run="{run}"]')).to_be_visible(timeout=LIVE)
    kind = page.get_by_role("textbox", name=f"Event type for {run}")
    expect(kind).to_have_value("Answer")  # what it waits for
    data = page.get_by_role("textbox", name=f"Event data for {run} (JSON)")
    data.fill('{"text": "ship it"}')
    c.register_node("w-redraw", "developer")  # a change: every panel is redrawn
    expect(page.locator("#nodes").get_by_role("rowheader", name="w-redraw")).to_be_visible(
        timeout=LIVE
    )
    expect(data).to_have_value('{"text": "ship it"}')
    page.get_by_role("button", name=f"Send event to {run}").click()
    expect(page.locator("#workflow-action")).to_contain_text(f"Sent Answer to {run}")
    got = c.take_workflow_work("wf-host").deliveries
    assert [(d.handler_id, d.event_type, d.data) for d in got] == [
        (run, "Answer", {"text": "ship it"})
    ]
    assert messages == []
