"""The questions waiting for a user as the inbox shows and answers them (R-NT4): a card's
summary of its run, and an answer given there, through the same way in as the REST endpoint and
the run socket (`runs.replies.receive_reply`). The inbox page (`views.inbox_page`) and its
socket (`live.inbox`) both use them.
"""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse
from rest_framework.exceptions import ValidationError

from kernel.errors import ApplicationError

from . import replies, selectors, services
from .models import Interaction, Run

# Values of a run's input and parameters shown on its inbox card, and their length at most.
SHOWN_VALUES = 4
SHOWN_VALUE_CHARS = 60


def question_summary(interaction: Interaction) -> dict[str, Any]:
    """A waiting question with what tells its run apart from others of the same skill: the run's
    short id, its input and parameter values, what the agent said before asking, and when the
    wait ends and what happens then (R-LC9)."""
    run = interaction.run
    on_timeout = services.on_wait_timeout(run.interactive_profile, run.options.interactive_require_user_reply)
    return {
        "request_id": str(run.pk),
        "short_id": str(run.pk)[:8],
        "interaction_id": interaction.interaction_id,
        "skill": run.version.name,
        "values": run_values(run),
        "said_before": selectors.message_before_question(interaction),
        "prompt": interaction.prompt,
        "kind": interaction.kind,
        "options": interaction.quick_replies,
        # What the card's own controls are built from (the kind's hint data, static/js/question-forms.js).
        "question": {key: interaction.payload.get(key) for key in ("interaction_id", "kind", "ui_hints")},
        "asked_at": interaction.asked_at.isoformat(),
        "deadline_at": run.wait_deadline_at.isoformat() if run.wait_deadline_at else None,
        "on_deadline": on_timeout.value if on_timeout and run.wait_deadline_at else None,
        "url": reverse("ui:run-detail", args=[run.pk]),
    }


def run_values(run) -> list[str]:
    """A few of the run's input and parameter values as "name: value", each kept short."""
    shown = []
    for name, value in [*run.input.items(), *run.parameter.items()][:SHOWN_VALUES]:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(text.split())
        if len(text) > SHOWN_VALUE_CHARS:
            text = text[: SHOWN_VALUE_CHARS - 1] + "…"
        shown.append(f"{name}: {text}")
    return shown


def posted_response(form) -> Any:
    """The answer an inbox form posted: its structured reply (`reply`, JSON) or its text."""
    if "reply" not in form:
        return form.get("response", "")
    try:
        return json.loads(form["reply"])
    except ValueError:
        raise ApplicationError("MALFORMED_REQUEST", "the reply field does not hold JSON") from None


def answer(user, request_id: str, interaction_id: Any, response: Any, option: str | None = None):
    """One inbox answer, exactly as POST /v1/jobs/{id}/interaction/reply would take it. A quick
    reply names its option by index and sends that option's value (R-FS4)."""

    def sent(run: Run) -> replies.SentReply:
        chosen = response if option is None else _option_value(run, interaction_id, option)
        return replies.SentReply({"interaction_id": interaction_id, "response": chosen})

    return replies.receive_reply(user, request_id, sent)


def _option_value(run, interaction_id: Any, option: str) -> Any:
    interaction = run.interactions.filter(interaction_id=_int_or_none(interaction_id)).first()
    index = _int_or_none(option)
    try:
        if interaction is None or index is None:
            raise IndexError(option)
        return interaction.option_value(index)
    except IndexError:
        raise ValidationError({"option": [f"no option {option!r} in question {interaction_id!r}"]}) from None


def _int_or_none(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
