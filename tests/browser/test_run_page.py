"""The run page with context and control (issue 30, item 1), in real Chromium: the request and
its times, re-running with or without the cache, the logs, readable commands, linked artifact
fields opened in the browser, finished turns and answered questions; desktop and phone."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

HAIKU = {"topic": "sea", "haiku": ["grey waves fold", "a gull leans on the wind", "salt on the lantern"]}
HAIKU_FILE = "# Sea\n\ngrey waves fold  \na gull leans on the wind  \nsalt on the lantern\n"
SCRIPT = "printf 'line one\\nline two\\n' > notes.txt"
# Codex reports that call as the shell line it ran, quoted for a shell (backslashes doubled).
SCRIPT_AS_REPORTED = "/bin/bash -lc \"printf 'line one\\\\nline two\\\\n' > notes.txt\""


def haiku_turn() -> dict:
    return {
        "shell": SCRIPT,
        "shell_as": SCRIPT_AS_REPORTED,
        "files": {"artifacts/haiku.md": HAIKU_FILE},
        "message": json.dumps({**HAIKU, "haiku_file": "artifacts/haiku.md", "__SKILL_DONE__": True}),
    }


def run_id_of(page) -> str:
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def test_a_finished_run_shows_its_request_times_commands_logs_and_artifacts(live, new_page):
    live.engine.script(haiku_turn())
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    log_in(page, "alice")
    page.goto("/runs/new/haiku-writer/")
    page.get_by_label("Topic").fill("a quiet harbour at dawn")
    page.get_by_label("Mood").select_option("calm")
    page.get_by_role("button", name="Start run").click()
    first = run_id_of(page)
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)

    request = page.locator(".run-request")
    expect(request.locator("dt", has_text="Topic")).to_be_visible()
    expect(request).to_contain_text("a quiet harbour at dawn")
    expect(request).to_contain_text("calm")
    expect(page.locator("#finished-fact")).to_be_visible()
    expect(page.locator("#elapsed-label")).to_have_text("Took")
    expect(page.locator("#run-elapsed")).to_have_text(re.compile(r"^\d+ s$"))
    expect(page.locator(".entry.note time.at").first).to_have_text(re.compile(r"\d\d:\d\d:\d\d"))

    # The command as the agent wrote it, not Codex's quoting of it; copied as shown.
    page.locator("details.activity > summary").click()
    tool = page.locator(".step.tool", has=page.locator(".tool-command", has_text="notes.txt"))
    expect(tool.locator(".tool-command")).to_have_text(SCRIPT)
    tool.get_by_role("button", name="Copy the command").click()
    assert page.evaluate("navigator.clipboard.readText()") == SCRIPT
    expect(page.locator("details.activity.finished .activity-state")).to_have_text("finished")

    # The protocol's done flag is not part of the answer.
    structured = page.locator(".entry.assistant details.structured")
    structured.locator("summary").click()
    expect(structured.locator("pre")).to_contain_text('"haiku_file"')
    expect(structured.locator("pre")).not_to_contain_text("__SKILL_DONE__")

    # The artifact field is a link that opens the file as a page; one h1 per page.
    field = page.locator("#result-view").get_by_role("link", name="artifacts/haiku.md")
    expect(field).to_have_attribute("href", f"/runs/{first}/files/artifacts/haiku.md")
    expect(page.locator(".artifact-preview h2")).to_have_text("Sea")
    assert page.locator("h1").count() == 1
    expect(page.get_by_role("link", name="Download haiku.md")).to_have_attribute("download", "")

    page.get_by_role("heading", name="Engine logs").click()
    logs = page.locator("#logs-turns")
    expect(logs).to_contain_text('"type": "thread.started"')
    page.get_by_role("button", name="Prompt").click()
    expect(logs).to_contain_text("a quiet harbour at dawn")
    expect(page.get_by_role("link", name="Open the whole log")).to_have_attribute(
        "href", f"/v1/jobs/{first}/logs?attempt=1&stream=prompt"
    )
    screenshot(page, "40-run-page-finished.png")

    field.click()
    expect(page).to_have_url(f"{live.url}/runs/{first}/files/artifacts/haiku.md")
    expect(page.get_by_role("heading", level=1)).to_have_text("haiku.md")
    expect(page.get_by_role("heading", level=2)).to_have_text("Sea")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download").click()
    assert download.value.suggested_filename == "haiku.md"
    screenshot(page, "41-artifact-page.png")

    # Re-run allowing the cache: the identical earlier result, said so, with a link to its run.
    page.go_back()
    page.get_by_label("Reuse a cached result if there is one").check()
    page.get_by_role("button", name="Re-run").click()
    cached = run_id_of(page)
    assert cached != first
    expect(page.locator("#run-status")).to_have_text("Succeeded")
    note = page.locator(".cache-note")
    expect(note).to_contain_text("This result came from the cache")
    expect(note.get_by_role("link")).to_have_attribute("href", f"/runs/{first}/")
    expect(page.locator(".entry.note").last).to_contain_text("from the cache")
    screenshot(page, "42-run-from-cache.png")

    # Re-run fresh: the engine runs again.
    live.engine.script(haiku_turn())
    page.get_by_role("button", name="Re-run").click()
    fresh = run_id_of(page)
    assert fresh not in (first, cached)
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator(".cache-note")).to_have_count(0)
    expect(page.locator("details.activity")).to_have_count(1)

    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "alice")
    phone.goto(f"/runs/{first}/")
    expect(phone.locator("#run-status")).to_have_text("Succeeded")
    expect(phone.locator(".run-request")).to_contain_text("a quiet harbour at dawn")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "43-run-page-phone.png")


def test_a_waiting_run_counts_its_time_and_the_waiting_note_becomes_the_answer(live, new_page):
    ask = {
        "ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": "Where to?", "options": ["Oslo", "Lisbon"]}
    }
    plan = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}
    live.engine.script(
        {"tools": 1, "message": json.dumps(ask)},
        {"message": json.dumps({**plan, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    request_id = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), request_id, {"waiting_user"})
    page = new_page()
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator(".entry.question")).to_contain_text("Where to?")
    expect(page.locator("#elapsed-label")).to_have_text("Elapsed")
    before = page.locator("#run-elapsed").inner_text()
    expect(page.locator("#run-elapsed")).not_to_have_text(before, timeout=5_000)  # it ticks
    expect(page.locator("#finished-fact")).to_be_hidden()
    waiting = page.locator(".entry.note", has_text="Waiting for your answer.")
    expect(waiting).to_have_count(1)
    screenshot(page, "44-run-page-waiting.png")

    asked_at = waiting.locator("time.at").get_attribute("datetime")
    page.wait_for_timeout(1_100)  # the answer comes a clock second after the question
    page.get_by_role("button", name="Oslo").click()
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator(".entry.note.answered")).to_have_text(re.compile("Answered: Oslo"))
    # The note carries the answer's time, not the question's.
    _, history = live.service.request("GET", f"/v1/jobs/{request_id}/interaction/history", live.token("alice"))
    answered_at = datetime.fromisoformat(history["interactions"][0]["answered_at"])
    shown_at = page.locator(".entry.note.answered time.at").get_attribute("datetime")
    assert shown_at and asked_at
    assert datetime.fromisoformat(shown_at) == answered_at != datetime.fromisoformat(asked_at)
    expect(page.locator(".entry.note", has_text="Waiting for your answer.")).to_have_count(0)
    turns = page.locator("details.activity")
    expect(turns).to_have_count(2)
    expect(turns.nth(0)).to_have_class(re.compile("finished"))
    assert turns.nth(0).evaluate("(details) => details.open") is False
    marker = (
        turns.nth(0).locator(":scope > summary").evaluate("(summary) => getComputedStyle(summary, '::before').content")
    )
    assert marker == '"▸"'
    turns.nth(0).locator(":scope > summary").click()
    expect(turns.nth(0).locator(".step.tool")).to_have_count(1)
    screenshot(page, "45-run-page-answered.png")


def test_on_a_phone_the_reply_card_leaves_the_question_in_sight(live, new_page):
    ask = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "How many days?"}}
    live.engine.script({"tools": 2, "message": json.dumps(ask)})
    request_id = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), request_id, {"waiting_user"})
    phone = new_page({"width": 390, "height": 640})
    log_in(phone, "alice")
    phone.goto(f"/runs/{request_id}/")
    expect(phone.get_by_label("Your answer")).to_be_visible()
    waiting = phone.locator(".entry.note", has_text="Waiting for your answer.")
    expect(waiting).to_be_in_viewport()
    # The card sticks to the bottom of the screen: the newest entry is scrolled clear above it.
    card_top = phone.locator("#reply-form").evaluate("(form) => form.getBoundingClientRect().top")
    note_bottom = waiting.evaluate("(note) => note.getBoundingClientRect().bottom")
    assert note_bottom <= card_top
    screenshot(phone, "46-run-page-waiting-phone.png")
    live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("alice"))


def test_cancel_asks_first_then_stops_the_run(live, new_page):
    ask = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "How many days?"}}
    live.engine.script({"message": json.dumps(ask)})
    request_id = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), request_id, {"waiting_user"})
    page = new_page()
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Cancel run").click()
    assert asked == ["Cancel this run? The agent is stopped and the run cannot continue."]
    expect(page.locator("#run-status")).to_have_text("Waiting for you")
    assert live.run_status("alice", request_id) == "waiting_user"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("#run-status")).to_have_text("Canceled", timeout=10_000)
    assert live.run_status("alice", request_id) == "canceled"
