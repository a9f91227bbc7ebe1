"""Links and polish (issue 30, item 5) in real Chromium: styled error pages with navigation, the
favicon, the admin's branding, visible usage columns, search and indented JSON, "View on site",
and the runs list on a phone with its status first."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def test_error_pages_and_the_favicon(live, new_page):
    page = new_page()
    log_in(page, "alice")
    response = page.goto("/runs/00000000-0000-0000-0000-000000000000/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    page.get_by_role("link", name="Start a run").click()
    expect(page.get_by_role("heading", name="New run")).to_be_visible()
    page.goto("/no/such/page/")
    screenshot(page, "53-not-found.png")
    icon = page.request.get("/favicon.ico")
    assert icon.ok and icon.headers["content-type"].startswith("image/svg+xml")

    open_forbidden_page(page)
    expect(page.get_by_role("navigation", name="Ways on")).to_be_visible()
    screenshot(page, "64-forbidden.png")


def open_forbidden_page(page) -> None:
    """As someone who is not staff, send the skills page the install form only staff see (403)."""
    page.goto("/skills/")
    csrf_token = next(cookie["value"] for cookie in page.context.cookies() if cookie["name"] == "csrftoken")
    with page.expect_navigation() as navigation:
        page.evaluate(
            """(token) => {
                const form = Object.assign(document.createElement("form"), {method: "post", action: "/skills/"});
                form.append(Object.assign(document.createElement("input"), {name: "csrfmiddlewaretoken", value: token}));
                document.body.append(form);
                form.submit();
            }""",
            csrf_token,
        )
    assert navigation.value.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")


def test_the_error_pages_fit_a_phone(live, new_page):
    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "alice")
    assert phone.goto("/no/such/page/").status == 404
    expect(phone.get_by_role("heading", level=1)).to_have_text("Page not found")
    assert_fits_the_phone(phone)
    screenshot(phone, "65-not-found-phone.png")
    open_forbidden_page(phone)
    assert_fits_the_phone(phone)
    screenshot(phone, "66-forbidden-phone.png")


def assert_fits_the_phone(phone) -> None:
    """Nothing scrolls sideways, and the way back into the site shows without scrolling."""
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    for link in phone.get_by_role("navigation", name="Ways on").get_by_role("link").all():
        expect(link).to_be_in_viewport()


def test_the_admin_shows_usage_searches_skills_and_links_the_site(live, new_page):
    live.engine.script(
        {
            "message": json.dumps({"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}),
            "files": {"artifacts/haiku.md": "a\nb\nc\n"},
            "usage": {"input_tokens": 1234, "output_tokens": 56},
        }
    )
    token = live.token("alice")
    status, created = live.service.request(
        "POST", "/v1/jobs", token, {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}
    )
    assert status == 200, created
    request_id = created["request_id"]
    live.service.wait_for_status(token, request_id, {"succeeded"})

    page = new_page()  # 1280 px wide
    log_in(page, "root")
    page.goto("/admin/runs/run/?q=haiku-writer")
    expect(page.locator("#site-name")).to_have_text("Skill Runner administration")
    expect(page.locator("#searchbar_helptext")).to_contain_text("skill ids and names")
    row = page.locator("#result_list tbody tr", has_text=request_id[:8])
    expect(row).to_have_count(1)
    # Every column in sight: the list's box scrolls nothing sideways, and its last column ends
    # inside the box (cut off, it would still end before 1280 px, under the filters).
    results = page.locator("#changelist .results")
    assert results.evaluate("box => box.scrollWidth <= box.clientWidth")
    visible = results.bounding_box()
    last_column = page.locator("#result_list thead th").last.bounding_box()
    assert visible is not None and last_column is not None
    assert last_column["x"] + last_column["width"] <= visible["x"] + visible["width"] <= 1280, (last_column, visible)
    expect(page.locator("#result_list thead th").last).to_have_class(re.compile(r"\bcolumn-created_at\b"))
    expect(row.locator("td.field-tokens")).to_have_text("1290")
    screenshot(page, "54-admin-runs.png")

    row.get_by_role("link", name=request_id[:8]).click()
    expect(page.locator(".field-input_formatted pre.readonly-json")).to_have_text('{\n  "topic": "sea"\n}')
    screenshot(page, "55-admin-run.png")
    page.get_by_role("link", name="View on site").click()
    expect(page).to_have_url(f"{live.url}/runs/{request_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded")


def test_the_runs_list_on_a_phone_shows_the_status_first(live, new_page):
    live.engine.script(
        {"message": json.dumps({"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Why?"}})}
    )
    request_id = live.start_trip("bob")
    live.service.wait_for_status(live.token("bob"), request_id, {"waiting_user"})
    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "bob")
    first_cell = phone.locator("table.runs tbody tr").first.locator("td").first
    expect(first_cell).to_have_text("Waiting for you")
    expect(first_cell).to_be_in_viewport()
    screenshot(phone, "56-runs-list-phone.png")
    live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("bob"))
