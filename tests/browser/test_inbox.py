"""The inbox and its live badge in real Chromium (R-NT4): two runs answered from the inbox, the
nav count and tab title following another tab's run as it starts asking, and the browser
notification, asked for with a click, announcing a question while the tab is hidden."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}

# Lets a test hide the tab (headless Chromium never does) and records the notifications shown.
PAGE_HOOKS = """
window.__hidden = false;
window.__notifications = [];
Object.defineProperty(document, "visibilityState", { get: () => (window.__hidden ? "hidden" : "visible") });
const RealNotification = window.Notification;
window.Notification = class extends RealNotification {
  constructor(title, options) {
    super(title, options);
    window.__notifications.push({ title, body: options && options.body });
  }
};
"""


def ask_then_plan(live, prompt: str, options: list[str]) -> None:
    ask = {"ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": prompt, "options": options}}
    live.engine.script(
        {"message": json.dumps(ask)},
        {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )


def nav_count(page):
    return page.get_by_role("navigation", name="Main").locator("#inbox-count")


def test_inbox_answers_two_runs_in_place(live, new_page):
    ask_then_plan(live, "Which city first?", ["Oslo", "Lisbon"])
    token = live.token("alice")
    first = live.start_trip("alice")
    live.service.wait_for_status(token, first, {"waiting_user"})
    second = live.start_trip("alice")
    live.service.wait_for_status(token, second, {"waiting_user"})

    page = new_page()
    log_in(page, "alice")
    expect(nav_count(page)).to_have_text("2")
    page.get_by_role("navigation", name="Main").get_by_role("link", name=re.compile("Inbox")).click()
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    cards = page.locator("#questions .question")
    expect(cards).to_have_count(2)
    expect(cards.nth(0).locator(".question-run")).to_have_attribute("href", f"/runs/{first}/#reply")  # oldest first
    expect(page).to_have_title("(2) Inbox · Skill Runner")
    screenshot(page, "inbox-two-questions.png")

    first_card = page.locator(f'#questions .question[data-key="{first}:1"]')
    first_card.get_by_role("button", name="Lisbon").click()
    expect(first_card).to_contain_text("Answered. The run goes on.")
    second_card = page.locator(f'#questions .question[data-key="{second}:1"]')
    second_card.get_by_label("Your answer").fill("Oslo, in spring")
    second_card.get_by_label("Your answer").press("Enter")
    expect(page.locator("#inbox-empty")).to_be_visible(timeout=20_000)
    expect(nav_count(page)).to_be_hidden()
    expect(page).to_have_title("Inbox · Skill Runner")
    screenshot(page, "inbox-all-answered.png")

    live.service.wait_for_status(token, first, {"succeeded"})
    live.service.wait_for_status(token, second, {"succeeded"})
    answers = [
        live.service.request("GET", f"/v1/jobs/{rid}/interaction/history", token)[1]["interactions"][0]["response"]
        for rid in (first, second)
    ]
    assert answers == ["Lisbon", "Oslo, in spring"]


def test_badge_follows_another_tabs_run_and_notifies_while_hidden(live, new_page):
    ask_then_plan(live, "Sea or mountains?", ["Sea", "Mountains"])
    watcher = new_page()
    watcher.context.add_init_script(PAGE_HOOKS)
    watcher.context.grant_permissions(["notifications"], origin=live.url)
    log_in(watcher, "bob")
    expect(nav_count(watcher)).to_be_hidden()
    expect(watcher).to_have_title("Runs · Skill Runner")

    # The user's other tab starts a run from the form; this tab is in the background meanwhile.
    watcher.evaluate("window.__hidden = true")
    other_tab = watcher.context.new_page()
    other_tab.goto("/runs/new/trip-planner/")
    other_tab.get_by_label("Traveller").fill("Bob")
    other_tab.get_by_role("button", name="Start run").click()
    expect(other_tab.locator(".entry.question")).to_contain_text("Sea or mountains?", timeout=20_000)

    expect(nav_count(watcher)).to_have_text("1")
    expect(watcher).to_have_title("(1) Runs · Skill Runner")
    expect(watcher.get_by_role("link", name="Inbox, 1 question waiting")).to_be_visible()
    notifications = watcher.evaluate("window.__notifications")
    assert notifications == [{"title": "Trip planner asks", "body": "Sea or mountains?"}]
    watcher.evaluate("window.__hidden = false")
    screenshot(watcher, "inbox-badge-live.png")

    # Answered from that tab: the badge goes back to nothing, and a visible tab is not notified.
    other_tab.get_by_role("button", name="Sea").click()
    expect(nav_count(watcher)).to_be_hidden(timeout=20_000)
    expect(watcher).to_have_title("Runs · Skill Runner")
    assert len(watcher.evaluate("window.__notifications")) == 1


def test_notifications_are_asked_for_with_a_click(live, new_page):
    page = new_page()
    log_in(page, "root")
    page.goto("/inbox/")
    button = page.get_by_role("button", name="Notify me on this device")
    expect(button).to_be_visible()
    assert page.evaluate("Notification.permission") == "default"  # nothing asked on page load
    screenshot(page, "inbox-notification-prompt.png")

    page.context.grant_permissions(["notifications"], origin=live.url)
    button.click()
    expect(button).to_be_hidden()
    expect(page.locator("#notify-state")).to_contain_text("This device will show a notification")
    screenshot(page, "inbox-notifications-on.png")


def start_trip_for(live, traveller: str, **options) -> str:
    body = {
        "skill_id": "trip-planner",
        "engine": "codex",
        "input": {"traveller": traveller},
        "runtime_options": {"execution_mode": "interactive", **options},
    }
    status, created = live.service.request("POST", "/v1/jobs", live.token("alice"), body)
    assert status == 200, created
    live.service.wait_for_status(live.token("alice"), created["request_id"], {"waiting_user"})
    return created["request_id"]


def test_cards_tell_runs_apart_confirm_answers_and_lead_to_the_answer_box(live, new_page):
    """Issue 30, item 2: two runs of one skill asking the same thing."""
    prose = "Autumn is lovely in both; I can plan either."
    ask = {
        "ask_user": {
            "interaction_id": 1,
            "kind": "choose_one",
            "prompt": "Where this weekend?",
            "options": ["Oslo", "Lisbon"],
        }
    }
    live.engine.script(
        {"message": prose + "\n\n" + json.dumps(ask)},
        {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    alices = start_trip_for(live, "Alice")
    carols = start_trip_for(live, "Carol", interactive_require_user_reply=False, session_timeout_sec=3600)

    page = new_page()
    log_in(page, "alice")
    page.goto("/inbox/")
    first = page.locator(f'#questions .question[data-key="{alices}:1"]')
    second = page.locator(f'#questions .question[data-key="{carols}:1"]')
    expect(first.locator(".question-id")).to_have_text(alices[:8])
    expect(first.locator(".question-values")).to_have_text("traveller: Alice")
    expect(second.locator(".question-values")).to_have_text("traveller: Carol")
    expect(first.locator(".said-text")).to_have_text(prose)
    expect(first.locator(".question-waited")).to_have_text(re.compile(r"waiting (less than a minute|\d+ min)"))
    expect(first.locator(".question-deadline")).to_be_hidden()  # a strict run simply waits
    expect(second.locator(".question-deadline")).to_contain_text("the agent decides by itself")
    screenshot(page, "47-inbox-with-context.png")

    second.get_by_role("button", name="Lisbon").click()
    confirmation = page.locator("#sent-answers li")
    expect(confirmation).to_contain_text(f"Answer sent to Trip planner {carols[:8]}: “Lisbon”")
    expect(second).to_have_count(0, timeout=10_000)
    expect(confirmation).to_have_count(1)  # it stays after the card has gone
    expect(confirmation.get_by_role("link", name="Open the run")).to_have_attribute("href", f"/runs/{carols}/")
    screenshot(page, "48-inbox-answer-confirmed.png")

    first.get_by_role("link", name="Open the run").click()
    expect(page).to_have_url(f"{live.url}/runs/{alices}/#reply")
    expect(page.get_by_label("Your answer")).to_be_focused()
    # What the agent said stays its message; the envelope that ended it is the question, once.
    expect(page.locator("#conversation .entry.assistant:not(.question) .text")).to_have_text([prose])
    expect(page.locator("#conversation .entry.question .text")).to_have_text(["Where this weekend?"])
    screenshot(page, "62-reply-focused-from-inbox.png")

    # Cancel from the card, after saying yes.
    page.goto("/inbox/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    first.get_by_role("button", name="Cancel the run").click()
    expect(page.locator(".messages")).to_contain_text(f"Trip planner {alices[:8]} was canceled.")
    expect(page.locator("#inbox-empty")).to_be_visible()
    assert live.run_status("alice", alices) == "canceled"
    assert asked == ["Cancel this run? The agent is stopped and the run cannot continue."]

    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "alice")
    third = start_trip_for(live, "Dave")
    phone.goto("/inbox/")
    expect(phone.locator(".question-values")).to_have_text("traveller: Dave")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "49-inbox-phone.png")
    live.service.request("POST", f"/v1/jobs/{third}/cancel", live.token("alice"))


def test_the_emailed_link_puts_the_cursor_in_the_answer_box(live, new_page):
    ask_then_plan(live, "Sea or mountains?", ["Sea", "Mountains"])
    request_id = start_trip_for(live, "Erin")
    page = new_page()
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/#reply")  # as question.txt links it
    expect(page.locator(".entry.question")).to_contain_text("Sea or mountains?")
    expect(page.get_by_label("Your answer")).to_be_focused()
    screenshot(page, "63-reply-focused-from-email.png")
    page.goto(f"/runs/{request_id}/")  # without it, the page leaves focus alone
    expect(page.locator(".entry.question")).to_contain_text("Sea or mountains?")
    expect(page.get_by_label("Your answer")).not_to_be_focused()
    live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("alice"))


def test_an_answer_a_proxy_refuses_says_so_and_can_be_sent_again(live, new_page):
    ask_then_plan(live, "Which city first?", ["Oslo", "Lisbon"])
    request_id = start_trip_for(live, "Frank")
    page = new_page()
    log_in(page, "alice")
    page.goto("/inbox/")
    # A proxy in front answers the post with its own page, not the API's JSON, once.
    page.route(
        "**/inbox/",
        lambda route: route.fulfill(status=502, content_type="text/html", body="<h1>Bad Gateway</h1>"),
        times=1,
    )
    card = page.locator(f'#questions .question[data-key="{request_id}:1"]')
    card.get_by_role("button", name="Lisbon").click()
    expect(card.locator(".answer-error")).to_have_text("The answer could not be sent. (HTTP_502)")
    card.get_by_role("button", name="Lisbon").click()
    expect(card).to_contain_text("Answered. The run goes on.")
    live.service.wait_for_status(live.token("alice"), request_id, {"succeeded"})
