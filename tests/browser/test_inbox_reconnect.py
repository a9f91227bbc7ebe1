"""The inbox badge's socket comes back by itself (R-NT4): while the web process is down, the page
tries again after 0.5, 1, 2 and 4 s, then every 5 s; once it is started again, a question asked
afterwards reaches the nav count of the page that was open all along, without a page load; and
a drop after that is tried again after 0.5 s. A service of its own: this module restarts its web
process."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.browser.test_inbox import ask_then_plan, nav_count
from tests.support.service_processes import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

# The inbox.js schedule: the first retry after 0.5 s, each next one after twice as long, at most 5 s.
RETRY_DELAYS_MS = [500, 1000, 2000, 4000, 5000, 5000]
# A timer never fires early; this covers two clocks' rounding (performance.now against the timer's).
EARLY_MS = 20

# When each inbox socket the page makes is created, opened and closed, by the page's own clock.
RECORD_SOCKETS = """
window.__inboxSockets = [];
const PageWebSocket = window.WebSocket;
window.WebSocket = class extends PageWebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    if (!String(url).includes("/ws/inbox/")) return;
    const record = { created: performance.now(), opened: null, closed: null };
    window.__inboxSockets.push(record);
    this.addEventListener("open", () => { record.opened = performance.now(); });
    this.addEventListener("close", () => { record.closed = performance.now(); });
  }
};
"""


def sockets(page) -> list[dict]:
    return page.evaluate("window.__inboxSockets")


def retry_delays(records: list[dict]) -> list[float]:
    """How long the page waited after each socket closed before making the next."""
    return [after["created"] - before["closed"] for before, after in zip(records, records[1:], strict=False)]


def wait_for(page, expression: str, timeout: float, what: str) -> None:
    """Polled from here: the page's CSP forbids the eval Playwright's wait_for_function needs."""
    wait_until(lambda: page.evaluate(expression), timeout, what, interval=0.1)


def wait_for_sockets(page, count: int, timeout: float) -> list[dict]:
    wait_for(page, f"window.__inboxSockets.length >= {count}", timeout, f"{count} inbox sockets")
    return sockets(page)


def test_the_badge_reconnects_with_growing_delays_after_the_web_restarts(live, new_page):
    ask_then_plan(live, "Sea or mountains?", ["Sea", "Mountains"])
    page = new_page()
    page.context.add_init_script(RECORD_SOCKETS)
    log_in(page, "bob")
    expect(nav_count(page)).to_be_hidden()
    wait_for(page, "window.__inboxSockets.length === 1 && window.__inboxSockets[0].opened !== null", 15, "the socket")
    page.evaluate("window.__sameDocument = true")  # a page load would clear it

    service = live.service
    service.kill(service.web)
    # The connected socket, then one failed try after each delay while nothing listens.
    down = wait_for_sockets(page, 1 + len(RETRY_DELAYS_MS), timeout=sum(RETRY_DELAYS_MS) / 1000 + 10)
    screenshot(page, "inbox-reconnecting.png")
    service.start_web()
    service.wait_web()

    delays = retry_delays(down[: 1 + len(RETRY_DELAYS_MS)])
    print("retry delays (ms):", [round(delay) for delay in delays])
    # Each at least its own delay and shorter than the next one's (twice as long, or the cap).
    for delay, expected in zip(delays, RETRY_DELAYS_MS, strict=True):
        assert expected - EARLY_MS <= delay < max(2 * expected, expected + 1000), delays
    assert all(record["opened"] is None for record in down[1 : 1 + len(RETRY_DELAYS_MS)])

    wait_for(page, "window.__inboxSockets.slice(1).some((socket) => socket.opened !== null)", 20, "a reconnection")
    live.start_trip("bob")
    expect(nav_count(page)).to_have_text("1", timeout=20_000)
    expect(page).to_have_title("(1) Runs · Skill Runner")
    assert page.evaluate("window.__sameDocument === true")
    screenshot(page, "inbox-reconnected.png")

    # Connected again, the schedule starts over: the next drop is tried again after 0.5 s.
    before = len(sockets(page))
    service.kill(service.web)
    again = wait_for_sockets(page, before + 1, timeout=10)
    assert RETRY_DELAYS_MS[0] - EARLY_MS <= retry_delays(again[before - 1 :])[0] < 2 * RETRY_DELAYS_MS[0]
    service.start_web()
