"""Run pages (R-UI3): thin views over runs.services and runs.selectors.

The run page is a shell; its conversation, status and result arrive over the run websocket.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from rest_framework.exceptions import Throttled, ValidationError

from skillrunner.api_errors import exception_handler
from skillrunner.errors import ApplicationError, NotFound
from skillrunner.throttles import RUN_CREATE_SCOPE, form_over_rate
from skills.selectors import current_version, installed_skills

from . import inbox, runfiles, selectors, services
from .forms import INPUT, PARAMETER, NewRunForm, RunFilterForm
from .models import Run
from .preview import previewable, render_preview

RUNS_PER_PAGE = 25


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    filters = RunFilterForm(request.GET)
    runs = selectors.runs_visible_to(request.user).order_by("-created_at")
    if filters.is_valid() and filters.cleaned_data["status"]:
        runs = runs.filter(status=filters.cleaned_data["status"])
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "runs/run_list.html", {"page": page, "filters": filters})


@login_required
def choose_skill(request: HttpRequest) -> HttpResponse:
    return render(request, "runs/choose_skill.html", {"skills": installed_skills()})


def start_run(owner, form: NewRunForm) -> Run:
    """Create the run, then hand over its input files; a run whose upload is refused is canceled
    rather than left waiting for files that will never come."""
    run = services.create_run(
        owner=owner,
        skill_id=form.version.skill.skill_id,
        engine=form.cleaned_data["engine"],
        model=form.cleaned_data["model"] or None,
        input=form.values(INPUT),
        parameter=form.values(PARAMETER),
        runtime_options={"execution_mode": form.cleaned_data["execution_mode"]},
        expects_upload=bool(form.uploads()),
    )
    if run.awaiting_upload:
        try:
            services.attach_upload(run, form.uploads_zip())
        except ApplicationError:
            services.cancel_run(run)
            raise
    return run


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


@login_required
def artifact_preview(request: HttpRequest, request_id: str, path: str) -> HttpResponse:
    """A Markdown or text artifact as a sanitised HTML fragment for the run page (R-AC5)."""
    try:
        run = selectors.run_for(request.user, request_id)
    except NotFound:
        raise Http404("no such run") from None
    relative = path.removeprefix("artifacts/")
    if not previewable(relative):
        raise Http404("no preview for this kind of file")
    handle = runfiles.open_file(run.run_dir, f"artifacts/{relative}")
    if handle is None:
        raise Http404("no such artifact")
    with handle:
        fragment = render_preview(relative, handle)
    response = HttpResponse(fragment, content_type="text/html; charset=utf-8")
    # A fragment for the page's script only: nothing in it may run or load anything.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'self'"
    return response


@login_required
def run_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    try:
        run = selectors.run_for(request.user, request_id)
    except NotFound:
        raise Http404("no such run") from None
    return render(request, "runs/run_detail.html", {"run": run})


@login_required
@require_http_methods(["GET", "POST"])
def inbox_page(request: HttpRequest) -> HttpResponse:
    """R-NT4: every question waiting for the user, oldest first; POST answers one of them.

    The page's script posts answers with `Accept: application/json` and keeps the page; without
    script the form posts and the page comes back with a message.
    """
    if request.method == "POST":
        wants_json = "application/json" in request.headers.get("Accept", "")
        # A quick-reply button sends its option's index as `option`; the text box sends `response`.
        try:
            run = inbox.answer(
                request.user,
                request.POST.get("request_id", ""),
                request.POST.get("interaction_id"),
                request.POST.get("response", ""),
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
            messages.success(request, "Answer sent; the run goes on.")
        return redirect("ui:inbox")
    return render(request, "runs/inbox.html", {"questions": selectors.waiting_questions(request.user)})
