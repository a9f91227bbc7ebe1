"""Real Chromium against the real service: daphne + a worker in subprocesses on a file database.

Nothing here uses the pytest-django test database: the service owns its own data dir, and the
browser reaches it only over HTTP and websockets, as a person would.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_codex import FakeCodex
from tests.support.service_processes import REPO, ServiceProcesses

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = REPO / "test-output" / "screenshots"
PASSWORDS = {"alice": "alice-password-123", "bob": "bob-password-123", "root": "root-password-123"}
STAFF = {"root"}
ACTION_TIMEOUT_MS = 15_000

CREATE_USERS = (
    "from django.contrib.auth import get_user_model\n"
    "User = get_user_model()\n"
    "for name, password in {passwords!r}.items():\n"
    "    staff = name in {staff!r}\n"
    "    user, _ = User.objects.get_or_create(username=name)  # alice comes with the database (TEMPLATE_USERS)\n"
    "    user.set_password(password)\n"
    "    user.is_staff = user.is_superuser = staff\n"
    "    user.save()\n"
)


# The installed engine CLIs' versions, as the new-run form asks them (enginehost.choice).
ASK_ENGINE_VERSIONS = (
    "from engines.registry import ENGINE_NAMES\n"
    "from enginehost.config import detected_versions\n"
    "detected_versions(ENGINE_NAMES)\n"
)


class Live:
    """The running service, the scripted engine it uses, and API tokens per user."""

    def __init__(self, service: ServiceProcesses, engine: FakeCodex):
        self.service = service
        self.engine = engine
        self.url = service.url
        self._tokens: dict[str, str] = {}

    def token(self, username: str) -> str:
        if username not in self._tokens:
            self._tokens[username] = self.service.token(username)
        return self._tokens[username]

    def start_trip(self, username: str) -> str:
        return self.service.start_trip(self.token(username))

    def answered_trip(self, username: str, answer: str = "Oslo") -> str:
        """A trip-planner run that asked its first question (interaction 1), had it answered and
        succeeded, as the engine's script has it play; its request id."""
        token = self.token(username)
        request_id = self.start_trip(username)
        self.service.wait_for_status(token, request_id, {"waiting_user"})
        reply = {"interaction_id": 1, "response": answer}
        self.service.request("POST", f"/v1/jobs/{request_id}/interaction/reply", token, reply)
        self.service.wait_for_status(token, request_id, {"succeeded"})
        return request_id

    def run_status(self, username: str, request_id: str) -> str:
        return self.service.request("GET", f"/v1/jobs/{request_id}", self.token(username))[1]["status"]


@pytest.fixture(scope="session")
def engine_probes(tmp_path_factory) -> Path:
    """The engine CLIs' answers to `--version`, asked once in the session and given to each
    module's service, as a long-running installation keeps them (DATA_DIR/engine-probes).
    Otherwise each module's first new-run form asked the Node CLIs: seconds of CPU each, so on
    a loaded machine the page outlasted the browser's 15 s."""
    asker = ServiceProcesses(tmp_path_factory.mktemp("engine-probes"))
    try:
        asker.manage("shell", "-c", ASK_ENGINE_VERSIONS)
    finally:
        asker.stop()
    return asker.data_dir / "engine-probes"


@pytest.fixture(scope="module")
def live(tmp_path_factory, engine_probes) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("browser-live")
    (root / "engine").mkdir()
    engine = FakeCodex(root / "engine", root / "data")
    env = {
        "SKILLRUNNER_CODEX_BIN": str(engine.binary),
        "SKILLRUNNER_CODEX_MODEL": "gpt-5-codex",
        # The settings page's webhooks deliver to a receiver on loopback (R-NT2 refuses it otherwise).
        "SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE": "true",
    }
    service = ServiceProcesses(root / "data", env=env)
    shutil.copytree(engine_probes, service.data_dir / "engine-probes")
    try:
        service.start()
        service.manage("shell", "-c", CREATE_USERS.format(passwords=PASSWORDS, staff=STAFF))
        yield Live(service, engine)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def chromium():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make system-packages` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, timeout=60_000
    )
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()


@pytest.fixture
def new_page(chromium, live):
    """Pages in separate browser contexts (separate cookie jars), closed after the test."""
    contexts = []

    def open_page(viewport: dict | None = None, **options):
        """`options` go to the browser context (a reader's timezone_id, java_script_enabled …)."""
        context = chromium.new_context(
            base_url=live.url, viewport=viewport or {"width": 1280, "height": 900}, accept_downloads=True, **options
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(ACTION_TIMEOUT_MS)
        return page

    yield open_page
    for context in contexts:
        context.close()


def log_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORDS[username])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


def screenshot(page, name: str, element: str | None = None) -> None:
    """The whole page, or only the element `element` (a selector) shows, at full size."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    if element is None:
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    else:
        page.locator(element).screenshot(path=str(SCREENSHOTS / name))
