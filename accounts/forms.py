from __future__ import annotations

from datetime import timedelta

from django import forms

from kernel.forms import PlainLabelForm

from .models import NAME_MAX_LENGTH

# How long a new token lasts, in days ("" never expires); the form offers these.
TOKEN_LIFETIMES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "Never")]


class NotificationSettingsForm(forms.Form):
    email = forms.EmailField(required=False, help_text="Where question emails go; leave empty for none.")
    email_questions = forms.BooleanField(
        required=False,
        label="Email me when a run asks a question",
        help_text="Sent only if the question is still open after a short grace period; one email per question.",
    )


class TokenForm(PlainLabelForm):
    """A new API token from the settings page: its name and how long it lasts."""

    name = forms.CharField(
        label="Name",
        max_length=NAME_MAX_LENGTH,
        help_text="What the token is for, such as the program that uses it.",
    )
    lifetime = forms.ChoiceField(
        label="Expires after",
        choices=TOKEN_LIFETIMES,
        initial="90",
        required=False,
        help_text="An expired token is refused as a revoked one.",
    )

    def clean_lifetime(self) -> timedelta | None:
        days = self.cleaned_data["lifetime"]
        return timedelta(days=int(days)) if days else None
