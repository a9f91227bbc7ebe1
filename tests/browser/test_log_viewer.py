"""The engine-logs viewer (issue 41, What 3) in real Chromium: numbered lines, each turn a
block of its own, search with marked hits, next and previous and a count, a link to a line that
opens on it; a log past the shown size still loads only what is in view; log text stays text.
Desktop and phone."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS, log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

ASK = {
    "ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": "Oslo or Lisbon?", "options": ["Oslo", "Lisbon"]}
}
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}
# Markup in what the agent printed: shown as the characters it is, never made an element.
HOSTILE = '<img src="x" onerror="window.injected = 1"> the lantern'
# 4,000 tool calls print 8,000 lines, about 1.3 MB: more than the viewer is sent (1 MiB).
TOOLS = 4000


@pytest.fixture(scope="module")
def two_turns(live) -> str:
    """A finished run of two turns: a long first one that asks, a short second one."""
    live.engine.script(
        {"tools": TOOLS, "reasoning": HOSTILE, "message": "Both are lovely.\n\n" + json.dumps(ASK)},
        {
            "reasoning": "Oslo it is: light the lantern.",
            "message": json.dumps({**PLAN, "__SKILL_DONE__": True}),
            "files": {"artifacts/plan.md": "# Oslo\n\nFjord walk.\n"},
        },
    )
    return live.answered_trip("alice")


def open_logs(page, request_id: str) -> None:
    page.goto(f"/runs/{request_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded")
    page.get_by_role("heading", name="Engine logs").click()


def turn(page, number: int):
    return page.locator(f'details.log-turn[data-attempt="{number}"]')


def test_turns_fold_lines_are_numbered_and_a_long_log_builds_what_is_in_view(live, new_page, two_turns):
    page = new_page()
    log_in(page, "alice")
    open_logs(page, two_turns)
    expect(page.locator("details.log-turn")).to_have_count(2)
    expect(turn(page, 2)).to_have_attribute("open", "")  # the latest turn is open, the others folded
    expect(turn(page, 1)).not_to_have_attribute("open", "")
    second = turn(page, 2).locator(".log-line")
    expect(second.first.locator(".log-ln")).to_have_text("1")
    expect(second.first).to_have_id("logs-t2-stdout-L1")
    expect(turn(page, 2)).to_contain_text("Oslo it is: light the lantern.")
    screenshot(page, "41-20-logs-turns.png", "#logs")

    turn(page, 1).locator("summary").click()
    first = turn(page, 1)
    expect(first.locator(".log-turn-note")).to_contain_text("Showing the start of")
    expect(first.get_by_role("link", name="Open the whole log")).to_have_attribute(
        "href", f"/v1/jobs/{two_turns}/logs?attempt=1&stream=stdout"
    )
    summary = first.locator("summary").inner_text()
    lines = int(re.search(r"([\d,]+) lines", summary)[1].replace(",", ""))
    assert lines > 6000, summary
    built = first.locator(".log-line").count()
    assert 0 < built <= 1000, f"{built} of {lines} lines built before any scrolling"

    # The agent's markup is text (JSON-quoted, as the engine printed it).
    expect(first.locator("#logs-t1-stdout-L3")).to_contain_text(json.dumps(HOSTILE))
    assert first.locator("img").count() == 0 and page.evaluate("window.injected") is None

    # Another stream of the same turns.
    page.get_by_role("button", name="Prompt").click()
    expect(turn(page, 2).locator(".log-line").first).to_have_id("logs-t2-prompt-L1")
    expect(turn(page, 1)).to_have_attribute("open", "")  # the turns open stay open


def test_search_marks_hits_across_turns_and_moves_between_them(live, new_page, two_turns):
    page = new_page()
    log_in(page, "alice")
    open_logs(page, two_turns)
    expect(turn(page, 2).locator(".log-line").first).to_be_visible()
    search = page.get_by_label("Find")
    search.fill("step 2500")  # far down the long first turn, which is folded and not loaded yet
    hits = page.locator("#logs-hits")
    expect(hits).to_have_text("1 of 3")  # the call's command, then its command and output when done
    current = page.locator("mark.log-hit.current")
    expect(current).to_have_count(1)
    expect(current).to_have_text("step 2500")
    expect(current).to_be_in_viewport()
    expect(turn(page, 1)).to_have_attribute("open", "")
    first_row = current.locator("xpath=../..").get_attribute("id")
    screenshot(page, "41-21-logs-search.png", "#logs")

    page.get_by_role("button", name="Next match").click()
    expect(hits).to_have_text("2 of 3")
    expect(page.locator("mark.log-hit.current")).to_be_in_viewport()
    search.press("Enter")
    expect(hits).to_have_text("3 of 3")
    search.press("Enter")  # round to the first
    expect(hits).to_have_text("1 of 3")
    search.press("Shift+Enter")
    expect(hits).to_have_text("3 of 3")
    page.get_by_role("button", name="Previous match").click()
    expect(hits).to_have_text("2 of 3")
    assert page.locator("mark.log-hit.current").locator("xpath=../..").get_attribute("id") != first_row

    search.fill("lantern")  # one hit in each turn (the first's inside the agent's markup)
    expect(hits).to_have_text("1 of 2")
    expect(page.locator("mark.log-hit")).to_have_count(2)
    search.fill("no such words anywhere")
    expect(hits).to_have_text("No matches")
    expect(page.get_by_role("button", name="Next match")).to_be_disabled()
    search.fill("")
    expect(hits).to_have_text("")
    expect(page.locator("mark.log-hit")).to_have_count(0)


def test_a_link_to_a_line_opens_on_it(live, new_page, two_turns):
    page = new_page()
    log_in(page, "alice")
    open_logs(page, two_turns)
    page.get_by_label("Find").fill("step 1500")
    row = page.locator("mark.log-hit.current").locator("xpath=../..")
    row.locator(".log-ln").click()  # a click on its number sets the link
    anchor = row.get_attribute("id")
    assert re.fullmatch(r"logs-t1-stdout-L\d+", anchor)
    assert page.url.endswith(f"/runs/{two_turns}/#{anchor}")
    expect(row).to_have_class(re.compile(r"\btargeted\b"))
    link = page.url

    for width, name in ((1280, "41-22-logs-line-link.png"), (390, "41-23-logs-line-link-phone.png")):
        reader = new_page({"width": width, "height": 844})
        log_in(reader, "alice")
        reader.goto(link)
        line = reader.locator(f"#{anchor}")
        expect(line).to_have_class(re.compile(r"\btargeted\b"))
        expect(line).to_be_in_viewport()
        expect(reader.locator("#logs")).to_have_attribute("open", "")
        expect(line.locator(".log-lt")).to_contain_text("step 1500")
        assert reader.evaluate("document.documentElement.scrollWidth") <= width
        reader.screenshot(path=str(SCREENSHOTS / name))  # what the reader sees on arrival

    # A link to another stream's line shows that stream.
    reader.goto(f"/runs/{two_turns}/#logs-t2-prompt-L1")
    expect(reader.locator("#logs-t2-prompt-L1")).to_have_class(re.compile(r"\btargeted\b"))
    expect(reader.get_by_role("button", name="Prompt")).to_have_attribute("aria-pressed", "true")
