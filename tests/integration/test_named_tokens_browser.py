"""A viewer's dashboard in a real browser (Debian's chromium through Playwright,
against a real ``corral serve``): it logs in with a named viewer token, sees every
panel live and finds no control that acts; revoking its token sends the open page
back to the login page at once."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

import corral
from tests.integration.test_dashboard_browser import LIVE, _log_in

# The fixtures: the browser and a corral serve process (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.integration.test_dashboard_browser import served as served
from tests.support.backends.http import TOKEN

pytestmark = pytest.mark.slow

# The page's own controls that change nothing: filters (GET forms) and logging out.
READ_ONLY_BUTTONS = {"Log out", "Filter nodes", "Filter runs", "Filter events"}


def test_a_viewer_sees_every_panel_live_and_no_control_that_acts(
    browser: Browser, served: str
) -> None:
    with corral.connect(served, token=TOKEN) as client:
        viewer = client.create_token("wall-screen", "viewer").token
        assert viewer is not None
        client.add_task("Implement login", priority="high")
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        _log_in(page, served, viewer)
        for name in ("Fleet", "Nodes", "Tasks", "Events"):
            expect(page.get_by_role("heading", level=2, name=name)).to_be_visible()
        expect(page.get_by_text("wall-screen (viewer: read only)")).to_be_visible()
        expect(page.locator("#tasks").get_by_text("Implement login")).to_be_visible()
        names = {b.inner_text().strip() for b in page.get_by_role("button").all()}
        assert names <= READ_ONLY_BUTTONS, names - READ_ONLY_BUTTONS
        assert page.get_by_role("checkbox").count() == 0
        client.register_node("w-seen-by-viewer", "developer")
        nodes = page.locator("#nodes")
        expect(nodes.get_by_role("rowheader", name="w-seen-by-viewer")).to_be_visible(timeout=LIVE)
        assert errors == []


def test_revoking_the_token_sends_its_open_page_to_the_login_page(
    browser: Browser, served: str
) -> None:
    with corral.connect(served, token=TOKEN) as client:
        token = client.create_token("kiosk", "viewer").token
        assert token is not None
        page = browser.new_page()
        _log_in(page, served, token)
        client.revoke_token("kiosk")
        # The revocation's event reaches the page's stream, which ends its session.
        expect(page).to_have_url(served + "/login?next=%2F", timeout=3 * LIVE)
