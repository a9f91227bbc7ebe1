"""A hostile skill package in real Chromium (R-FS3, R-FS4): script in every text field of the
package and of the agent's question; no script runs, no page breaks the CSP, the run still
works from the form to its result, and a quick reply shows the value it sends."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.support.hostile_skill import PAYLOAD, SKILL_ID, write_hostile_skill

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

ASK = {
    "ask_user": {
        "interaction_id": 1,
        "kind": "choose_one",
        "prompt": f"Question {PAYLOAD}",
        "options": [{"label": f"Keep {PAYLOAD}", "value": "delete everything"}, "Same"],
    }
}


def test_hostile_skill_runs_no_script_and_still_works(live, new_page, tmp_path):
    write_hostile_skill(tmp_path)
    live.service.manage("install_skill", str(tmp_path / SKILL_ID))
    live.engine.script({"message": json.dumps(ASK)}, {"message": json.dumps({"ok": True, "__SKILL_DONE__": True})})
    page = new_page()
    violations: list[str] = []
    page.on(
        "console",
        lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None,
    )
    log_in(page, "alice")

    for url in ["/skills/", "/runs/new/", f"/runs/new/{SKILL_ID}/"]:
        page.goto(url)
        expect(page.get_by_text(f"Description {PAYLOAD}").first).to_be_visible()
        assert page.evaluate("window.__xss") is None, url
    expect(page.get_by_text(f"Help {PAYLOAD}")).to_be_visible()
    expect(page.get_by_label(f"Title {PAYLOAD}")).to_have_value(PAYLOAD)
    page.get_by_label("Mode", exact=True).select_option("interactive")
    screenshot(page, "hostile-01-new-run-form.png")
    page.get_by_role("button", name="Start run").click()

    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    expect(page.locator(".entry.question")).to_contain_text(f"Question {PAYLOAD}", timeout=20_000)
    buttons = page.get_by_role("group", name="Suggested answers").get_by_role("button")
    expect(buttons).to_have_text([f"Keep {PAYLOAD} → delete everything", "Same"])
    screenshot(page, "hostile-02-question.png")
    buttons.first.click()
    expect(page.locator(".entry.reply")).to_contain_text("delete everything")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    assert page.evaluate("window.__xss") is None
    assert violations == []
