"""The dashboard in a real browser: Debian's chromium, driven by Playwright for
Python, against a real ``corral serve`` process (nothing downloaded: the browser is
``/usr/bin/chromium``, which scripts/test installs when it is missing).

Set ``CORRAL_DOCS_SCREENSHOTS=1`` to write the page's screenshot to
docs/images/dashboard.png (docs/dashboard.md shows it); otherwise it goes to the
test's temporary directory."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, expect, sync_playwright

import corral
from tests.integration.test_mcp_transports import Server
from tests.support.backends.http import TOKEN, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LIVE = 1000  # ms: how soon a change reaches an open page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install -y chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A ``corral serve`` process over a fresh SQLite file; its base URL."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    exe = shutil.which("corral", path=os.path.dirname(sys.executable))
    assert exe
    argv = [exe, "--url", url, "serve", "--port", str(port), "--token-file", str(token_file)]
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()


def _log_in(page: Page, base: str, token: str = TOKEN) -> None:
    page.goto(base + "/")
    expect(page).to_have_url(base + "/login?next=%2F")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(base + "/")
    expect(page.get_by_role("status")).to_have_text("live")


def _console(page: Page) -> list[str]:
    messages: list[str] = []

    def note(msg: ConsoleMessage) -> None:
        messages.append(f"{msg.type}: {msg.text}")

    page.on("console", note)
    page.on("pageerror", lambda exc: messages.append(f"pageerror: {exc}"))
    return messages


def test_the_page_loads_with_an_empty_console(browser: Browser, served: str) -> None:
    """Login, the page, its scripts (htmx, the SSE extension, corral's own) and its
    stream under the strict CSP: not one console message, not one page error."""
    page = browser.new_page()
    messages = _console(page)
    _log_in(page, served)
    for name in ("Fleet", "Nodes", "Tasks", "Events"):
        expect(page.get_by_role("heading", level=2, name=name)).to_be_visible()
    page.reload()
    expect(page.get_by_role("status")).to_have_text("live")
    assert messages == []


def test_a_registered_node_appears_without_a_reload(browser: Browser, served: str) -> None:
    """A node registered through the API is in the Nodes panel within 1 s, on the
    same page (a marker set before it is still there)."""
    page = browser.new_page()
    _log_in(page, served)
    page.evaluate("window.corralMarker = 'before'")
    nodes = page.locator("#nodes")
    with corral.connect(served, token=TOKEN) as client:
        client.register_node("w-browser-1", "developer", "claude-sonnet-4-5")
        expect(nodes.get_by_role("rowheader", name="w-browser-1")).to_be_visible(timeout=LIVE)
    assert page.evaluate("window.corralMarker") == "before"
    expect(page.locator('#fleet [data-figure="live"]')).to_have_text("1 / 4")


def test_a_claimed_task_moves_from_pending_to_in_progress(browser: Browser, served: str) -> None:
    """A task added shows in Pending; claimed through the API, it leaves Pending and
    shows in In progress with its holder and epoch, within 1 s, without a reload."""
    page = browser.new_page()
    _log_in(page, served)
    pending = page.locator('[data-list="pending"]')
    in_progress = page.locator('[data-list="in_progress"]')
    with corral.connect(served, token=TOKEN) as client:
        client.register_node("w-claims", "developer")
        task = client.add_task("Fix the flaky login test", priority="high")
        row = f'tr[data-task="{task.id}"]'
        expect(pending.locator(row)).to_be_visible(timeout=LIVE)
        claimed = client.claim_best_task("w-claims", "developer")
        assert claimed is not None and claimed.id == task.id
        expect(in_progress.locator(row)).to_be_visible(timeout=LIVE)
        expect(pending.locator(row)).to_have_count(0)
        expect(in_progress.locator(row)).to_contain_text("w-claims")
        expect(in_progress.locator(row).locator("td").nth(2)).to_have_text(str(claimed.epoch))


def test_updates_pause_while_the_tab_is_hidden(browser: Browser, served: str) -> None:
    """Hidden, the page closes its stream (the header says paused) and a new node
    does not reach it; shown again, it reopens the stream and shows the node."""
    page = browser.new_page()
    _log_in(page, served)
    nodes = page.locator("#nodes")
    _set_hidden(page, True)
    expect(page.get_by_role("status")).to_have_text("paused")
    with corral.connect(served, token=TOKEN) as client:
        client.register_node("w-while-hidden", "developer")
        # A page that did not pause would show it within LIVE; this one must not.
        page.wait_for_timeout(LIVE + 500)
        expect(nodes.get_by_role("rowheader", name="w-while-hidden")).to_have_count(0)
    _set_hidden(page, False)
    expect(page.get_by_role("status")).to_have_text("live")
    row = page.locator("#nodes").get_by_role("rowheader", name="w-while-hidden")
    expect(row).to_be_visible(timeout=LIVE)


def _set_hidden(page: Page, hidden: bool) -> None:
    """What the browser does when the tab goes to the background (or comes back)."""
    page.evaluate(
        """hidden => {
            Object.defineProperty(document, "hidden", {value: hidden, configurable: true});
            Object.defineProperty(document, "visibilityState",
                {value: hidden ? "hidden" : "visible", configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        hidden,
    )


def test_without_a_session_every_page_and_fragment_is_refused(
    browser: Browser, served: str
) -> None:
    """A fresh browser (no cookie) is sent to the login page from ``/``; the panels'
    fragment and the stream answer 401; a wrong token is refused with a message."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(served + "/?node_status=idle")
    expect(page).to_have_url(served + "/login?next=%2F%3Fnode_status%3Didle")
    for path in ("/dashboard/panels/fleet", "/dashboard/panels/events", "/dashboard/stream"):
        assert context.request.get(served + path).status == 401, path
    page.get_by_label("Token").fill("not-the-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_text("That token is not valid here.")
    context.close()


def test_a_post_without_its_csrf_token_is_refused(browser: Browser, served: str) -> None:
    """Logged in, a POST without the session's CSRF token (or with another's) is 403
    and changes nothing; with it, it does what it says (log out)."""
    context = browser.new_context()
    page = context.new_page()
    _log_in(page, served)
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert token
    no_token = context.request.post(served + "/logout", max_redirects=0)
    assert no_token.status == 403
    wrong = context.request.post(
        served + "/logout", headers={"X-CSRF-Token": token[::-1]}, max_redirects=0
    )
    assert wrong.status == 403
    assert context.request.get(served + "/dashboard/panels/fleet").status == 200
    ok = context.request.post(served + "/logout", headers={"X-CSRF-Token": token}, max_redirects=0)
    assert ok.status == 303
    assert context.request.get(served + "/dashboard/panels/fleet").status == 401
    context.close()


def test_every_control_is_reached_by_tab_and_labelled(browser: Browser, served: str) -> None:
    """Tab from the top of the page reaches every control, each found by its role and
    accessible name; the same holds on the login page."""
    page = browser.new_page()
    page.goto(served + "/login")
    login_controls = [
        page.get_by_role("textbox", name="Token"),
        page.get_by_role("button", name="Log in"),
    ]
    _tab_reaches(page, login_controls)
    page.get_by_label("Token").fill(TOKEN)
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text("live")
    controls = [
        page.get_by_role("button", name="Log out"),
        page.get_by_role("combobox", name="Node status"),
        page.get_by_role("button", name="Filter nodes"),
        # the Tasks panel's filter and actions (an operator's page)
        page.get_by_role("combobox", name="Task status"),
        page.get_by_role("textbox", name="Role"),
        page.get_by_role("combobox", name="Priority"),
        page.get_by_role("textbox", name="Holder"),
        page.get_by_role("textbox", name="Title contains"),
        page.get_by_role("textbox", name="Older than (s)"),
        page.get_by_role("button", name="Filter tasks"),
        page.get_by_role("button", name="Requeue matching"),
        page.get_by_role("button", name="Cancel matching"),
        page.get_by_role("textbox", name="Reason"),
        page.get_by_role("button", name="Requeue selected"),
        page.get_by_role("button", name="Cancel selected"),
        # the Workflows panel's filter (test_dashboard_panels_browser.py: the rows')
        page.get_by_role("textbox", name="Idle for more than (min)"),
        page.get_by_role("button", name="Filter runs"),
        page.get_by_role("combobox", name="Event kind"),
        page.get_by_role("textbox", name="Event node"),
        page.get_by_role("textbox", name="Event task"),
        page.get_by_role("button", name="Filter events"),
    ]
    _tab_reaches(page, controls)
    # Every focusable element on the page is one of them (besides the Events panel's
    # rows' links to their objects).
    focusable = page.locator(
        "a[href]:not(#events a), button, input:not([type=hidden]):not([hidden]), select, textarea"
    )
    expect(focusable).to_have_count(len(controls))


def _tab_reaches(page: Page, controls: list[Locator]) -> None:
    page.locator("body").focus()
    reached = []
    for _ in range(len(controls) + 3):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.outerHTML"))
    for control in controls:
        html = control.evaluate("e => e.outerHTML")
        assert html in reached, f"Tab never reached {html}"


def test_node_filter_and_screenshot(browser: Browser, served: str, tmp_path: Path) -> None:
    """The Nodes panel hides terminated nodes until its filter asks for them (the
    filter is kept in the URL); then a screenshot of a busy page for the docs."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _log_in(page, served)
    with corral.connect(served, token=TOKEN) as client:
        client.configure(max_agents=8)
        client.register_node("manager-1", "bootstrap_manager", "claude-opus-4")
        for i, role in enumerate(("developer", "developer", "architect", "architect")):
            client.register_node(f"w{i + 1}", role, "claude-sonnet-4-5")
        client.register_node("w-gone", "developer")
        client.terminate_node("w-gone")
        failed = client.add_task("Migrate the old table", priority="low")
        held = client.claim_best_task("w2", "developer")
        assert held is not None and held.id == failed.id
        client.fail_task(held.id, "w2", held.epoch, "disk full", retry=False)
        titles = [
            ("Write the release notes", "low"),
            ("Fix the login test", "high"),
            ("Design the cache layer", "medium"),
            ("Review the API docs", "medium"),
            ("Add retries to the webhook", "high"),
        ]
        for title, priority in titles:
            client.add_task(title, priority=priority)
        assert client.claim_best_task("w1", "developer") is not None
        assert client.claim_best_task("w3", "architect") is not None
        client.heartbeat("w1", health="ok")
        # An assessment asked for now (the monitor's next is up to 25 s away) shows
        # with the counts recorded beside it.
        assert client.assess_workload().status == "overloaded"
        fleet = page.locator("#fleet")
        expect(fleet.locator('[data-figure="status"]')).to_have_text("overloaded", timeout=LIVE)
        expect(fleet).to_contain_text("from 3 pending and 5 active of 8 allowed (2 idle)")
        nodes = page.locator("#nodes")
        expect(nodes.get_by_role("rowheader", name="w4")).to_be_visible(timeout=LIVE)
        expect(nodes.get_by_role("rowheader", name="w-gone")).to_have_count(0)
    page.get_by_label("Node status").select_option("terminated")
    expect(page).to_have_url(f"{served}/?event_kind=&node_status=terminated")
    expect(page.get_by_role("status")).to_have_text("live")
    expect(nodes.get_by_role("rowheader", name="w-gone")).to_be_visible()
    expect(nodes.get_by_role("rowheader", name="w1")).to_have_count(0)
    page.get_by_label("Node status").select_option("")
    expect(page.get_by_role("status")).to_have_text("live")
    expect(nodes.get_by_role("rowheader", name="w1")).to_be_visible()
    docs = os.environ.get("CORRAL_DOCS_SCREENSHOTS") == "1"
    shot = ROOT / "docs" / "images" / "dashboard.png" if docs else tmp_path / "dashboard.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
