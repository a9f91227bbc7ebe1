"""Question emails (R-NT3): one per question, only for questions still open after a grace period,
to owners with an address who have not opted out; sent by the worker cluster."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db.models import F
from django.template.defaultfilters import truncatechars
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from runs.models import Interaction, RunStatus
from skillrunner.links import public_url, run_page_url

from .task_queue import enqueue_question_email

logger = logging.getLogger(__name__)

SUBJECT_PROMPT_CHARS = 80


def claim_due_questions() -> list[int]:
    """Supervisor tick: questions open for longer than the grace period and not yet emailed.

    Each is marked emailed by a conditional update before it is handed over, so however many
    workers tick at once, a question gets one email at most.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.SKILLRUNNER_EMAIL_GRACE_SECONDS)
    due = (
        Interaction.objects.filter(
            run__status=RunStatus.WAITING_USER,
            run__pending_interaction_id=F("interaction_id"),
            answered_at__isnull=True,
            emailed_at__isnull=True,
            asked_at__lte=cutoff,
        )
        .exclude(run__owner__email="")
        .exclude(run__owner__notification_settings__email_questions=False)
        .values_list("pk", flat=True)
    )
    claimed = [
        pk
        for pk in list(due)
        if Interaction.objects.filter(pk=pk, emailed_at__isnull=True).update(emailed_at=timezone.now())
    ]
    for pk in claimed:
        try:
            enqueue_question_email(pk)
        except Exception:  # the broker is away: this question goes without an email
            logger.warning("could not enqueue the email for question %s", pk, exc_info=True)
    return claimed


def question_message(interaction: Interaction) -> EmailMultiAlternatives:
    run = interaction.run
    context = {
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


def send_question_email(interaction_pk: int) -> bool:
    """Sends unless the question was answered since it was claimed; False when skipped."""
    interaction = Interaction.objects.select_related("run__owner", "run__skill").filter(pk=interaction_pk).first()
    if interaction is None or interaction.answered_at is not None or interaction.run.status != RunStatus.WAITING_USER:
        return False
    question_message(interaction).send()
    return True
