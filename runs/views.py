"""Run pages (R-UI3): thin views over runs.services and runs.selectors.

The run page is a shell; its conversation, status and result arrive over the run websocket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework.exceptions import Throttled, ValidationError

from enginehost.choice import engine_choices, run_model
from kernel.api_errors import exception_handler
from kernel.errors import ApplicationError, NotFound
from kernel.throttles import RUN_CREATE_SCOPE, check_rate, form_over_rate
from skills.models import SkillVersion
from skills.selectors import current_version, installed_skills

from . import questions, selectors, services
from .forms import INPUT, PARAMETER, NewRunForm, RunFilterForm, field_label
from .models import Run, RunStatus
from .output_keys import served_artifact
from .preview import previewable, render_preview

RUNS_PER_PAGE = 25
# The runs list's filters: the Run field each filters on.
FILTERED_FIELDS = {"status": "status", "skill": "skill__skill_id", "engine": "engine"}
INPUT_SUMMARY_CHARS = 80


@dataclass(frozen=True)
class RunRow:
    """A run as the runs list shows it: what it was asked and how long it took."""

    run: Run
    input_summary: str
    duration: str


def input_summary(values: dict[str, Any]) -> str:
    """A one-line excerpt of a run's input ("topic: sea · lines: 3"), cut to a table cell; the
    template escapes it."""
    parts = [f"{name}: {value if isinstance(value, str) else json.dumps(value)}" for name, value in values.items()]
    summary = " · ".join(" ".join(part.split()) for part in parts)
    return summary if len(summary) <= INPUT_SUMMARY_CHARS else summary[: INPUT_SUMMARY_CHARS - 1] + "…"


def run_duration(run: Run) -> str:
    """How long a finished run took, from its creation to its end as the run page's "Took"
    counts it; empty while it is not finished."""
    if run.finished_at is None:
        return ""
    seconds = max(0, round((run.finished_at - run.created_at).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min {seconds % 60:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@dataclass(frozen=True)
class SkillCard:
    """A skill as the skill cards show it, with those of its engines that can run here."""

    skill_id: str
    current: SkillVersion
    ready_engines: list[str]


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    visible = selectors.runs_visible_to(request.user)
    filters = RunFilterForm(request.GET, selectors.skill_ids_of(visible))
    chosen = filters.chosen()
    runs = visible.filter(**{FILTERED_FIELDS[name]: value for name, value in chosen.items()}).order_by("-created_at")
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [RunRow(run, input_summary(run.input), run_duration(run)) for run in page.object_list]
    context = {"page": page, "rows": rows, "filters": filters, "filter_query": urlencode(chosen)}
    return render(request, "runs/run_list.html", context)


@login_required
def choose_skill(request: HttpRequest) -> HttpResponse:
    """The skills to start, each card saying which of its engines can run here."""
    cards = [
        SkillCard(skill.skill_id, version, [choice.engine for choice in engine_choices(version) if choice.usable])
        for skill in installed_skills()
        if (version := skill.current) is not None
    ]
    return render(request, "runs/choose_skill.html", {"skills": cards, "engines_checked": True})


def start_run(owner, form: NewRunForm) -> Run:
    return services.create_run_with_files(
        owner=owner,
        skill_id=form.version.skill.skill_id,
        engine=form.cleaned_data["engine"],
        model=form.cleaned_data["model"] or None,
        input=form.values(INPUT),
        parameter=form.values(PARAMETER),
        runtime_options={
            "execution_mode": form.cleaned_data["execution_mode"],
            "no_cache": not form.cleaned_data["reuse_cached"],
        },
        files=form.uploads_zip(),
    )


@login_required
def new_run(request: HttpRequest, skill_id: str) -> HttpResponse:
    version = current_version(skill_id)
    if version is None:
        raise Http404("no such skill")
    form = NewRunForm(version, request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        if form_over_rate(form, request.user, RUN_CREATE_SCOPE):
            return render(request, "runs/new_run.html", {"form": form, "version": version}, status=429)
        try:
            run = start_run(request.user, form)
        except ApplicationError as exc:
            for message in exc.messages():
                form.add_error(None, message)
        else:
            return redirect("ui:run-detail", request_id=run.pk)
    return render(request, "runs/new_run.html", {"form": form, "version": version})


def _visible_run(user, request_id: str) -> Run:
    try:
        return selectors.run_for(user, request_id)
    except NotFound:
        raise Http404("no such run") from None


def _preview_of(run: Run, path: str) -> tuple[str, str]:
    """An artifact's name under artifacts/ and its sanitised HTML preview (R-AC5)."""
    relative = path.removeprefix("artifacts/")
    if not previewable(relative):
        raise Http404("no preview for this kind of file")
    try:
        handle = served_artifact(run, relative)
    except NotFound:
        raise Http404("no such artifact") from None
    with handle:
        return relative, render_preview(relative, handle)


@login_required
def artifact_preview(request: HttpRequest, request_id: str, path: str) -> HttpResponse:
    """A Markdown or text artifact as a sanitised HTML fragment for the run page's script."""
    _, fragment = _preview_of(_visible_run(request.user, request_id), path)
    response = HttpResponse(fragment, content_type="text/html; charset=utf-8")
    # A fragment for the page's script only: nothing in it may run or load anything.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'self'"
    return response


@login_required
def artifact_page(request: HttpRequest, request_id: str, path: str) -> HttpResponse:
    """An artifact opened in the browser: a previewable one rendered safely in a page of the
    site, with its download a click away; any other kind is the download itself."""
    run = _visible_run(request.user, request_id)
    download = reverse("job-artifact", args=[run.pk, path])
    if not previewable(path):
        return redirect(download)
    name, fragment = _preview_of(run, path)
    context = {"run": run, "name": name, "fragment": fragment, "download": download}
    return render(request, "runs/artifact.html", context)


def labelled_values(version: SkillVersion | None, section: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's input or parameter as the page lists them: each value under its form label, long
    or structured values as blocks, in the schema's order."""
    specs = dict(version.properties(section)) if version else {}
    names = [name for name in specs if name in values] + [name for name in values if name not in specs]
    shown = []
    for name in names:
        value = values[name]
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
        spec = specs.get(name)
        shown.append(
            {
                "label": field_label(name, spec if isinstance(spec, dict) else {}),
                "text": text,
                "block": "\n" in text or len(text) > 80,
            }
        )
    return shown


# The name of each status, as the run page's script shows them.
STATUS_LABELS = json.dumps(dict(RunStatus.choices))


@login_required
def run_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    run = _visible_run(request.user, request_id)
    context = {
        "run": run,
        "inputs": labelled_values(run.skill_version, INPUT, run.input),
        "parameters": labelled_values(run.skill_version, PARAMETER, run.parameter),
        "uploaded_files": selectors.uploaded_files(run) if run.files_removed_at is None else [],
        "cached_from": selectors.cached_from(run),
        "model": run_model(run),
        "status_labels": STATUS_LABELS,
        "reply_file_limits": json.dumps(services.reply_file_limits()),
    }
    return render(request, "runs/run_detail.html", context)


@login_required
@require_POST
def rerun(request: HttpRequest, request_id: str) -> HttpResponse:
    """Re-run: the same skill, engine, model, input, parameter and options, as a new run of the
    user's; fresh unless they allow a cached result."""
    run = _visible_run(request.user, request_id)
    try:
        check_rate(request.user, RUN_CREATE_SCOPE)
        again = services.rerun(run, owner=request.user, allow_cache=request.POST.get("cache") == "allow")
    except (ApplicationError, Throttled) as exc:
        messages.error(request, "The run could not start again: {message} ({code})".format(**_coded(exc)))
        return redirect("ui:run-detail", request_id=run.pk)
    return redirect("ui:run-detail", request_id=again.pk)


def _coded(exc: Exception) -> dict[str, str]:
    """The API's error detail (code and message) for an exception the API would answer."""
    return exception_handler(exc, {}).data["detail"]


@login_required
@require_http_methods(["GET", "POST"])
def inbox_page(request: HttpRequest) -> HttpResponse:
    """R-NT4: every question waiting for the user, oldest first; POST answers one of them.

    The page's script posts answers with `Accept: application/json` and keeps the page; without
    script the form posts and the page comes back with a message.
    """
    if request.method == "POST":
        wants_json = "application/json" in request.headers.get("Accept", "")
        # A quick-reply button sends its option's index as `option`, the text box sends `response`,
        # a question's own form (yes/no, fields, acknowledgement) its structured reply as JSON in `reply`.
        try:
            run = questions.answer(
                request.user,
                request.POST.get("request_id", ""),
                request.POST.get("interaction_id"),
                questions.posted_response(request.POST),
                option=request.POST.get("option"),
            )
        except (ApplicationError, Throttled, ValidationError) as exc:
            error = exception_handler(exc, {})  # the API's coded error, so both share codes
            if wants_json:
                return JsonResponse(error.data, status=error.status_code)
            messages.error(request, "{message} ({code})".format(**error.data["detail"]))
        else:
            if wants_json:
                return JsonResponse({"request_id": str(run.pk), "status": run.status, "accepted": True})
            messages.success(request, f"Answer sent to {run.version.name} {str(run.pk)[:8]}; the run goes on.")
        return redirect("ui:inbox")
    waiting = [
        {
            "summary": questions.question_summary(item),
            "asked_at": item.asked_at,
            "deadline_at": item.run.wait_deadline_at,
        }
        for item in selectors.waiting_questions(request.user)
    ]
    return render(
        request,
        "runs/inbox.html",
        {"questions": waiting, "reply_file_limits": json.dumps(services.reply_file_limits())},
    )


@login_required
@require_POST
def cancel(request: HttpRequest, request_id: str) -> HttpResponse:
    """Cancel from a page (the inbox's cards); back to where the form says, a page of this site."""
    run, accepted = services.cancel_run(_visible_run(request.user, request_id))
    name = f"{run.version.name if run.skill_version else 'Run'} {str(run.pk)[:8]}"
    if accepted:
        messages.success(request, f"{name} was canceled.")
    else:
        messages.info(request, f"{name} had already ended ({run.get_status_display().lower()}).")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts=None):
        back = reverse("ui:run-detail", args=[run.pk])
    return redirect(back)
