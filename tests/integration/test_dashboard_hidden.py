"""Updates pause while the tab is hidden, also for a page that loads hidden (opened in
a background tab): it keeps no stream open until it is shown. Debian's chromium,
Playwright, a real ``corral serve`` (the fixtures of test_dashboard_browser.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

import corral
from tests.integration.test_dashboard_browser import LIVE, _console, _set_hidden

# The fixtures (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.integration.test_dashboard_browser import served as served
from tests.support.backends.http import TOKEN

pytestmark = pytest.mark.slow

# What a tab opened in the background is, from its first script on.
HIDDEN_FROM_THE_START = """
Object.defineProperty(document, "hidden", {value: true, configurable: true});
Object.defineProperty(document, "visibilityState", {value: "hidden", configurable: true});
"""


def test_a_page_loaded_in_a_hidden_tab_streams_only_once_shown(
    browser: Browser, served: str
) -> None:
    context = browser.new_context()
    page = context.new_page()
    messages = _console(page)
    page.goto(served + "/login")
    page.get_by_label("Token").fill(TOKEN)
    page.add_init_script(HIDDEN_FROM_THE_START)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(served + "/")
    expect(page.get_by_role("status")).to_have_text("paused")
    nodes = page.locator("#nodes")
    with corral.connect(served, token=TOKEN) as client:
        client.register_node("w-background", "developer")
        # A page streaming while hidden would show it within LIVE; this one must not.
        page.wait_for_timeout(LIVE + 500)
        expect(nodes.get_by_role("rowheader", name="w-background")).to_have_count(0)
        expect(page.get_by_role("status")).to_have_text("paused")
    _set_hidden(page, False)
    expect(page.get_by_role("status")).to_have_text("live")
    expect(nodes.get_by_role("rowheader", name="w-background")).to_be_visible(timeout=LIVE)
    assert messages == []
    context.close()
