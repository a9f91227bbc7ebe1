"""Skill pages (R-UI3): the installed skills, and installing a package (staff)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from kernel.errors import ApplicationError
from kernel.throttles import SKILL_INSTALL_SCOPE, form_over_rate

from .forms import SkillPackageForm
from .selectors import installed_skills
from .services import install_zip


@login_required
def skill_list(request: HttpRequest) -> HttpResponse:
    form = SkillPackageForm()
    if request.method == "POST":
        if not request.user.is_staff:
            raise PermissionDenied("only staff install skills")
        form = SkillPackageForm(request.POST, request.FILES)
        if form.is_valid():
            if form_over_rate(form, request.user, SKILL_INSTALL_SCOPE):
                return render(
                    request, "skills/skill_list.html", {"skills": installed_skills(), "form": form}, status=429
                )
            try:
                version = install_zip(form.cleaned_data["package"], user=request.user)
            except ApplicationError as exc:
                for message in exc.messages():
                    form.add_error("package", message)
            else:
                messages.success(request, f"Installed {version.skill.skill_id} {version.version}.")
                return redirect("ui:skill-list")
    return render(request, "skills/skill_list.html", {"skills": installed_skills(), "form": form})
