from __future__ import annotations

from django import forms


class NotificationSettingsForm(forms.Form):
    email = forms.EmailField(required=False, help_text="Where question emails go; leave empty for none.")
    email_questions = forms.BooleanField(
        required=False,
        label="Email me when a run asks a question",
        help_text="Sent only if the question is still open after a short grace period; one email per question.",
    )
