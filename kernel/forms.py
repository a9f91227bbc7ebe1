"""What every app's page forms share."""

from __future__ import annotations

from typing import Any

from django import forms


class PlainLabelForm(forms.Form):
    """Labels without Django's trailing colon."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
