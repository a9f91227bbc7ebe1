"""An automated accessibility pass (issue 30): axe-core, evaluated in every page of the site (and
the admin's run pages) at desktop and phone widths, finds no violation of moderate impact or worse.

axe-core is vendored under tests/browser/vendor/axe-core (its licence beside it) and evaluated
through the browser's debugging protocol, so the pages keep their Content-Security-Policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

AXE = (Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js").read_text()
REPORTED = ("moderate", "serious", "critical")
WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
ASK = {
    "ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": "Oslo or Lisbon?", "options": ["Oslo", "Lisbon"]}
}
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}


def violations(page) -> list[str]:
    """Each violation of moderate impact or worse axe finds in the page as it is now, with where."""
    page.evaluate(AXE)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{violation['id']} ({violation['impact']}): {violation['help']} at "
        + json.dumps([node["target"] for node in violation["nodes"]][:5])
        for violation in result["violations"]
        if violation["impact"] in REPORTED
    ]


@pytest.fixture(scope="module")
def runs(live):
    """A run waiting for an answer and a finished one with an artifact, both alice's."""
    token = live.token("alice")
    live.engine.script(
        {"tools": 1, "reasoning": "Two cities fit.", "message": "Both are lovely.\n\n" + json.dumps(ASK)},
        {
            "message": json.dumps({**PLAN, "__SKILL_DONE__": True}),
            "files": {"artifacts/plan.md": "# Oslo\n\nFjord walk.\n"},
        },
    )
    finished = live.answered_trip("alice")
    waiting = live.start_trip("alice")
    live.service.wait_for_status(token, waiting, {"waiting_user"})
    yield {"waiting": waiting, "finished": finished}
    live.service.request("POST", f"/v1/jobs/{waiting}/cancel", token)


def pages(runs) -> dict[str, str]:
    return {
        "runs": "/",
        "choose-skill": "/runs/new/",
        "new-run": "/runs/new/haiku-writer/",
        "run-waiting": f"/runs/{runs['waiting']}/",
        "run-finished": f"/runs/{runs['finished']}/",
        "artifact": f"/runs/{runs['finished']}/files/artifacts/plan.md",
        "inbox": "/inbox/",
        "skills": "/skills/",
        "settings": "/settings/",
        "not-found": "/no/such/page/",
        "admin": "/admin/",
        "admin-runs": "/admin/runs/run/",
        "admin-run": f"/admin/runs/run/{runs['finished']}/change/",
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_has_a_violation_of_moderate_impact_or_worse(live, new_page, runs, width):
    found = {}
    login = new_page(WIDTHS[width])
    login.goto("/accounts/login/")
    found["login"] = violations(login)

    page = new_page(WIDTHS[width])
    log_in(page, "root")  # staff: the admin and the skills page's install form too
    alice = new_page(WIDTHS[width])
    log_in(alice, "alice")  # the runs are hers: her view of them, the inbox with its question
    for name, path in pages(runs).items():
        viewer = page if name.startswith("admin") or name in ("skills", "not-found") else alice
        viewer.goto(path)
        if name == "run-waiting":
            expect(viewer.get_by_label("Your answer")).to_be_visible()
        elif name == "run-finished":
            expect(viewer.locator(".artifact-preview h2")).to_have_text("Oslo")
            viewer.get_by_role("heading", name="Engine logs").click()
            expect(viewer.locator("#logs-turns .log-line").first).to_be_visible()
            viewer.get_by_label("Find").fill("type")  # hits marked, the current one set apart
            expect(viewer.locator("#logs-hits")).to_contain_text(" of ")
        elif name == "settings":  # a revoked token folded away, a new one's key with its copy button
            for token_name in (f"axe {width}", f"axe {width} again"):
                viewer.get_by_label("Name", exact=True).fill(token_name)
                viewer.get_by_role("button", name="Create a token").click()
                expect(viewer.get_by_role("button", name="Copy the new token's key")).to_be_visible()
                if token_name == f"axe {width}":
                    viewer.once("dialog", lambda dialog: dialog.accept())
                    viewer.get_by_role("button", name=f"Revoke token {token_name}").click()
                    expect(viewer.locator(".messages")).to_contain_text("Token revoked")
            viewer.locator("details.ended-tokens summary").click()
        elif name == "inbox":
            expect(viewer.locator("#questions .question")).to_have_count(1)
        found[name] = violations(viewer)
    screenshot(alice, f"61-accessibility-{width}-last-page.png")
    failures = {name: problems for name, problems in found.items() if problems}
    assert not failures, json.dumps(failures, indent=2)
