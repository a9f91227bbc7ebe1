"""CSRF for everything a browser session can change (research §5.2 "CSRF on the chat page").
Already covered elsewhere: login/logout and the new-run form without a token (tests/runs/test_pages.py),
POST /v1/jobs by session (tests/accounts/test_auth.py). Here: the staff skill-install form, the other REST writes a
session can make (reply, cancel, upload, install), and a forged request carrying a valid token
from a foreign Origin."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = {
    "destination": "Oslo",
    "days": [{"day": 1, "activities": ["walk"]}],
    "plan_file": "artifacts/plan.md",
    "__SKILL_DONE__": True,
}


def _csrf_client(user, cls=Client):
    client = cls(enforce_csrf_checks=True)
    client.force_login(user)
    client.get(reverse("ui:run-list"))
    return client, client.cookies["csrftoken"].value


def _skill_zip(tmp_path, skill_id="csrf-probe") -> io.BytesIO:
    folder = tmp_path / skill_id
    (folder / "assets").mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {skill_id}\ndescription: probe\n---\nDo it.\n")
    (folder / "assets" / "runner.json").write_text(
        json.dumps({"id": skill_id, "version": "1.0.0", "execution_modes": ["auto"]})
    )
    (folder / "assets" / "output.schema.json").write_text(json.dumps({"type": "object"}))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            archive.write(path, path.relative_to(tmp_path).as_posix())
    buffer.seek(0)
    buffer.name = f"{skill_id}.zip"
    return buffer


def test_skill_install_form_needs_csrf(admin_user, tmp_path):
    from skills.models import Skill

    client, token = _csrf_client(admin_user)
    refused = client.post(reverse("ui:skill-list"), {"package": _skill_zip(tmp_path)})
    assert refused.status_code == 403
    assert not Skill.objects.filter(skill_id="csrf-probe").exists()
    accepted = client.post(reverse("ui:skill-list"), {"package": _skill_zip(tmp_path), "csrfmiddlewaretoken": token})
    assert accepted.status_code == 302
    assert Skill.objects.filter(skill_id="csrf-probe").exists()


def test_new_run_form_from_a_foreign_origin_is_refused_even_with_a_token(alice, install_skill, fake_codex):
    """A token leaked to another site does not help it: Django checks the Origin header too."""
    from runs.models import Run

    install_skill("haiku-writer")
    client, token = _csrf_client(alice)
    url = reverse("ui:run-new", args=["haiku-writer"])
    form = {
        "input__topic": "sea",
        "engine": "codex",
        "execution_mode": "auto",
        "model": "",
        "csrfmiddlewaretoken": token,
    }
    assert client.post(url, form, HTTP_ORIGIN="http://evil.example").status_code == 403
    assert client.post(url, form, HTTP_ORIGIN="null").status_code == 403
    assert not Run.objects.exists()


@pytest.fixture
def waiting(api, alice, install_skill, fake_codex):
    install_skill("trip-planner")
    fake_codex.script(
        {"message": "Where to?"}, {"files": {"artifacts/plan.md": "# Oslo\n"}, "message": json.dumps(PLAN)}
    )
    response = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    )
    rid = response.json()["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "waiting_user"
    return rid


def _snapshot(rid):
    from runs.models import Run

    run = Run.objects.get(pk=rid)
    return run.status, run.attempt_number, run.last_event_seq, run.awaiting_upload


@pytest.mark.parametrize("action", ["reply", "cancel"])
def test_session_writes_to_a_run_need_csrf(alice, waiting, action):
    client, token = _csrf_client(alice, APIClient)
    path = f"/v1/jobs/{waiting}/interaction/reply" if action == "reply" else f"/v1/jobs/{waiting}/cancel"
    body = {"interaction_id": 1, "response": "Oslo"} if action == "reply" else {}
    before = _snapshot(waiting)
    assert client.post(path, body, format="json").status_code == 403
    assert _snapshot(waiting) == before
    assert (
        client.post(path, body, format="json", HTTP_ORIGIN="http://evil.example", HTTP_X_CSRFTOKEN=token).status_code
        == 403
    )
    assert _snapshot(waiting) == before
    assert client.post(path, body, format="json", HTTP_X_CSRFTOKEN=token).status_code == 200  # the control


def test_session_upload_needs_csrf(alice, api, install_skill, fake_codex):
    install_skill("word-count")
    rid = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json").json()[
        "request_id"
    ]
    client, token = _csrf_client(alice, APIClient)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("document", "one two\n")

    def zipped():
        handle = io.BytesIO(archive.getvalue())
        handle.name = "in.zip"
        return handle

    before = _snapshot(rid)
    assert client.post(f"/v1/jobs/{rid}/upload", {"file": zipped()}, format="multipart").status_code == 403
    assert _snapshot(rid) == before
    fake_codex.script({"message": json.dumps({"lines": 1, "words": 2})})
    assert (
        client.post(
            f"/v1/jobs/{rid}/upload", {"file": zipped()}, format="multipart", HTTP_X_CSRFTOKEN=token
        ).status_code
        == 200
    )


def test_session_skill_install_api_needs_csrf(admin_user, tmp_path):
    from skills.models import Skill

    client, token = _csrf_client(admin_user, APIClient)
    assert (
        client.post("/v1/skill-packages/install", {"file": _skill_zip(tmp_path)}, format="multipart").status_code == 403
    )
    assert not Skill.objects.filter(skill_id="csrf-probe").exists()
    assert (
        client.post(
            "/v1/skill-packages/install", {"file": _skill_zip(tmp_path)}, format="multipart", HTTP_X_CSRFTOKEN=token
        ).status_code
        == 200
    )
