"""R-AC1/R-AC5 with the REAL Codex, Gemini CLI, Claude Code, Qwen Code, OpenCode and Kilo: a person watching the run page
sees the agent's tool call appear while it runs, then finish, before the turn ends.

The service (daphne + worker, sandbox on) runs each CLI against the scripted model server, as an
operator would configure it; the model's shell call holds the turn open until the test drops a
file in the run directory.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import CREATE_USERS, PASSWORDS, STAFF, Live, log_in, screenshot
from tests.support.engine_env import SERVICE_MODELS, SERVICE_URL_PATHS, require_engine
from tests.support.scripted_model_server import ScriptedModelServer
from tests.support.service_processes import ServiceProcesses

pytestmark = [pytest.mark.browser, pytest.mark.real_engine, pytest.mark.timeout(300)]

ENGINES = ("codex", "gemini", "claude", "qwen", "opencode", "kilo")
# No `timeout` wrapper: it makes its own process group, which Gemini's pseudo-terminal then stops.
HOLD_TOOL = {"shell": "until [ -f release.flag ]; do sleep 0.05; done; echo released"}
QUESTION = "Which city would you like to visit, and for how many days?"
# Kilo spends 12 s of CPU before its first model request (OpenCode 5, the others less): with the
# suite's four processes sharing two cores, its tool call once took longer than 60 s to show.
TOOL_CALL_SHOWN_MS = 150_000


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def live(tmp_path_factory, model_server) -> Iterator[Live]:
    """Overrides the browser suite's service: this one runs the real CLIs."""
    env = {}
    for engine in ENGINES:
        prefix = f"SKILLRUNNER_{engine.upper()}"
        env[f"{prefix}_BIN"] = str(require_engine(engine))
        env[f"{prefix}_BASE_URL"] = model_server.url + SERVICE_URL_PATHS.get(engine, "")
        env[f"{prefix}_API_KEY"] = "test-key-not-secret"
        env[f"{prefix}_MODEL"] = SERVICE_MODELS[engine]
    service = ServiceProcesses(tmp_path_factory.mktemp("browser-real") / "data", env=env)
    try:
        service.start()
        service.manage("shell", "-c", CREATE_USERS.format(passwords=PASSWORDS, staff=STAFF))
        yield Live(service, engine=None)
    finally:
        service.stop()


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_tool_call_shows_live_in_the_run_page(engine, live, model_server, new_page):
    model_server.set_script([HOLD_TOOL, {"text": QUESTION}])
    page = new_page()
    log_in(page, "alice")
    request_id = live.service.start_trip(live.token("alice"), engine)  # the finally below cancels it
    try:
        page.goto(f"/runs/{request_id}/")
        timeline = page.locator("details.activity .timeline")
        running = timeline.locator(".step.tool.running")
        expect(running).to_have_count(1, timeout=TOOL_CALL_SHOWN_MS)
        expect(running).to_contain_text("release.flag")
        expect(page.locator("#run-status")).to_have_text("Running")
        assert live.run_status("alice", request_id) == "running"  # the turn really is still going
        screenshot(page, f"30-real-{engine}-tool-running.png")

        (live.service.data_dir / "runs" / request_id / "release.flag").touch()
        expect(page.locator("#run-status")).to_have_text("Waiting for you", timeout=60_000)
        finished = timeline.locator(".step.tool.ok")
        expect(finished).to_have_count(1)
        expect(timeline.locator(".step.tool.running")).to_have_count(0)
        turn = page.locator("details.activity.finished")  # a finished turn folds up, marked so
        expect(turn.locator(".activity-state")).to_have_text("finished")
        turn.locator("> summary").click()
        finished.get_by_text("Output").click()
        expect(finished.locator("pre")).to_contain_text("released")
        expect(page.locator(".entry.question").last).to_contain_text("Which city")
        screenshot(page, f"31-real-{engine}-tool-finished.png")
    finally:
        live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("alice"))
