"""The admin as an auditor uses it (issue 41, item 14), in real Chromium: a run's effective
model, times to the second, and the interaction history of the selected runs exported."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

ASK = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Which city?"}}
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}


@pytest.mark.parametrize("width", [1280, 390])
def test_an_auditor_reads_a_run_and_exports_its_questions(live, new_page, width):
    token = live.token("alice")
    live.engine.script(
        {"message": json.dumps(ASK)},
        {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    request_id = live.start_trip("alice")
    live.service.wait_for_status(token, request_id, {"waiting_user"})
    live.service.request(
        "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "Oslo"}
    )
    live.service.wait_for_status(token, request_id, {"succeeded"})

    page = new_page({"width": width, "height": 900})
    log_in(page, "root")
    page.goto(f"/admin/runs/run/{request_id}/change/")
    expect(page.locator(".field-effective_model")).to_contain_text("gpt-5-codex (default)")
    expect(page.locator(".field-created_at .readonly")).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
    )
    screenshot(page, f"41-14-admin-run-{width}.png")

    page.goto("/admin/runs/run/")
    page.locator(f"input[name=_selected_action][value='{request_id}']").check()
    page.locator("select[name=action]").select_option("export_interactions_json")
    with page.expect_download() as download:
        page.get_by_role("button", name="Go").click()
    records = json.loads(download.value.path().read_text())["interactions"]
    assert [(r["run"], r["question"], r["answer"], r["answered_by"]) for r in records] == [
        (request_id, "Which city?", "Oslo", "alice")
    ]
    screenshot(page, f"41-14-admin-export-{width}.png")
