"""Question emails (R-NT3): one per question after a grace period, to owners with an address who
have not opted out; text and HTML parts with the question, its options and links built from
SKILLRUNNER_PUBLIC_URL; sent through Django's email framework (locmem here, SMTP once)."""

from __future__ import annotations

import pytest
from django.core import mail

from notifications.email import claim_due_questions
from tests.interactive.helpers import ask_envelope, plan_done, reply, start
from tests.support.live_service import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

QUESTION = {"interaction_id": 1, "kind": "choose_one", "prompt": "Which <city>?", "options": ["Kyoto", "Osaka & Nara"]}


@pytest.fixture
def mailer(settings, alice):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.SKILLRUNNER_PUBLIC_URL = "https://runner.example.org"
    settings.SKILLRUNNER_EMAIL_GRACE_SECONDS = 3600
    alice.email = "alice@example.org"
    alice.save()
    return settings


@pytest.fixture
def waiting_run(api, install_skill, fake_codex):
    install_skill("trip-planner")
    fake_codex.script(ask_envelope(QUESTION), plan_done())
    return start(api)


def test_open_question_is_emailed_once_after_the_grace_period(mailer, waiting_run):
    assert claim_due_questions() == [] and mail.outbox == []  # within the grace period
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    assert len(claim_due_questions()) == 1
    assert claim_due_questions() == []  # one email per question
    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]
    assert message.subject == "[Skill Runner] trip-planner asks: Which <city>?"
    link = f"https://runner.example.org/runs/{waiting_run}/#reply"  # the run page focuses its answer box
    text = message.body
    assert "Which <city>?" in text and "- Kyoto" in text and "- Osaka & Nara" in text
    assert link in text and "https://runner.example.org/settings/" in text
    (html, mimetype), *_ = message.alternatives
    assert mimetype == "text/html"
    assert "Which &lt;city&gt;?" in html and "<li>Osaka &amp; Nara</li>" in html  # escaped
    assert f'href="{link}"' in html


def test_question_answered_within_the_grace_period_is_not_emailed(mailer, api, waiting_run):
    reply(api, waiting_run, 1, "Kyoto")
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    assert claim_due_questions() == [] and mail.outbox == []


def test_opted_out_or_addressless_owners_get_none(mailer, alice, waiting_run):
    from accounts.services import update_notification_settings

    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    update_notification_settings(alice, email="alice@example.org", email_questions=False)
    assert claim_due_questions() == []
    update_notification_settings(alice, email="", email_questions=True)
    assert claim_due_questions() == []
    assert mail.outbox == []


def test_settings_page_changes_address_and_opt_out(client, alice):
    client.force_login(alice)
    page = client.get("/settings/")
    assert page.status_code == 200 and 'name="email_questions"' in page.content.decode()
    assert "checked" in page.content.decode()  # on by default
    answer = client.post("/settings/", {"email": "a@example.org"})
    assert answer.status_code == 302
    alice.refresh_from_db()
    assert alice.email == "a@example.org" and alice.notification_settings.email_questions is False
    assert client.post("/settings/", {"email": "not an address"}).status_code == 200
    alice.refresh_from_db()
    assert alice.email == "a@example.org"


def test_smtp_delivery_to_a_local_server(mailer, waiting_run):
    """EMAIL_URL's SMTP backend against a real SMTP server on loopback (aiosmtpd)."""
    import environ
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    received = []

    class Collect(Message):
        def handle_message(self, message):
            received.append(message)

    port = free_port()
    controller = Controller(Collect(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        for name, value in environ.Env.email_url_config(f"smtp://127.0.0.1:{port}").items():
            setattr(mailer, name, value)
        mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
        assert len(claim_due_questions()) == 1
    finally:
        controller.stop()
    (message,) = received
    assert message["To"] == "alice@example.org"
    assert message["Subject"].startswith("[Skill Runner] trip-planner asks")
    parts = {
        part.get_content_type(): part.get_payload(decode=True).decode()
        for part in message.walk()
        if not part.is_multipart()
    }
    assert "Which <city>?" in parts["text/plain"] and "Which &lt;city&gt;?" in parts["text/html"]
