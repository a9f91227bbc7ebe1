"""Honest choices (issue 30, item 3) in real Chromium: the new-run form offers the engines that
can run here and shows the others disabled with their reason, the default model and the cache
switch; text of spaces alone is refused; an engine failure reads as an error with its code and a
hint, the engine's own words behind a toggle."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

STDERR = "Error: 401 Unauthorized: invalid API key for https://provider.example/v1\n"


def test_the_form_offers_only_engines_that_can_run(live, new_page):
    page = new_page()
    log_in(page, "alice")
    page.goto("/runs/new/haiku-writer/")
    engine = page.get_by_label("Engine")
    expect(engine).to_have_value("codex")
    expect(engine.locator("option[value=codex]")).to_be_enabled()
    for other in ("gemini", "claude", "iflow"):
        expect(engine.locator(f"option[value={other}]")).to_be_disabled()
        expect(engine.locator(f"option[value={other}]")).to_have_text(f"{other} (unavailable)")
    # A user is told what they can do about it; the operator's settings are for staff (issue 41).
    notes = page.locator("#engine-notes")
    expect(notes).to_contain_text("6 of this skill's engines are not set up on this service")
    expect(notes).not_to_contain_text("SKILLRUNNER_")
    expect(page.locator("#id_model_helptext")).to_have_text("Leave empty for the default model: gpt-5-codex.")
    expect(page.get_by_label("Model")).to_have_attribute("placeholder", "gpt-5-codex")
    expect(page.get_by_label("Reuse a cached result")).to_be_checked()

    page.get_by_label("Topic").fill("   ")
    page.get_by_role("button", name="Start run").click()
    expect(page.locator(".errorlist")).to_contain_text("Enter some text: spaces alone are not an answer.")
    expect(page).to_have_url(re.compile(r"/runs/new/haiku-writer/$"))
    screenshot(page, "50-new-run-honest-choices.png")

    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "alice")
    phone.goto("/runs/new/haiku-writer/")
    expect(phone.locator("#engine-notes")).to_be_visible()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "51-new-run-phone.png")

    staff = new_page()
    log_in(staff, "root")
    staff.goto("/runs/new/haiku-writer/")
    operator_notes = staff.locator("#engine-notes")
    expect(operator_notes).to_contain_text("iflow: not installed here")
    expect(operator_notes).to_contain_text("gemini: not configured: the operator sets SKILLRUNNER_GEMINI_API_KEY")


def test_an_engine_failure_reads_as_an_error_with_its_code_and_a_hint(live, new_page):
    live.engine.script({"stderr": STDERR, "exit": 1})
    page = new_page()
    log_in(page, "alice")
    page.goto("/runs/new/haiku-writer/")
    page.get_by_label("Topic").fill("rain")
    page.get_by_label("Reuse a cached result").uncheck()
    page.get_by_role("button", name="Start run").click()
    expect(page.locator("#run-status")).to_have_text("Failed", timeout=20_000)
    error = page.locator("#result-summary .run-error")
    expect(error.locator(".error-title")).to_have_text("The engine stopped with an error")
    expect(error.locator("code")).to_have_text("ENGINE_FAILED")
    expect(error).to_contain_text("API key, model or endpoint")
    message = error.locator("pre.error-message")
    expect(message).to_be_hidden()  # the raw words are one click away
    error.get_by_text("Details").click()
    expect(message).to_contain_text("401 Unauthorized: invalid API key")
    expect(page.locator(".run-facts")).to_contain_text("codex (default: gpt-5-codex)")
    # The conversation says it failed and how, not the CLI's stderr.
    expect(page.locator(".entry.note").last).to_have_text(re.compile(r"Failed \(ENGINE_FAILED\)\.$"))
    screenshot(page, "52-run-engine-failed.png")
