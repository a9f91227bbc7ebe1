"""Question emails across real processes (R-NT3): a worker killed in the middle of the SMTP send
loses nothing. The mail server holds the first message without accepting it; the worker sending
it is SIGKILLed; once its lease lapses, the worker started in its place sends the email, and the
owner gets it exactly once."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import pytest

from tests.support.service_processes import free_port, with_fake_codex

pytestmark = [pytest.mark.timeout(180)]

ASK = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where to?"}}
# Each SMTP phase may take 3 s; a dead sender's lease lapses 3 × 3 + 5 = 14 s after its claim.
TIMEOUT_SECONDS = "3"
OWNER_ADDRESS = "alice@example.org"

ROWS = (
    "import json\n"
    "from notifications.models import QuestionEmail\n"
    "print(json.dumps([[e.state, e.attempt_count, e.last_error] for e in QuestionEmail.objects.all()]))\n"
)


class HoldsTheFirstMessage:
    """An SMTP handler (aiosmtpd) that holds the first message it is sent, never accepting it
    (the sender is killed meanwhile), and accepts every later one."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.accepted: list[bytes] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        if not self.held.is_set():
            self.held.set()
            await asyncio.sleep(30)  # past the test's kill; the controller's stop cancels it
            return "451 4.3.0 not accepted"
        self.accepted.append(envelope.content)
        return "250 OK"


@pytest.fixture
def mail_server():
    from aiosmtpd.controller import Controller

    handler = HoldsTheFirstMessage()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    handler.url = f"smtp://127.0.0.1:{port}"
    yield handler
    controller.stop()


@pytest.fixture
def live(tmp_path, mail_server):
    service = with_fake_codex(
        tmp_path,
        {
            "EMAIL_URL": mail_server.url,
            "SKILLRUNNER_EMAIL_GRACE_SECONDS": "0",
            "SKILLRUNNER_EMAIL_TIMEOUT_SECONDS": TIMEOUT_SECONDS,
        },
    )
    yield service
    service.stop()


def test_worker_killed_mid_send_still_emails_the_question_exactly_once(live, mail_server):
    live.fake.script({"message": json.dumps(ASK)})
    live.start()
    live.manage(
        "shell",
        "-c",
        f"from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.filter(username='alice').update(email='{OWNER_ADDRESS}')",
    )
    token = live.token("alice")
    request_id = live.start_trip(token)
    live.wait_for_status(token, request_id, {"waiting_user"})

    # The email is in the middle of its SMTP conversation (the server holds it): kill the worker.
    assert mail_server.held.wait(30), "the question email never reached the mail server"
    live.kill(live.workers[0], signal.SIGKILL)
    live.start_worker()

    live.wait_until(lambda: mail_server.accepted, 60, "the email to be sent again once the lease lapsed")
    rows = live.wait_until(
        lambda: (
            (rows := json.loads(live.manage("shell", "-c", ROWS).strip().splitlines()[-1]))
            and rows[0][0] == "sent"
            and rows
        ),
        30,
        "the email to be recorded as sent",
    )
    assert rows == [["sent", 2, ""]]  # the killed attempt and the one that went out
    time.sleep(3)  # three supervisor ticks more: nothing else goes out
    (message,) = mail_server.accepted
    assert f"To: {OWNER_ADDRESS}".encode() in message and b"Where to?" in message
    assert live.wait_for_status(token, request_id, {"waiting_user"})["status"] == "waiting_user"
