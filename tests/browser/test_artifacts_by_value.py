"""R-OU1 on the run page: the bundled study-notes skill returns its files by value (a path of the
agent's choosing); the page lists them as links under artifacts/, each opens in the browser and
downloads on request."""

from __future__ import annotations

import json
import time

import pytest

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

NOTES = "# Tides\n\n- Two a day\n- Pulled by the moon\n"


def test_files_returned_by_value_are_listed_and_downloadable_on_the_run_page(live, new_page):
    live.engine.script(
        {
            "files": {"drafts/tides.md": NOTES, "drafts/terms.txt": "neap: the smallest tide\n"},
            "message": json.dumps({"title": "Tides", "notes": "drafts/tides.md", "glossary": "{cwd}/drafts/terms.txt"}),
        }
    )
    token = live.token("alice")
    status, body = live.service.request(
        "POST", "/v1/jobs", token, {"skill_id": "study-notes", "engine": "codex", "input": {"topic": "tides"}}
    )
    assert status == 200, body
    request_id = body["request_id"]
    deadline = time.monotonic() + 60
    while live.run_status("alice", request_id) in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live.run_status("alice", request_id) == "succeeded"

    page = new_page()
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    links = page.locator("#artifacts a.artifact-link")
    links.first.wait_for()
    assert sorted(links.all_inner_texts()) == ["terms.txt", "tides.md"]
    assert "artifacts/tides.md" in page.locator("#result-section").inner_text()  # the answer, rewritten
    screenshot(page, "artifacts-by-value.png")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download tides.md").click()
    assert open(download.value.path(), encoding="utf-8").read() == NOTES
