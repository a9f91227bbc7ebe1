"""The inbox badge's socket comes back by itself (R-NT4): after the web process is killed and
started again, a question asked afterwards still reaches the nav count of a page that was open
all along, without a page load. A service of its own: this module restarts its web process."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import log_in
from .test_inbox import ask_then_plan, nav_count

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def test_the_badge_reconnects_after_the_web_restarts(live, new_page):
    ask_then_plan(live, "Sea or mountains?", ["Sea", "Mountains"])
    page = new_page()
    log_in(page, "bob")
    expect(nav_count(page)).to_be_hidden()
    page.evaluate("window.__sameDocument = true")  # a page load would clear it

    service = live.service
    service.kill(service.web)
    service.start_web()
    service.wait_until(lambda: service._ping() == 204, 30, "the web server to answer again")
    live.start_trip("bob")

    expect(nav_count(page)).to_have_text("1", timeout=20_000)
    expect(page).to_have_title("(1) Runs · Skill Runner")
    assert page.evaluate("window.__sameDocument === true")
