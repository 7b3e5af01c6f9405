"""The Workflows panel's **Release** and **Resume** in a real browser (Debian's chromium,
Playwright) against a real ``corral serve`` and a real LlamaIndex host
(``corral.workflows.llama``, over HTTP in this process): Release on a run idle for far
less than its delay has its host release it, seen on the page as ``released``; Resume
has a host restore it, seen as ``running`` again with its Release button back; the
events name the operator."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, expect

import corral
from corral.types import Client
from corral.workflows.llama import LlamaHost
from tests.integration.test_dashboard_browser import _console, _log_in

# The fixtures: the browser and a corral serve process (imported to be used here).
from tests.integration.test_dashboard_browser import browser as browser
from tests.integration.test_dashboard_browser import served as served
from tests.support.backends.http import TOKEN
from tests.support.worker_app import wait_for
from tests.support.workflow_app import hitl

pytestmark = pytest.mark.slow

LIVE = 5000  # ms: a host's poll (50 ms), then the page's stream


@contextmanager
def hosting(c: Client, host: str = "wf-host") -> Iterator[LlamaHost]:
    """A LlamaIndex host serving ``hitl`` on its own event loop in a thread, until the
    block ends (then its idle runs are released, as on any stop)."""
    h = LlamaHost(c, {"hitl": hitl}, host=host)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        await h.run(stop)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        wait_for(h.ready.is_set, 10, what="the host ready")
        yield h
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        assert not thread.is_alive(), "the host did not stop"
        loop.close()


def test_release_and_resume_on_the_page(browser: Browser, served: str) -> None:
    with corral.connect(served, token=TOKEN) as c, hosting(c):
        c.configure(idle_release_after=3600)
        run = c.run_workflow("hitl", topic="from-the-page")
        wait_for(lambda: c.get_handler(run).idle_since, 10, what="the run idle")
        page = browser.new_page()
        messages = _console(page)
        _log_in(page, served)
        status = page.locator(f'#workflows tr[data-run="{run}"] td.status')
        expect(status).to_have_text("running", timeout=LIVE)
        page.get_by_role("button", name=f"Release {run}", exact=True).click()
        expect(page.locator("#workflow-action")).to_contain_text(f"Asked wf-host to release {run}")
        expect(status).to_have_text("released", timeout=LIVE)  # the host let it go
        released = c.get_handler(run)
        assert released.released_at is not None and released.idle_since is not None
        assert released.released_at - released.idle_since < 60  # of its 3600 s delay
        page.get_by_role("button", name=f"Resume {run}", exact=True).click()
        expect(page.locator("#workflow-action")).to_contain_text(f"Resumed {run}")
        expect(status).to_have_text("running", timeout=LIVE)  # restored, waiting again
        expect(page.get_by_role("button", name=f"Release {run}", exact=True)).to_be_visible()
        back = c.get_handler(run)
        assert (back.status, back.host, back.resumes) == ("running", "wf-host", 1)
        actors = [(e.kind, e.data["actor"]) for e in c.events() if e.kind.endswith("_requested")]
        assert actors == [
            ("workflow_release_requested", "operator"),
            ("workflow_resume_requested", "operator"),
        ]
        assert messages == []
