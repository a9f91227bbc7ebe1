"""Forms of the browser pages. The new-run form is generated from the skill's input and
parameter JSON Schemas (R-UI3), so a newly installed skill gets its form without code."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.utils.html import escape

from enginehost.choice import EngineChoice, engine_choices
from engines.registry import ENGINE_NAMES
from kernel.forms import PlainLabelForm
from runs.inputs import file_fields, zipped_files
from runs.models import RunStatus
from skills.models import SkillVersion

INPUT = "input"
PARAMETER = "parameter"
# Strings longer than this get a multi-line box.
SHORT_TEXT_LIMIT = 200


def _schema_type(spec: dict[str, Any]) -> str | None:
    declared = spec.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), None)
    return declared


def _help_text(spec: dict[str, Any]) -> str:
    """The schema's description, escaped here because Django's field template renders help
    text as safe HTML and a skill package is untrusted (R-FS4)."""
    return escape(str(spec.get("description") or ""))


def field_label(name: str, spec: dict[str, Any]) -> str:
    return str(spec.get("title") or name.replace("_", " ").replace("-", " ").capitalize())


def not_only_spaces(value: str) -> None:
    if not value.strip():
        raise ValidationError("Enter some text: spaces alone are not an answer.", code="blank")


class JSONValueField(forms.JSONField):
    """A JSON box that starts empty rather than showing `null`."""

    def prepare_value(self, value: Any) -> str:
        return "" if value is None else super().prepare_value(value)


def schema_field(name: str, spec: dict[str, Any], *, required: bool) -> forms.Field:
    """One form field for one schema property; types the form cannot express take JSON."""
    common: dict[str, Any] = {
        "label": field_label(name, spec),
        "help_text": _help_text(spec),
        "required": required,
    }
    if "enum" in spec:
        # Choices are keyed by their JSON text, so integer or boolean enums keep their type.
        choices = [(json.dumps(value), str(value)) for value in spec["enum"]]
        if not required:
            choices.insert(0, ("", "—"))
        initial = json.dumps(spec["default"]) if "default" in spec else None
        return forms.TypedChoiceField(choices=choices, coerce=json.loads, empty_value=None, initial=initial, **common)
    kind = _schema_type(spec)
    initial = spec.get("default")
    if kind == "string":
        max_length = spec.get("maxLength")
        widget = (
            forms.TextInput
            if max_length is not None and max_length <= SHORT_TEXT_LIMIT
            else forms.Textarea(attrs={"rows": 4})
        )
        return forms.CharField(
            min_length=spec.get("minLength"),
            max_length=max_length,
            widget=widget,
            strip=False,
            initial=initial,
            validators=[not_only_spaces] if required else [],
            **common,
        )
    if kind == "integer":
        return forms.IntegerField(
            min_value=spec.get("minimum"), max_value=spec.get("maximum"), initial=initial, **common
        )
    if kind == "number":
        return forms.FloatField(min_value=spec.get("minimum"), max_value=spec.get("maximum"), initial=initial, **common)
    if kind == "boolean":
        # An unticked box is an answer too (false), so the box itself is never required.
        return forms.BooleanField(**{**common, "required": False}, initial=initial)
    common["help_text"] = " ".join(filter(None, [common["help_text"], "Enter a JSON value."]))
    return JSONValueField(initial=initial, widget=forms.Textarea(attrs={"rows": 4}), **common)


class EngineSelect(forms.Select):
    """The skill's engines; one that cannot run here is shown disabled, its reason beside it."""

    def __init__(self, choices: list[EngineChoice]):
        super().__init__()
        self.engines = {choice.engine: choice for choice in choices}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        choice = self.engines.get(value)
        if choice is not None:
            option["attrs"]["data-default-model"] = choice.default_model or ""
            if not choice.usable:
                option["attrs"]["disabled"] = True
                option["label"] = f"{value} (unavailable)"
        return option


def default_model_text(choice: EngineChoice | None) -> str:
    model = choice.default_model if choice else None
    return (
        f"Leave empty for the default model: {model}." if model else "Leave empty for the engine's own default model."
    )


class NewRunForm(PlainLabelForm):
    required_css_class = "required"  # its labels get the mark the form's note explains
    engine = forms.ChoiceField()
    execution_mode = forms.ChoiceField(label="Mode")
    model = forms.CharField(required=False, max_length=128)
    reuse_cached = forms.BooleanField(
        required=False,
        initial=True,
        label="Reuse a cached result",
        help_text="Auto runs only: when you ran exactly this before, its result comes back at once instead of running again.",
    )

    def __init__(self, version: SkillVersion, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.version = version
        self.engine_choices = engine_choices(version)
        engine, execution_mode = self.fields["engine"], self.fields["execution_mode"]
        assert isinstance(engine, forms.ChoiceField) and isinstance(execution_mode, forms.ChoiceField)
        engine.widget = EngineSelect(self.engine_choices)  # before the choices, which it then holds
        engine.choices = [(choice.engine, choice.engine) for choice in self.engine_choices]
        usable = [choice for choice in self.engine_choices if choice.usable]
        engine.initial = usable[0].engine if usable else None
        self.fields["model"].help_text = default_model_text(usable[0] if usable else None)
        execution_mode.choices = [(mode, mode) for mode in version.execution_modes]
        input_schema = version.schemas.get(INPUT) or {}
        self.file_names = file_fields(input_schema)
        self.schema_names = {section: self._add_schema_fields(version, section) for section in (INPUT, PARAMETER)}

    def _add_schema_fields(self, version: SkillVersion, section: str) -> list[str]:
        schema = version.schemas.get(section) or {}
        required = set(schema.get("required") or [])
        files = set(file_fields(schema)) if section == INPUT else set()
        names = []
        for name, spec in version.properties(section):
            if not isinstance(spec, dict):
                continue
            if name in files:
                field: forms.Field = forms.FileField(
                    label=field_label(name, spec), help_text=_help_text(spec), required=name in required
                )
                if spec.get("extensions"):
                    field.widget.attrs["accept"] = ",".join(spec["extensions"])
            else:
                field = schema_field(name, spec, required=name in required)
            self.fields[f"{section}__{name}"] = field
            names.append(name)
        return names

    @property
    def unavailable_engines(self) -> list[EngineChoice]:
        return [choice for choice in self.engine_choices if not choice.usable]

    def clean_engine(self) -> str:
        engine = self.cleaned_data["engine"]
        choice = next(choice for choice in self.engine_choices if choice.engine == engine)
        if not choice.usable:
            raise ValidationError(f"{engine} cannot run here: {choice.reason} (ENGINE_UNAVAILABLE)", code="unavailable")
        return engine

    def section_fields(self, section: str) -> list[forms.BoundField]:
        return [self[f"{section}__{name}"] for name in self.schema_names[section]]

    @property
    def input_fields(self) -> list[forms.BoundField]:
        return self.section_fields(INPUT)

    @property
    def parameter_fields(self) -> list[forms.BoundField]:
        return self.section_fields(PARAMETER)

    def values(self, section: str) -> dict[str, Any]:
        """The section's JSON object; blank optional fields are left out rather than sent empty."""
        values = {}
        for name in self.schema_names[section]:
            if name in self.file_names and section == INPUT:
                continue
            value = self.cleaned_data.get(f"{section}__{name}")
            if value is not None and value != "":
                values[name] = value
        return values

    def uploads(self) -> dict[str, UploadedFile]:
        return {name: upload for name in self.file_names if (upload := self.cleaned_data.get(f"{INPUT}__{name}"))}

    def uploads_zip(self) -> tempfile.SpooledTemporaryFile | None:
        """The uploaded files as the run's input zip, each stored under its field's name; None
        when none were sent."""
        uploads = self.uploads()
        return zipped_files(uploads.items()) if uploads else None


class RunFilterForm(forms.Form):
    """The runs list's filters (GET parameters); the skills offered are those of the reader's runs."""

    status = forms.ChoiceField(choices=[("", "All statuses"), *RunStatus.choices], required=False)
    skill = forms.ChoiceField(choices=[("", "All skills")], required=False)
    engine = forms.ChoiceField(choices=[("", "All engines"), *((name, name) for name in ENGINE_NAMES)], required=False)

    def __init__(self, data: Any, skill_ids: list[str]) -> None:
        super().__init__(data)
        skill = self.fields["skill"]
        assert isinstance(skill, forms.ChoiceField)
        skill.choices = [("", "All skills"), *((skill_id, skill_id) for skill_id in skill_ids)]

    def chosen(self) -> dict[str, str]:
        """The valid filters that are set, by name: the query's and the pager's links'."""
        if not self.is_valid():
            return {}
        return {name: value for name, value in self.cleaned_data.items() if value}
