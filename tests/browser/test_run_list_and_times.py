"""The runs list a reader can scan, times in the reader's zone and Markdown line breaks kept
(issue 41, items 7, 11 and 10), in real Chromium at desktop and phone widths."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.browser.test_run_page import haiku_turn

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

# The haiku as an author writes it: plain line breaks, no Markdown hard-break marks.
PLAIN_HAIKU = "# Sea\n\ngrey waves fold\na gull leans on the wind\nsalt on the lantern\n"
# A zone 5 h 30 min from UTC: every rewritten time differs from the server's.
READER_ZONE = "Asia/Kolkata"


def start_haiku(live, topic: str, *, cached: bool = False) -> str:
    """A finished haiku run; a `cached` one reuses an earlier identical run's result, so the
    engine is not scripted for it."""
    if not cached:
        live.engine.script({**haiku_turn(), "files": {"artifacts/haiku.md": PLAIN_HAIKU}})
    status, body = live.service.request(
        "POST", "/v1/jobs", live.token("alice"),
        {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": topic}},
    )  # fmt: skip
    assert status == 200, body
    finished = live.service.wait_for_status(live.token("alice"), body["request_id"], {"succeeded", "failed"})
    assert finished["status"] == "succeeded", finished
    return body["request_id"]


def test_the_runs_list_tells_runs_apart_in_the_readers_zone(live, new_page):
    first = start_haiku(live, "a <b>quiet</b> harbour at dawn")
    start_haiku(live, "a <b>quiet</b> harbour at dawn", cached=True)
    live.start_trip("alice")

    page = new_page(timezone_id=READER_ZONE)
    log_in(page, "alice")
    page.goto("/")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("topic: a <b>quiet</b> harbour at dawn")  # escaped text, not markup
    expect(rows.nth(1).locator(".badge.cached")).to_have_text("cached")
    expect(rows.nth(2).locator(".badge.cached")).to_have_count(0)
    expect(rows.nth(2).locator("td").last).to_have_text(re.compile(r"^\d+ s$"))
    expect(rows.nth(0).locator("time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d GMT\+5:30$"))
    screenshot(page, "41-7-run-list.png")

    page.get_by_label("Skill").select_option("trip-planner")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"skill=trip-planner"))
    expect(page.get_by_label("Skill")).to_have_value("trip-planner")

    page.goto(f"/runs/{first}/")
    started = page.locator(".run-facts time").first
    expect(started).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\+5:30$"))
    expect(page.locator("#run-finished")).to_have_text(re.compile(r":\d\d:\d\d GMT\+5:30$"))
    screenshot(page, "41-11-run-facts-local-zone.png", ".run-facts")

    phone = new_page({"width": 390, "height": 844}, timezone_id=READER_ZONE)
    log_in(phone, "alice")
    phone.goto("/")
    expect(phone.locator("table.runs tbody tr")).to_have_count(3)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390  # the table scrolls in its frame
    screenshot(phone, "41-7-run-list-phone.png")

    # Markdown keeps the author's line breaks: the haiku stays three lines (item 10).
    for reader in (page, phone):
        reader.goto(f"/runs/{first}/files/artifacts/haiku.md")
        verse = reader.locator(".markdown p")
        expect(verse.locator("br")).to_have_count(2)
        assert verse.inner_text().splitlines() == ["grey waves fold", "a gull leans on the wind", "salt on the lantern"]
    screenshot(page, "41-10-haiku-line-breaks.png")
    screenshot(phone, "41-10-haiku-line-breaks-phone.png")

    # Without script, the server's time with its zone.
    plain = new_page(java_script_enabled=False)
    log_in(plain, "alice")
    plain.goto(f"/runs/{first}/")
    expect(plain.locator(".run-facts time").first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
