from __future__ import annotations

from django import forms

from kernel.forms import PlainLabelForm

from .models import ALL_EVENTS


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
