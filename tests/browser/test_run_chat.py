"""A person in real Chromium: log in, start an interactive run, see the question arrive live,
answer, see the result (R-UI2, R-UI3); owners only; reconnects lose and repeat nothing."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.support.service_processes import REPO

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

QUESTION = "Where do you want to go?"
ASK = {"ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": QUESTION, "options": ["Oslo", "Lisbon"]}}
PLAN = {
    "destination": "Oslo",
    "days": [{"day": 1, "activities": ["Fjord walk", "Opera house"]}],
    "plan_file": "artifacts/plan.md",
}
PLAN_FILE = "# Oslo weekend\n\n- Day 1: fjord walk, opera house\n"
LATENCY_REPORT = REPO / "test-output" / "ui-prompt-latency.txt"

# Records when the question first shows up, without touching the page's own code.
WATCH_QUESTION = """
window.__questionShownAt = null;
new MutationObserver(() => {
  if (window.__questionShownAt === null && document.querySelector(".entry.question")) {
    window.__questionShownAt = Date.now();
  }
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def nav(page, name: str):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def trip_script(live, *, first_turn_seconds: float = 0, second_turn_seconds: float = 0) -> None:
    live.engine.script(
        {"sleep": first_turn_seconds, "message": json.dumps(ASK)},
        {
            "sleep": second_turn_seconds,
            "message": json.dumps({**PLAN, "__SKILL_DONE__": True}),
            "files": {"artifacts/plan.md": PLAN_FILE},
        },
    )


def event_history(page, request_id: str) -> list[dict]:
    response = page.request.get(f"/v1/jobs/{request_id}/events/history?after_seq=0")
    assert response.ok
    return response.json()["events"]


def test_interactive_run_from_the_form_to_the_result(live, new_page):
    trip_script(live, first_turn_seconds=1.5)
    page = new_page()
    page.context.add_init_script(WATCH_QUESTION)

    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    screenshot(page, "01-login.png")
    log_in(page, "alice")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()

    nav(page, "New run").click()
    expect(page.get_by_role("heading", name="New run")).to_be_visible()
    screenshot(page, "03-choose-skill.png")
    page.get_by_role("link", name="Run Trip planner").click()
    expect(page.get_by_label("Mode", exact=True)).to_have_value("interactive")
    page.get_by_label("Traveller").fill("Alice")
    screenshot(page, "04-new-run-form.png")
    page.get_by_role("button", name="Start run").click()

    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    request_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    page.evaluate("window.__sameDocument = true")
    question = page.locator(".entry.question")
    expect(question).to_contain_text(QUESTION, timeout=20_000)
    assert page.evaluate("window.__sameDocument") is True  # it arrived without a reload
    expect(page.locator("#run-status")).to_have_text("Waiting for you")
    expect(page.get_by_role("group", name="Suggested answers").get_by_role("button")).to_have_text(["Oslo", "Lisbon"])
    expect(page.get_by_label("Your answer")).to_be_focused()
    screenshot(page, "05-run-waiting.png")

    waiting_at = next(
        e["ts"]
        for e in event_history(page, request_id)
        if e["kind"] == "status" and e["payload"]["to"] == "waiting_user"
    )
    shown_at_ms = page.evaluate("window.__questionShownAt")
    delay_ms = shown_at_ms - page.evaluate("(ts) => Date.parse(ts)", waiting_at)
    LATENCY_REPORT.parent.mkdir(parents=True, exist_ok=True)
    with LATENCY_REPORT.open("a") as report:
        report.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} waiting_user -> prompt shown: {delay_ms} ms\n")
    assert 0 <= delay_ms < 2000

    page.get_by_label("Your answer").fill("Oslo, please")
    page.get_by_label("Your answer").press("Enter")
    expect(page.locator(".entry.reply")).to_have_text(re.compile("Oslo, please"))
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator("#result-json")).to_contain_text('"destination": "Oslo"')
    expect(page.locator("#connection")).to_have_text("This run has ended.")
    expect(page.locator("#cancel-button")).to_be_hidden()
    screenshot(page, "06-run-succeeded.png")
    # The usage table's frame is its wrapper's border: no cell of its last row (the total) draws
    # a line of its own along it, the row's heading cell neither.
    expect(page.locator("#usage-rows tr")).to_have_count(3)  # two turns and their total
    bottom_borders = page.locator("#usage-rows tr:last-child > *").evaluate_all(
        "cells => cells.map((cell) => getComputedStyle(cell).borderBottomWidth)"
    )
    screenshot(page, "06-run-usage.png", element="#usage-section")
    assert bottom_borders == ["0px"] * 7, bottom_borders

    with page.expect_download() as download:
        page.get_by_role("link", name="Download plan.md").click()
    assert download.value.suggested_filename == "plan.md"
    assert open(download.value.path()).read() == PLAN_FILE

    nav(page, "Runs").click()
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    page.get_by_label("Status").select_option("succeeded")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    screenshot(page, "02-run-list.png")
    nav(page, "Skills").click()
    expect(page.get_by_role("heading", name="Trip planner")).to_be_visible()
    screenshot(page, "07-skills.png")

    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "alice")
    phone.goto(f"/runs/{request_id}/")
    expect(phone.locator("#run-status")).to_have_text("Succeeded")
    screenshot(phone, "08-run-on-a-phone.png")


def test_two_people_cannot_see_or_answer_each_others_runs(live, new_page):
    trip_script(live)
    alices_run = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), alices_run, {"waiting_user"})

    bob = new_page()
    log_in(bob, "bob")
    expect(bob.locator(f'a[href="/runs/{alices_run}/"]')).to_have_count(0)
    response = bob.goto(f"/runs/{alices_run}/")
    assert response.status == 404
    close_code = bob.evaluate(
        """(path) => new Promise((resolve) => {
            const socket = new WebSocket("ws://" + location.host + path);
            socket.onclose = (event) => resolve(event.code);
            setTimeout(() => resolve("no close"), 10000);
        })""",
        f"/ws/runs/{alices_run}/",
    )
    assert close_code == 4404
    bob.goto("/")
    status = bob.evaluate(
        """(path) => fetch(path, {
            method: "POST",
            headers: {"Content-Type": "application/json", "X-CSRFToken": document.cookie.match(/csrftoken=([^;]+)/)[1]},
            body: JSON.stringify({interaction_id: 1, response: "Bob was here"}),
        }).then((r) => r.status)""",
        f"/v1/jobs/{alices_run}/interaction/reply",
    )
    assert status == 404
    assert live.run_status("alice", alices_run) == "waiting_user"

    alice = new_page()
    log_in(alice, "alice")
    expect(alice.locator(f'a[href="/runs/{alices_run}/"]')).to_have_count(1)
    alice.goto(f"/runs/{alices_run}/")
    expect(alice.locator(".entry.question")).to_contain_text(QUESTION)
    expect(alice.locator(".entry.reply")).to_have_count(0)


def test_a_dropped_socket_reconnects_without_losing_or_repeating_events(live, new_page):
    trip_script(live, second_turn_seconds=3)
    request_id = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), request_id, {"waiting_user"})

    page = new_page()
    sockets: list[dict] = []

    def watch(socket):
        record = {"url": socket.url, "seqs": []}
        sockets.append(record)

        def on_frame(payload):
            message = json.loads(payload)
            if message["type"] == "event":
                record["seqs"].append(message["seq"])

        socket.on("framereceived", on_frame)

    page.on("websocket", watch)
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator(".entry.question")).to_contain_text(QUESTION)
    page.get_by_role("button", name="Lisbon").click()
    expect(page.locator("#run-status")).to_have_text("Running")

    # The web process dies mid-turn; the worker finishes the run while no socket is open.
    live.service.kill(live.service.web)
    expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
    screenshot(page, "09-reconnecting.png")
    live.service.wait_until(
        lambda: (
            "succeeded"
            in live.service.manage(
                "shell", "-c", f"from runs.models import Run; print(Run.objects.get(pk='{request_id}').status)"
            )
        ),
        30,
        "the run to finish while the web server is down",
        interval=0.5,
    )
    live.service.start_web()

    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=30_000)
    expect(page.locator("#connection")).to_have_text("This run has ended.")
    last_seq = event_history(page, request_id)[-1]["seq"]
    runs = [record for record in sockets if "/ws/runs/" in record["url"]]  # not the inbox socket
    received = [seq for record in runs for seq in record["seqs"]]
    assert sorted(received) == list(range(1, last_seq + 1)), received  # every event, each once
    assert len(runs) >= 2
    # Measured once the socket dropped: live activity events may still arrive just before it.
    seen_before_drop = max(seq for record in runs[:-1] for seq in record["seqs"])
    assert runs[-1]["url"].endswith(f"?after_seq={seen_before_drop}")
    assert min(runs[-1]["seqs"]) == seen_before_drop + 1
    expect(page.locator(".entry.reply")).to_have_text(re.compile("Lisbon"))
    expect(page.locator(".entry.question")).to_have_count(1)
    expect(page.locator("#result-json")).to_contain_text('"destination": "Oslo"')


def test_staff_installs_packages_and_audits_runs_in_the_admin(live, new_page):
    trip_script(live)
    request_id = live.start_trip("alice")
    live.service.wait_for_status(live.token("alice"), request_id, {"waiting_user"})

    page = new_page()
    log_in(page, "root")
    nav(page, "Skills").click()
    page.get_by_label("Skill package (.zip)").set_input_files(
        {"name": "broken.zip", "mimeType": "application/zip", "buffer": b"not a zip"}
    )
    page.get_by_role("button", name="Install").click()
    expect(page.locator(".errorlist")).to_contain_text("(ARCHIVE_INVALID)")
    screenshot(page, "10-skills-staff-upload-refused.png")

    expect(nav(page, "Admin")).to_have_attribute("href", "/admin/")
    page.goto("/admin/runs/run/")
    expect(page.locator("#result_list tbody tr").first).to_be_visible()
    screenshot(page, "11-admin-runs.png")
    page.goto(f"/admin/runs/run/{request_id}/change/")
    expect(page.get_by_role("heading", name="Interactions")).to_be_visible()
    expect(page.locator(".field-prompt").first).to_contain_text(QUESTION)
    expect(page.locator('input[name="_save"]')).to_have_count(0)
    screenshot(page, "12-admin-run-detail.png")


def test_a_repair_round_shows_as_fixing_the_answer(live, new_page):
    """R-RP1: the run page tells the person the answer is being fixed, with the problems found."""
    live.engine.script(
        {
            "message": json.dumps({**PLAN, "days": "one day", "__SKILL_DONE__": True}),
            "files": {"artifacts/plan.md": PLAN_FILE},
        },
        {"sleep": 3, "message": json.dumps({**PLAN, "__SKILL_DONE__": True})},
    )
    request_id = live.start_trip("alice")
    page = new_page()
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator("#run-status")).to_have_text("Fixing the answer (round 1)", timeout=20_000)
    note = page.locator(".entry.note.repair")
    expect(note).to_contain_text("fixing the answer (round 1 of 2)")
    note.locator("summary").click()
    expect(note.locator(".problems li")).to_contain_text("/days expected a value of type array")
    screenshot(page, "13-run-fixing-the-answer.png")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator("#warnings")).to_contain_text("OUTPUT_SCHEMA_REPAIR_CONVERGED")
    screenshot(page, "14-run-repaired.png")


REPORT_MD = (
    "# Oslo weekend\n\n| day | plan |\n|---|---|\n| 1 | fjord walk |\n\n"
    "<script>window.__pwned = true</script>\n\n![tracker](https://example.invalid/t.png)\n\n"
    "[safe link](https://example.org) and [bad link](javascript:alert(1))\n"
)


def test_activity_timeline_fills_while_the_turn_runs(live, new_page):
    """R-AC1/R-AC5: reasoning and tool calls appear live while the engine runs (the last tool
    holds the turn open until the test releases it); then the result as a table, the Markdown
    artifact rendered safely, per-turn usage; and the same page at phone width."""
    live.engine.script(
        {
            "reasoning": "The traveller wants Oslo; plan one day.",
            "tools": 3,
            "wait_for": "release",  # in the run dir: the sandboxed engine sees nothing else
            "files": {"artifacts/plan.md": REPORT_MD},
            "message": json.dumps({**PLAN, "__SKILL_DONE__": True}),
            "usage": {"input_tokens": 1200, "cached_input_tokens": 200, "output_tokens": 80},
        }
    )
    page = new_page()
    log_in(page, "alice")
    request_id = live.start_trip("alice")
    page.goto(f"/runs/{request_id}/")
    timeline = page.locator("details.activity .timeline")
    expect(timeline.locator(".step.tool.ok")).to_have_count(4, timeout=20_000)  # the file write + 3 commands
    running = timeline.locator(".step.tool.running")
    expect(running).to_have_count(1)
    expect(running).to_contain_text("wait for the release file")
    expect(timeline.locator(".step.reasoning")).to_contain_text("The traveller wants Oslo")
    expect(page.locator("#run-status")).to_have_text("Running")
    assert live.run_status("alice", request_id) == "running"  # the turn really is still going
    timeline.locator(".step.tool.ok").nth(1).get_by_text("Output").click()
    expect(timeline.locator(".step.tool.ok").nth(1).locator("pre")).to_have_text("step 0\n")
    screenshot(page, "20-activity-running.png")

    (live.service.data_dir / "runs" / request_id / "release").touch()
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    expect(timeline.locator(".step.tool.running")).to_have_count(0)
    expect(page.locator("#result-view table.kv")).to_contain_text("Oslo")
    expect(page.locator("#result-view table.records")).to_contain_text("Fjord walk")
    preview = page.locator(".artifact-preview")
    expect(preview.get_by_role("heading", name="Oslo weekend")).to_be_visible()
    expect(preview.locator("table")).to_contain_text("fjord walk")
    assert preview.locator("script, img").count() == 0
    assert preview.locator("a[href^='javascript']").count() == 0
    expect(preview.get_by_role("link", name="safe link")).to_have_attribute("rel", "noopener noreferrer nofollow")
    assert page.evaluate("window.__pwned === undefined")
    expect(page.locator("#usage-rows")).to_contain_text("1,200")
    expect(page.locator("details.activity .activity-usage")).to_contain_text("1,280 tokens")
    page.get_by_text("Raw JSON").click()
    expect(page.locator("#result-json")).to_contain_text('"destination": "Oslo"')
    screenshot(page, "21-activity-finished.png")

    phone = new_page(viewport={"width": 390, "height": 844})
    log_in(phone, "alice")
    phone.goto(f"/runs/{request_id}/")
    expect(phone.locator(".artifact-preview h2")).to_have_text("Oslo weekend")  # the page's h1 is its own
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "22-activity-phone.png")
