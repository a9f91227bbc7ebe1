"""Browser pages (R-UI3) through the Django test client: login, ownership, CSRF, schema forms."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Run
from tests.support.web_clients import PLAN, QUESTION

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}


def logged_in(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def csrf_token(client: Client, url: str) -> str:
    client.get(url)
    return client.cookies["csrftoken"].value


@pytest.mark.parametrize(
    "name,args",
    [
        ("ui:run-list", []),
        ("ui:choose-skill", []),
        ("ui:run-new", ["haiku-writer"]),
        ("ui:skill-list", []),
        ("ui:run-detail", ["00000000-0000-0000-0000-000000000000"]),
    ],
)
def test_every_page_needs_a_login(client, name, args):
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


NO_RUN = "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    "path",
    [
        "/settings/tokens/",
        "/settings/webhooks/",
        "/settings/tokens/1/revoke/",
        "/settings/webhooks/1/delete/",
        f"/runs/{NO_RUN}/rerun/",
        f"/runs/{NO_RUN}/cancel/",
        "/accounts/logout/",
    ],
)
def test_opening_a_forms_address_is_a_page_of_the_site(alice, path):
    """Issue 41, item 1: what a form posts to, opened (typed, reloaded, come back to), is a page
    saying nothing changed, with the site's header and ways on, not the browser's own error."""
    opened = logged_in(alice).get(path)
    html = opened.content.decode()
    assert opened.status_code == 405 and opened["Allow"].startswith("POST")
    assert "<h1>Not a page to open</h1>" in html and "Nothing was changed." in html
    assert 'href="/settings/"' in html and 'href="/runs/new/"' in html


def test_the_api_keeps_its_own_405(alice):
    refused = logged_in(alice).put("/v1/system/ping")
    assert refused.status_code == 405 and refused.json()["detail"]["code"] == "METHOD_NOT_ALLOWED"


def test_login_and_logout_with_csrf(alice):
    client = Client(enforce_csrf_checks=True)
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'for="id_username"' in page.content and b'for="id_password"' in page.content
    refused = client.post(reverse("login"), {"username": "alice", "password": "alice-password-123"})
    assert refused.status_code == 403
    token = client.cookies["csrftoken"].value
    response = client.post(
        reverse("login"), {"username": "alice", "password": "alice-password-123", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == reverse("ui:run-list")
    assert client.get(reverse("ui:run-list")).status_code == 200
    token = client.cookies["csrftoken"].value
    assert client.post(reverse("logout"), {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get(reverse("ui:run-list")).status_code == 302


def test_wrong_password_is_shown(alice):
    response = Client().post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b'role="alert"' in response.content


def test_run_list_shows_only_my_runs_and_filters_by_status(alice, bob, api, bob_api, trip_run):
    mine = trip_run()
    theirs = trip_run(bob_api)
    api.post(f"/v1/jobs/{mine}/cancel")
    page = logged_in(alice).get(reverse("ui:run-list"))
    assert reverse("ui:run-detail", args=[mine]).encode() in page.content
    assert theirs.encode()[:8] not in page.content
    canceled = logged_in(alice).get(reverse("ui:run-list"), {"status": "canceled"})
    waiting = logged_in(alice).get(reverse("ui:run-list"), {"status": "waiting_user"})
    assert mine.encode()[:8] in canceled.content
    assert mine.encode()[:8] not in waiting.content
    assert b"No runs with these filters yet" in waiting.content
    bobs = logged_in(bob).get(reverse("ui:run-list"), {"status": "waiting_user"})
    assert [str(run.pk) for run in bobs.context["page"].object_list] == [theirs]


def test_someone_elses_run_page_is_not_found(alice, bob, trip_run):
    request_id = trip_run()
    assert logged_in(bob).get(reverse("ui:run-detail", args=[request_id])).status_code == 404
    assert logged_in(bob).get(reverse("ui:run-detail", args=["not-a-uuid"])).status_code == 404
    page = logged_in(alice).get(reverse("ui:run-detail", args=[request_id]))
    assert page.status_code == 200
    assert f'data-socket-path="/ws/runs/{request_id}/"'.encode() in page.content
    assert f'data-artifact-base="/v1/jobs/{request_id}/artifacts/"'.encode() in page.content
    assert b'id="reply-text"' in page.content and b'for="reply-text"' in page.content


def test_browser_session_reads_the_rest_api(alice, trip_run, api):
    """The run page's artifact links use the REST API with the session cookie."""
    request_id = trip_run()
    api.post(f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json")
    response = logged_in(alice).get(f"/v1/jobs/{request_id}/artifacts/artifacts/plan.md")
    assert response.status_code == 200 and b"".join(response.streaming_content) == b"# Oslo\n"


def test_new_run_form_is_built_from_the_schemas(alice, showcase_skill):
    page = logged_in(alice).get(reverse("ui:run-new", args=["form-showcase"]))
    assert page.status_code == 200
    form = page.context["form"]
    assert [f.name for f in form.input_fields] == [
        "input__name",
        "input__count",
        "input__ratio",
        "input__size",
        "input__tags",
    ]
    assert [f.name for f in form.parameter_fields] == ["parameter__loud", "parameter__style"]
    html = page.content.decode()
    assert 'name="input__name" maxlength="20" required' in html
    assert 'type="number" name="input__count" value="2" min="1" max="5"' in html
    assert "Mixing ratio" in html and 'name="input__ratio" step="any"' in html
    assert '<option value="1">1</option>' in html and '<option value="" selected>—</option>' in html
    assert 'type="checkbox" name="parameter__loud"' in html
    assert (
        '<textarea name="input__tags" cols="40" rows="4" aria-describedby="id_input__tags_helptext" id="id_input__tags">\n</textarea>'
        in html
    )
    assert '<option value="&quot;plain&quot;" selected>plain</option>' in html
    assert 'aria-describedby="id_input__name_helptext"' in html and "Lower-case letters only." in html
    assert form.fields["engine"].choices == [("codex", "codex"), ("gemini", "gemini")]
    assert form.fields["execution_mode"].choices == [("auto", "auto"), ("interactive", "interactive")]
    assert 'name="csrfmiddlewaretoken"' in html


def test_new_run_form_for_bundled_skills(alice, install_skill):
    install_skill("haiku-writer")
    install_skill("word-count")
    haiku = logged_in(alice).get(reverse("ui:run-new", args=["haiku-writer"])).content.decode()
    assert 'type="text" name="input__topic" maxlength="200" minlength="1" required' in haiku
    assert '<option value="&quot;calm&quot;">calm</option>' in haiku
    words = logged_in(alice).get(reverse("ui:run-new", args=["word-count"])).content.decode()
    assert 'type="file" name="input__document" accept=".txt,.md" required' in words
    assert 'enctype="multipart/form-data"' in words
    assert logged_in(alice).get(reverse("ui:run-new", args=["nope"])).status_code == 404


def test_new_run_form_starts_a_run_and_sends_typed_values(alice, showcase_skill, fake_codex):
    fake_codex.script({"message": json.dumps({"ok": True})})
    client = logged_in(alice, csrf=True)
    url = reverse("ui:run-new", args=["form-showcase"])
    form = {
        "input__name": "abc",
        "input__count": "3",
        "input__ratio": "",
        "input__size": "2",
        "input__tags": '["x", "y"]',
        "parameter__style": '"fancy"',
        "engine": "codex",
        "execution_mode": "auto",
        "model": "",
    }
    assert client.post(url, form).status_code == 403  # no CSRF token
    response = client.post(url, {**form, "csrfmiddlewaretoken": csrf_token(client, url)})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("ui:run-detail", args=[run.pk])
    assert run.owner == alice and run.engine == "codex" and run.execution_mode == "auto" and run.model == ""
    assert run.input == {"name": "abc", "count": 3, "size": 2, "tags": ["x", "y"]}
    assert run.parameter == {"loud": False, "style": "fancy"}
    assert run.status == "succeeded"


def test_schema_errors_come_back_coded(alice, showcase_skill, fake_codex):  # codex configured
    client = logged_in(alice)
    response = client.post(
        reverse("ui:run-new", args=["form-showcase"]),
        {"input__name": "ABC", "input__count": "1", "engine": "codex", "execution_mode": "auto"},
    )
    assert response.status_code == 200
    assert "does not match" in response.content.decode() and "(INPUT_VALIDATION_FAILED)" in response.content.decode()
    assert not Run.objects.exists()
    out_of_range = client.post(
        reverse("ui:run-new", args=["form-showcase"]),
        {"input__name": "abc", "input__count": "9", "engine": "codex", "execution_mode": "auto"},
    )
    assert "less than or equal to 5" in out_of_range.content.decode()
    wrong_engine = client.post(
        reverse("ui:run-new", args=["form-showcase"]),
        {"input__name": "abc", "input__count": "1", "engine": "iflow", "execution_mode": "auto"},
    )
    assert "Select a valid choice" in wrong_engine.content.decode()
    assert not Run.objects.exists()


def test_file_inputs_are_zipped_under_their_field_names(alice, install_skill, fake_codex):
    install_skill("word-count")
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 4})})
    client = logged_in(alice)
    upload = io.BytesIO(b"one two\nthree four\n")
    upload.name = "notes.txt"
    response = client.post(
        reverse("ui:run-new", args=["word-count"]),
        {"input__document": upload, "engine": "codex", "execution_mode": "auto"},
    )
    run = Run.objects.get()
    assert response.status_code == 302
    assert (run.run_dir / "uploads" / "document").read_bytes() == b"one two\nthree four\n"
    assert run.input == {}
    assert run.status == "succeeded" and run.result["data"] == {"lines": 2, "words": 4}


def test_skill_page_lists_skills_and_only_staff_install(alice, admin_user, install_skill, tmp_path):
    install_skill("haiku-writer")
    page = logged_in(alice).get(reverse("ui:skill-list"))
    assert b"Haiku writer" in page.content and reverse("ui:run-new", args=["haiku-writer"]).encode() in page.content
    assert b'name="package"' not in page.content
    assert logged_in(alice).post(reverse("ui:skill-list"), {"package": io.BytesIO(b"x")}).status_code == 403
    assert b'name="package"' in logged_in(admin_user).get(reverse("ui:skill-list")).content


def _zip_folder(folder) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            archive.write(path, path.relative_to(folder.parent).as_posix())
    buffer.seek(0)
    buffer.name = f"{folder.name}.zip"
    return buffer


def test_staff_installs_a_package_and_sees_coded_errors(admin_user, tmp_path):
    from tests.support.web_clients import write_skill

    client = logged_in(admin_user)
    garbage = io.BytesIO(b"not a zip")
    garbage.name = "bad.zip"
    refused = client.post(reverse("ui:skill-list"), {"package": garbage})
    assert refused.status_code == 200 and "(ARCHIVE_INVALID)" in refused.content.decode()
    folder = write_skill(tmp_path / "pkg", "tiny-skill", input_schema={}, parameter_schema={})
    installed = client.post(reverse("ui:skill-list"), {"package": _zip_folder(folder)}, follow=True)
    assert "Installed tiny-skill 1.0.0." in installed.content.decode()
    again = client.post(reverse("ui:skill-list"), {"package": _zip_folder(folder)})
    assert "(SKILL_VERSION_NOT_NEWER)" in again.content.decode()


def test_trip_planner_page_context(alice, trip_run):
    """The question itself reaches the page over the socket; the shell only names the run."""
    request_id = trip_run()
    page = logged_in(alice).get(reverse("ui:run-detail", args=[request_id]))
    assert b"Trip planner" in page.content
    assert QUESTION.encode() not in page.content
    assert PLAN["destination"].encode() not in page.content


def test_run_list_tells_runs_apart_and_filters_by_skill_and_engine(alice, install_skill, monkeypatch):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    versions = {skill_id: install_skill(skill_id) for skill_id in ("haiku-writer", "trip-planner")}

    def started(skill_id: str, engine: str, topic: str | None) -> Run:
        """A queued run's row (the list reads rows; nothing needs to execute)."""
        version = versions[skill_id]
        return Run.objects.create(
            owner=alice, skill=version.skill, skill_version=version, engine=engine, execution_mode="interactive",
            interactive_profile="resumable", input={} if topic is None else {"topic": topic},
        )  # fmt: skip

    cached = started("haiku-writer", "codex", "<b>sea</b>\nand salt " + "x" * 100)
    Run.objects.filter(pk=cached.pk).update(
        status="succeeded", cache_hit=True, finished_at=cached.created_at + timedelta(seconds=65)
    )
    other = started("trip-planner", "gemini", None)
    client = logged_in(alice)
    with CaptureQueriesContext(connection) as two_runs:
        page = client.get(reverse("ui:run-list")).content.decode()
    assert cached.created_at.strftime(">%Y-%m-%d %H:%M UTC</time>") in page  # the zone shown without script
    assert "topic: &lt;b&gt;sea&lt;/b&gt; and salt xxx" in page and "<b>sea" not in page  # escaped, one line
    assert "x" * 100 not in page and "…" in page
    assert "1 min 05 s" in page and page.count('class="badge cached"') == 1
    assert '<td class="input-summary">—</td>' in page  # a run without input

    def listed(**filters: str) -> list[str]:
        return [str(row.run.pk) for row in client.get(reverse("ui:run-list"), filters).context["rows"]]

    assert listed(skill="trip-planner") == [str(other.pk)]
    assert listed(engine="codex") == [str(cached.pk)]
    assert listed(skill="haiku-writer", engine="gemini") == []
    assert listed(engine="no-such-engine") == [str(other.pk), str(cached.pk)]  # an invalid filter filters nothing
    for topic in ("a", "b", "c", "d"):
        started("haiku-writer", "codex", topic)
    with CaptureQueriesContext(connection) as six_runs:
        client.get(reverse("ui:run-list"))
    assert len(six_runs) == len(two_runs)  # no query per row
    monkeypatch.setattr("runs.views.RUNS_PER_PAGE", 2)
    first = client.get(reverse("ui:run-list"), {"engine": "codex"}).content.decode()
    assert 'href="?engine=codex&amp;page=2"' in first
