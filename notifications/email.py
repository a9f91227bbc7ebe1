"""Question emails (R-NT3): one per question, only for questions still open after a grace period,
to owners with an address who have not opted out; sent by the worker cluster.

An outbox (`outbox.py`, as webhook deliveries): the supervisor's tick writes a QuestionEmail row
for each question past its grace period, and offers every row due; a sender leases the row under
a row lock, sends, and marks it sent. A task lost on the way (the broker away, a worker killed
mid-send, a task queued under an old name) leaves the row pending, and the next tick offers it
again: at least once, and once as the owner sees it but for the case said in
`attempt_question_email`.
"""

from __future__ import annotations

import logging
import smtplib
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.db.models import F, QuerySet
from django.template.defaultfilters import truncatechars
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from kernel.links import public_url, run_page_url
from runs.models import Interaction, RunStatus

from . import outbox
from .models import QuestionEmail
from .task_queue import enqueue_question_email

logger = logging.getLogger(__name__)

SUBJECT_PROMPT_CHARS = 80


def _open_questions() -> QuerySet[Interaction]:
    """Questions a run waits on, whose owner has an address and wants these emails."""
    return (
        Interaction.objects.filter(
            run__status=RunStatus.WAITING_USER,
            run__pending_interaction_id=F("interaction_id"),
            answered_at__isnull=True,
        )
        .exclude(run__owner__email="")
        .exclude(run__owner__notification_settings__email_questions=False)
    )


def offer_due_question_emails(limit: int = 200) -> int:
    """Supervisor tick: an email row for each question open for longer than the grace period,
    written once however many workers tick at once; then every row due is offered."""
    cutoff = timezone.now() - timedelta(seconds=settings.SKILLRUNNER_EMAIL_GRACE_SECONDS)
    newly_due = _open_questions().filter(asked_at__lte=cutoff, question_email__isnull=True)
    now = timezone.now()
    QuestionEmail.objects.bulk_create(
        [QuestionEmail(interaction_id=pk, next_attempt_at=now) for pk in newly_due.values_list("pk", flat=True)],
        ignore_conflicts=True,  # another worker's tick wrote it first: one row per question
    )
    due = outbox.due(QuestionEmail.objects.all(), limit)
    for pk in due:
        offer(pk)
    return len(due)


def offer(email_pk: int) -> None:
    """Hand an email to the cluster; if the broker is away, the next tick offers it again."""
    try:
        enqueue_question_email(email_pk)
    except Exception:
        logger.warning("could not enqueue question email %s; the supervisor will retry", email_pk, exc_info=True)


# How each kind is answered; an e-mail cannot hold a form or files, so every one links to the run page.
ANSWER_HOW = {
    "confirm": "Answer yes or no here",
    "fill_fields": "Fill in the form on the run page",
    "upload_files": "Send the files from the run page",
    "risk_ack": "Acknowledge or decline on the run page",
}


def _described(item: dict, *notes: str) -> str:
    shown = [note for note in notes if note]
    return f"{item.get('label') or item.get('name', '')}" + (f" ({', '.join(shown)})" if shown else "")


def kind_context(payload: dict) -> dict:
    """What the e-mail shows of a question's kind, each only for its own kind: a form's fields,
    the files an upload asks for, the risk to acknowledge."""
    kind = payload.get("kind", "")
    hints = payload.get("ui_hints") or {}
    fields = (hints.get("fields") or []) if kind == "fill_fields" else []
    files = (hints.get("files") or []) if kind == "upload_files" else []
    return {
        "how": ANSWER_HOW.get(kind, "Answer it here"),
        "fields": [_described(f, "required" if f.get("required") else "") for f in fields],
        "files": [
            _described(f, "required" if f.get("required") else "", f.get("accept", ""), f.get("hint", ""))
            for f in files
        ],
        "risk": hints.get("risk", "") if kind == "risk_ack" else "",
    }


def question_message(interaction: Interaction) -> EmailMultiAlternatives:
    run = interaction.run
    context = {
        **kind_context(interaction.payload),
        "run": run,
        "skill_id": run.skill_key,
        "prompt": interaction.prompt,
        "options": [option.get("label", "") for option in interaction.payload.get("options") or []],
        # #reply: the run page puts the cursor in its answer box.
        "link": run_page_url(run.pk) + "#reply",
        "inbox": public_url(reverse("ui:inbox")),
        "settings_link": public_url(reverse("account-settings")),
    }
    subject = f"[Skill Runner] {context['skill_id']} asks: {truncatechars(' '.join(interaction.prompt.split()), SUBJECT_PROMPT_CHARS)}"
    message = EmailMultiAlternatives(
        subject=subject,
        body=render_to_string("emails/question.txt", context),
        to=[run.owner.email],
    )
    message.attach_alternative(render_to_string("emails/question.html", context), "text/html")
    return message


def _lease() -> float:
    return outbox.lease_seconds(settings.SKILLRUNNER_EMAIL_TIMEOUT_SECONDS)


def attempt_question_email(email_pk: int) -> QuestionEmail | None:
    """One attempt of a due email, recorded; None when it is not due or another sender has it.
    A question answered (or opted out of) since its row was written is skipped, not sent."""
    with transaction.atomic():
        email = outbox.claim(QuestionEmail.objects.all(), email_pk, _lease())
        if email is None:
            return None
        question = _open_questions().select_related("run__owner", "run__skill").filter(pk=email.interaction_id).first()
        if question is None:
            email.state = QuestionEmail.State.SKIPPED
            outbox.save_attempt(email)
            return email
    try:
        question_message(question).send()
    except (smtplib.SMTPException, OSError) as exc:  # the mail server refused or is away: retried
        email.last_error = f"{type(exc).__name__}: {exc}"
        unit = settings.SKILLRUNNER_EMAIL_RETRY_BASE_SECONDS
        outbox.retry_or_give_up(email, unit, give_up=QuestionEmail.State.FAILED)
        outbox.save_attempt(email)
        return email
    # Sent. A crash from here to the commit below (the worker killed, the database away) leaves the
    # row pending, so it is sent again once its lease lapses: the owner may get the email twice.
    # That is the side to err on: marking it sent before sending (as this code once did) loses it
    # instead, and a question nobody is told about keeps its run waiting until its deadline.
    email.state = QuestionEmail.State.SENT
    email.sent_at = timezone.now()
    email.last_error = ""
    outbox.save_attempt(email)
    return email
