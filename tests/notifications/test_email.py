"""Question emails (R-NT3): one per question after a grace period, to owners with an address who
have not opted out; text and HTML parts with the question, its options and links built from
SKILLRUNNER_PUBLIC_URL; sent through Django's email framework (locmem here, SMTP once). An
outbox: a task lost on the way (the broker away, a task under an old name, a mail server down)
only delays the email, which is still sent exactly once."""

from __future__ import annotations

import pytest
from django.core import mail
from django.db import transaction

from notifications.email import offer_due_question_emails
from tests.support.conversations import ask_envelope, plan_done, reply, start
from tests.support.service_processes import free_port

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
    assert offer_due_question_emails() == 0 and mail.outbox == []  # within the grace period
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    assert offer_due_question_emails() == 1
    assert offer_due_question_emails() == 0  # one email per question
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
    assert offer_due_question_emails() == 0 and mail.outbox == []


def test_opted_out_or_addressless_owners_get_none(mailer, alice, waiting_run):
    from accounts.services import update_notification_settings

    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    update_notification_settings(alice, email="alice@example.org", email_questions=False)
    assert offer_due_question_emails() == 0
    update_notification_settings(alice, email="", email_questions=True)
    assert offer_due_question_emails() == 0
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
        assert offer_due_question_emails() == 1
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


def _sent_once(waiting_run):
    from notifications.models import QuestionEmail

    (row,) = QuestionEmail.objects.all()
    (message,) = mail.outbox
    assert row.state == "sent" and row.sent_at is not None and row.leased_until is None
    assert f"/runs/{waiting_run}/#reply" in message.body
    return row


def test_the_broker_away_when_offered_only_delays_the_email(mailer, waiting_run, monkeypatch):
    """The task never reaches the queue: the row stays pending and unleased, and the next tick,
    with the broker back, sends it; later ticks send nothing more."""
    from notifications import task_queue
    from notifications.models import QuestionEmail

    real_async_task = task_queue.async_task

    def broker_away(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    monkeypatch.setattr(task_queue, "async_task", broker_away)
    assert offer_due_question_emails() == 1 and offer_due_question_emails() == 1  # offered again, lost again
    row = QuestionEmail.objects.get()
    assert mail.outbox == [] and row.state == "pending" and row.attempt_count == 0 and row.leased_until is None
    monkeypatch.setattr(task_queue, "async_task", real_async_task)
    assert offer_due_question_emails() == 1
    assert offer_due_question_emails() == 0 and offer_due_question_emails() == 0
    assert _sent_once(waiting_run).attempt_count == 1


def test_a_task_queued_under_an_old_name_only_delays_the_email(mailer, waiting_run, monkeypatch):
    """Tasks queued by the previous release name `send_question_email`, which is gone: such a task
    fails without touching the row, and the next tick sends it under the new name."""
    from django_q.tasks import async_task

    from notifications import task_queue
    from notifications.models import QuestionEmail

    real_async_task = task_queue.async_task
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    monkeypatch.setattr(task_queue, "async_task", lambda *args, **kwargs: None)  # offered into the void
    assert offer_due_question_emails() == 1
    row = QuestionEmail.objects.get()
    with pytest.raises(ValueError, match="notifications.tasks.send_question_email is not defined"):
        async_task("notifications.tasks.send_question_email", row.interaction_id)  # what a worker records
    row.refresh_from_db()
    assert row.state == "pending" and row.attempt_count == 0 and mail.outbox == []
    monkeypatch.setattr(task_queue, "async_task", real_async_task)
    assert offer_due_question_emails() == 1
    _sent_once(waiting_run)


def test_a_sender_that_died_mid_send_is_replaced_once_its_lease_lapses(mailer, waiting_run, monkeypatch):
    """A sender leased the row and died (no outcome recorded): no one else sends while its lease
    holds; once it lapses, the next tick sends the email, once."""
    from datetime import timedelta

    from django.utils import timezone

    from notifications import outbox, task_queue
    from notifications.email import attempt_question_email
    from notifications.models import QuestionEmail

    real_async_task = task_queue.async_task
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    monkeypatch.setattr(task_queue, "async_task", lambda *args, **kwargs: None)
    offer_due_question_emails()
    row = QuestionEmail.objects.get()
    with transaction.atomic():  # what a sender does before it sends; then it is killed
        outbox.claim(QuestionEmail.objects.all(), row.pk, 60)
    monkeypatch.setattr(task_queue, "async_task", real_async_task)
    assert offer_due_question_emails() == 0 and attempt_question_email(row.pk) is None and mail.outbox == []
    QuestionEmail.objects.filter(pk=row.pk).update(leased_until=timezone.now() - timedelta(seconds=1))
    assert offer_due_question_emails() == 1
    assert _sent_once(waiting_run).attempt_count == 2


def test_a_question_answered_before_its_email_went_out_is_skipped(mailer, api, waiting_run, monkeypatch):
    from notifications import task_queue
    from notifications.email import attempt_question_email
    from notifications.models import QuestionEmail

    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    monkeypatch.setattr(task_queue, "async_task", lambda *args, **kwargs: None)
    offer_due_question_emails()
    reply(api, waiting_run, 1, "Kyoto")
    row = QuestionEmail.objects.get()
    assert attempt_question_email(row.pk).state == "skipped" and mail.outbox == []
    assert offer_due_question_emails() == 0


def test_a_mail_server_that_is_away_is_retried_on_the_schedule(mailer, waiting_run):
    """SMTP refused: the attempt is recorded and retried later, the same row; sent once it answers."""
    from notifications.email import attempt_question_email
    from notifications.models import QuestionEmail

    mailer.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    mailer.EMAIL_HOST, mailer.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    mailer.SKILLRUNNER_EMAIL_RETRY_BASE_SECONDS = 3600
    assert offer_due_question_emails() == 1
    row = QuestionEmail.objects.get()
    assert row.state == "pending" and row.attempt_count == 1 and "ConnectionRefused" in row.last_error
    assert offer_due_question_emails() == 0  # not due for an hour
    mailer.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    QuestionEmail.objects.update(next_attempt_at=row.created_at)
    assert attempt_question_email(row.pk).state == "sent"
    assert _sent_once(waiting_run).attempt_count == 2


@pytest.mark.parametrize(
    "question,shown,how",
    [
        ({"kind": "confirm"}, [], "Answer yes or no here"),
        (
            {
                "kind": "fill_fields",
                "fields": [{"name": "t", "label": "Title <i>", "required": True}, {"name": "year"}],
            },
            ["The form asks for:", "  - Title <i> (required)", "  - year"],
            "Fill in the form on the run page",
        ),
        (
            {
                "kind": "upload_files",
                "files": [{"name": "paper", "accept": ".pdf", "required": True, "hint": "the draft"}],
            },
            ["Files asked for:", "  - paper (required, .pdf, the draft)"],
            "Send the files from the run page",
        ),
        (
            {"kind": "risk_ack", "risk": "Deletes <all> notes."},
            ["Risk: Deletes <all> notes."],
            "Acknowledge or decline on the run page",
        ),
    ],
)
def test_each_kind_says_how_it_is_answered_and_links_to_the_page(
    mailer, api, install_skill, fake_codex, question, shown, how
):
    install_skill("trip-planner")
    fake_codex.script(ask_envelope({"interaction_id": 1, "prompt": "Q?", **question}), plan_done())
    request_id = start(api)
    mailer.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    assert offer_due_question_emails() == 1
    (message,) = mail.outbox
    lines = message.body.splitlines()
    for line in shown:
        assert line in lines, message.body
    link = f"https://runner.example.org/runs/{request_id}/#reply"
    assert f"{how}: {link}" in lines
    (html, _), *_ = message.alternatives
    assert f'<a href="{link}">{how}</a>' in html
    assert "<i>" not in html and "<all>" not in html  # the agent's words are escaped
