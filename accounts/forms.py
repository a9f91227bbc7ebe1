from __future__ import annotations

from django import forms

from notifications.models import ALL_EVENTS
from skillrunner.forms import PlainLabelForm


class NotificationSettingsForm(forms.Form):
    email = forms.EmailField(required=False, help_text="Where question emails go; leave empty for none.")
    email_questions = forms.BooleanField(
        required=False,
        label="Email me when a run asks a question",
        help_text="Sent only if the question is still open after a short grace period; one email per question.",
    )


class WebhookForm(PlainLabelForm):
    """POST /v1/webhooks from the settings page: the same fields, checked by the same service."""

    url = forms.URLField(
        label="Webhook address",
        max_length=2048,
        assume_scheme="https",
        help_text="Receives a signed POST for each event of your runs.",
    )
    events = forms.MultipleChoiceField(
        choices=[(event, event) for event in ALL_EVENTS],
        initial=ALL_EVENTS,
        widget=forms.CheckboxSelectMultiple,
        label="Events",
    )
