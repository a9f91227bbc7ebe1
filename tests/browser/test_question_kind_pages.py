"""Every question kind answered naturally in real Chromium, at desktop and phone widths: buttons
for choose_one (the text box gone when the agent allows only its options), yes/no for confirm, a
form checked before sending for fill_fields, a file picker with drag and drop for upload_files,
an explicit acknowledgement for risk_ack; on the run page and in the inbox, with axe finding
nothing of moderate impact or worse, and the admin showing the answer as read."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.browser.test_accessibility import WIDTHS, violations

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}
QUESTIONS = {
    "choose_one": {
        "prompt": "Which tone should the plan use?",
        "options": ["formal", {"label": "Casual", "value": "casual"}],
        "allow_free_text": False,
    },
    "confirm": {"prompt": "Shall I add a day trip to Bergen?"},
    "fill_fields": {
        "prompt": "A few details for the booking:",
        "fields": [
            {"name": "traveller", "label": "Traveller's name", "required": True},
            {"name": "nights", "label": "Nights", "type": "integer", "required": True, "hint": "between 1 and 14"},
            {"name": "arrival", "label": "Arrival", "type": "date"},
            {"name": "email", "label": "E-mail for the tickets", "type": "email"},
            {"name": "vegetarian", "label": "Vegetarian meals", "type": "boolean"},
            {"name": "notes", "label": "Anything else", "type": "textarea"},
        ],
    },
    "upload_files": {
        "prompt": "Please send your passport scan.",
        "files": [{"name": "passport", "accept": ".pdf", "required": True, "hint": "a PDF of the photo page"}],
    },
    "risk_ack": {
        "prompt": "Book the non-refundable fare?",
        "risk": "The ticket cannot be changed or refunded: 240 EUR are lost if you cannot travel.",
    },
}


def waiting_on(live, kind: str) -> str:
    ask = {"ask_user": {"interaction_id": 1, "kind": kind, **QUESTIONS[kind]}}
    live.engine.script(
        {"message": json.dumps(ask)},
        {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    token = live.token("alice")
    request_id = live.start_trip("alice")
    live.service.wait_for_status(token, request_id, {"waiting_user"})
    return request_id


def history(live, request_id: str) -> list[dict]:
    token = live.token("alice")
    live.service.wait_for_status(token, request_id, {"succeeded"})
    return live.service.request("GET", f"/v1/jobs/{request_id}/interaction/history", token)[1]["interactions"]


def open_run(new_page, width: str, request_id: str):
    page = new_page(WIDTHS[width])
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/#reply")
    expect(page.locator("#reply-form")).to_be_visible()
    return page


def answered(page, text: str) -> None:
    expect(page.locator(".entry.reply .text")).to_have_text(text)
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)


def drop_files(page, selector: str, files: list[tuple[str, str, str]]) -> None:
    """Drags files (name, type, content) onto `selector` as a person dragging them from the desktop."""
    page.evaluate(
        """([selector, files]) => {
          const transfer = new DataTransfer();
          files.forEach(([name, type, content]) => transfer.items.add(new File([content], name, { type })));
          const zone = document.querySelector(selector);
          zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: transfer, bubbles: true, cancelable: true }));
          zone.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
        }""",
        [selector, files],
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_choose_one_offers_only_its_options_when_the_agent_says_so(live, new_page, width):
    request_id = waiting_on(live, "choose_one")
    page = open_run(new_page, width, request_id)
    buttons = page.get_by_role("group", name="Suggested answers").get_by_role("button")
    expect(buttons).to_have_text(["formal", "Casual → casual"])
    expect(page.locator("#reply-text")).to_be_hidden()
    expect(buttons.first).to_be_focused()  # came from a #reply link: the first answer has the focus
    assert violations(page) == []
    screenshot(page, f"kinds-choose-one-{width}.png")
    buttons.nth(1).click()
    answered(page, "casual")
    assert history(live, request_id)[0]["response"] == "casual"


@pytest.mark.parametrize("width", WIDTHS)
def test_confirm_is_answered_yes_or_no(live, new_page, width):
    request_id = waiting_on(live, "confirm")
    page = open_run(new_page, width, request_id)
    yes_no = page.get_by_role("group", name="Yes or no")
    expect(yes_no.get_by_role("button")).to_have_text(["Yes", "No"])
    expect(page.get_by_label("Or answer in your own words")).to_be_visible()
    assert violations(page) == []
    screenshot(page, f"kinds-confirm-{width}.png")
    yes_no.get_by_role("button", name="No").click()
    answered(page, "No")
    expect(page.locator(".entry.note.answered")).to_contain_text("Answered: No")
    assert history(live, request_id)[0]["response"] == {"confirmed": False}


@pytest.mark.parametrize("width", WIDTHS)
def test_a_form_is_checked_before_sending_and_its_answer_read_in_the_admin(live, new_page, width):
    request_id = waiting_on(live, "fill_fields")
    page = open_run(new_page, width, request_id)
    form = page.get_by_role("group", name="The agent's form")
    expect(form.get_by_label("Traveller's name (required)")).to_be_focused()
    expect(form.get_by_label("Nights (required)")).to_have_attribute("type", "number")
    expect(form.get_by_label("Arrival")).to_have_attribute("type", "date")
    expect(form.get_by_text("between 1 and 14")).to_be_visible()
    assert violations(page) == []
    screenshot(page, f"kinds-fill-fields-{width}.png")

    form.get_by_label("Nights (required)").fill("2.5")
    form.get_by_label("E-mail for the tickets").fill("not an address")
    form.get_by_role("button", name="Send the form").click()
    expect(form.get_by_label("Traveller's name (required)")).to_have_attribute("aria-invalid", "true")
    expect(form.locator(".field-error:visible")).to_have_text(
        ["Fill this in.", "Enter a whole number.", "Enter an e-mail address."]
    )
    expect(form.get_by_label("Traveller's name (required)")).to_be_focused()
    assert violations(page) == []
    screenshot(page, f"kinds-fill-fields-errors-{width}.png")
    assert live.run_status("alice", request_id) == "waiting_user"  # nothing was sent

    form.get_by_label("Traveller's name (required)").fill("Alice <b>Liddell</b>")
    form.get_by_label("Nights (required)").fill("3")
    form.get_by_label("Arrival").fill("2027-05-01")
    form.get_by_label("E-mail for the tickets").fill("alice@example.org")
    form.get_by_label("Vegetarian meals").check()
    form.get_by_label("Anything else").fill("window seat\nnear the front")
    form.get_by_label("E-mail for the tickets").press("Enter")  # Enter in a field sends the form
    answered(
        page,
        "traveller: Alice <b>Liddell</b>\nnights: 3\narrival: 2027-05-01\nemail: alice@example.org\n"
        'vegetarian: true\nnotes: "window seat\\nnear the front"',
    )
    expect(page.locator(".entry.reply b")).to_have_count(0)  # the person's text stays text
    assert history(live, request_id)[0]["response"] == {
        "fields": {
            "traveller": "Alice <b>Liddell</b>",
            "nights": 3,
            "arrival": "2027-05-01",
            "email": "alice@example.org",
            "vegetarian": True,
            "notes": "window seat\nnear the front",
        }
    }
    screenshot(page, f"kinds-fill-fields-answered-{width}.png")

    admin = new_page(WIDTHS[width])
    log_in(admin, "root")
    admin.goto(f"/admin/runs/run/{request_id}/change/")
    expect(admin.locator(".readable-answer")).to_contain_text("traveller: Alice <b>Liddell</b>\nnights: 3")
    screenshot(admin, f"kinds-admin-readable-answer-{width}.png", element="#interactions-group")


@pytest.mark.parametrize("width", WIDTHS)
def test_files_are_picked_or_dropped_checked_and_sent_through_the_file_reply(live, new_page, width):
    request_id = waiting_on(live, "upload_files")
    page = open_run(new_page, width, request_id)
    files = page.get_by_role("group", name="Files to send")
    expect(files.locator(".file-slots")).to_have_text("passport — required · .pdf · a PDF of the photo page")
    expect(files.get_by_label("Choose files")).to_have_attribute("accept", ".pdf")
    assert violations(page) == []
    screenshot(page, f"kinds-upload-files-{width}.png")

    drop_files(page, ".drop-zone", [("notes.txt", "text/plain", "hello")])
    expect(files.get_by_role("list", name="Chosen files")).to_contain_text("notes.txt (5 B)")
    files.get_by_role("button", name="Send files").click()
    expect(files.get_by_role("alert")).to_have_text("notes.txt is not a kind of file asked for (.pdf).")
    files.get_by_role("button", name="Remove notes.txt").click()
    drop_files(page, ".drop-zone", [("passport.pdf", "application/pdf", "%PDF-1.7 photo page")])
    files.get_by_label("Choose files").set_input_files(
        [{"name": "visa.pdf", "mimeType": "application/pdf", "buffer": b"%PDF-1.7 visa"}]
    )
    expect(files.get_by_role("list", name="Chosen files").get_by_role("listitem")).to_have_count(2)
    page.get_by_label("Message (sent with the files, or alone)").fill("Both pages")
    screenshot(page, f"kinds-upload-files-chosen-{width}.png")
    files.get_by_role("button", name="Send files").click()
    answered(page, "Both pages\n\nFiles: passport.pdf, visa.pdf")
    response = history(live, request_id)[0]["response"]
    assert response["text"] == "Both pages"
    assert [(f["name"], f["size_bytes"]) for f in response["files"]] == [("passport.pdf", 19), ("visa.pdf", 13)]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_risk_is_acknowledged_explicitly(live, new_page, width):
    request_id = waiting_on(live, "risk_ack")
    page = open_run(new_page, width, request_id)
    risk = page.get_by_role("group", name="Acknowledge the risk")
    expect(risk.locator(".risk-statement")).to_have_text(QUESTIONS["risk_ack"]["risk"])
    assert violations(page) == []
    screenshot(page, f"kinds-risk-ack-{width}.png")
    risk.get_by_role("button", name="Go ahead", exact=True).click()
    expect(risk.get_by_role("alert")).to_have_text("Tick the box to acknowledge the risk first.")
    assert live.run_status("alice", request_id) == "waiting_user"
    risk.get_by_label("I understand the risk and want to go ahead").check()
    risk.get_by_role("button", name="Go ahead", exact=True).click()
    answered(page, "I acknowledge the risk; go ahead.")
    assert history(live, request_id)[0]["response"] == {"acknowledged": True}


def test_the_inbox_answers_each_kind_in_place(live, new_page):
    runs = {kind: waiting_on(live, kind) for kind in ("confirm", "fill_fields", "upload_files")}
    phone = new_page(WIDTHS["phone"])
    page = new_page(WIDTHS["desktop"])
    for viewer in (phone, page):
        log_in(viewer, "alice")
        viewer.goto("/inbox/")
        for request_id in runs.values():
            expect(viewer.locator(f'#questions .question[data-key="{request_id}:1"]')).to_be_visible()
    # A question arriving while the inbox is open gets its controls too (the inbox socket's card).
    runs["risk_ack"] = waiting_on(live, "risk_ack")
    for viewer, width in ((phone, "phone"), (page, "desktop")):
        risk_card = viewer.locator(f'#questions .question[data-key="{runs["risk_ack"]}:1"]')
        expect(risk_card.get_by_role("group", name="Acknowledge the risk")).to_be_visible(timeout=20_000)
        assert violations(viewer) == []
        screenshot(viewer, f"kinds-inbox-{width}.png")

    def card(kind: str):
        return page.locator(f'#questions .question[data-key="{runs[kind]}:1"]')

    card("confirm").get_by_role("button", name="Yes").click()
    expect(page.locator("#sent-answers")).to_contain_text("“Yes”")

    form = card("fill_fields").get_by_role("group", name="The agent's form")
    form.get_by_role("button", name="Send the form").click()
    expect(form.locator(".field-error:visible")).to_have_text(["Fill this in.", "Fill this in."])
    form.get_by_label("Traveller's name (required)").fill("Alice")
    form.get_by_label("Nights (required)").fill("2")
    form.get_by_role("button", name="Send the form").click()
    expect(page.locator("#sent-answers")).to_contain_text("“the form”")

    card("upload_files").get_by_label("Choose files").set_input_files(
        [{"name": "passport.pdf", "mimeType": "application/pdf", "buffer": b"%PDF-1.7"}]
    )
    card("upload_files").get_by_role("button", name="Send files").click()
    expect(page.locator("#sent-answers")).to_contain_text("“passport.pdf”")

    risk = card("risk_ack")
    risk.get_by_role("button", name="Don't go ahead").click()
    expect(page.locator("#sent-answers > li")).to_have_count(4)
    expect(page.locator("#questions .question")).to_have_count(0, timeout=20_000)
    screenshot(page, "kinds-inbox-answered.png")

    responses = {kind: history(live, request_id)[0]["response"] for kind, request_id in runs.items()}
    assert responses["confirm"] == {"confirmed": True}
    assert responses["fill_fields"] == {"fields": {"traveller": "Alice", "nights": 2, "vegetarian": False}}
    assert (responses["upload_files"]["text"], [f["name"] for f in responses["upload_files"]["files"]]) == (
        "",
        ["passport.pdf"],
    )
    assert responses["risk_ack"] == {"acknowledged": False}
