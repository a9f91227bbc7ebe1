"""Forms of the skill pages."""

from __future__ import annotations

from django import forms

from kernel.forms import PlainLabelForm


class SkillPackageForm(PlainLabelForm):
    package = forms.FileField(
        label="Skill package (.zip)", widget=forms.ClearableFileInput(attrs={"accept": ".zip,application/zip"})
    )
