"""The pages' scripts are native ES modules, no build step (issue 42): every file under static/js
loads in Chromium as a module from the site itself, under the site's Content-Security-Policy,
served as JavaScript, and the pages that use them log no error."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.support.service_processes import REPO

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

STATIC_JS = REPO / "static" / "js"
MODULES = sorted(path.relative_to(STATIC_JS).as_posix() for path in STATIC_JS.rglob("*.js"))
ASK = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where do you want to go?"}}
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}
IMPORT_ALL = """async (paths) => {
  const failed = [];
  for (const path of paths) {
    try { await import("/static/js/" + path); } catch (error) { failed.push(path + ": " + error); }
  }
  return failed;
}"""


def test_every_script_is_a_module_that_loads_without_errors(live, new_page):
    live.engine.script(
        {"message": json.dumps(ASK)},
        {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    request_id = live.answered_trip("alice")
    page = new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    served: dict[str, str] = {}
    page.on(
        "response",
        lambda response: (
            served.update({response.url.split("/static/js/", 1)[1]: response.headers["content-type"]})
            if "/static/js/" in response.url
            else None
        ),
    )
    log_in(page, "alice")
    for url in ["/inbox/", "/settings/", "/runs/new/haiku-writer/"]:
        page.goto(url)
        page.wait_for_load_state("load")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded")
    expect(page.locator("#connection")).to_have_text("This run has ended.")
    expect(page.locator(".entry.reply")).to_contain_text("Oslo")
    page.get_by_role("heading", name="Engine logs").click()
    expect(page.locator("details.log-turn")).to_have_count(2)
    screenshot(page, "modules-run-page.png")

    assert page.evaluate(IMPORT_ALL, MODULES) == []
    assert errors == []
    assert sorted(served) == MODULES  # each fetched as it is stored: no bundle, no other copy
    assert {kind.split(";")[0] for kind in served.values()} == {"text/javascript"}
