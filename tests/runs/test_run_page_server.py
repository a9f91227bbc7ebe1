"""The run page's server side (issue 30): the request it shows, re-running, the cache note,
artifacts opened in the browser."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from runs.models import Run
from runs.preview import render_markdown
from tests.runs.test_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}
HAIKU_FILE = "# Sea\n\ngrey waves fold\n"


@pytest.fixture
def haiku_run(api, install_skill, fake_codex):
    """A finished auto haiku run of alice's, with its Markdown artifact."""
    install_skill("haiku-writer")

    def start(topic: str = "sea", options: dict | None = None) -> str:
        fake_codex.script(
            {"message": json.dumps({**HAIKU, "topic": topic}), "files": {"artifacts/haiku.md": HAIKU_FILE}}
        )
        body = {
            "skill_id": "haiku-writer",
            "engine": "codex",
            "input": {"topic": topic},
            "parameter": {"mood": "calm"},
            "runtime_options": {"execution_mode": "auto", **(options or {})},
        }
        response = api.post("/v1/jobs", body, format="json")
        assert response.status_code == 200, response.content
        return response.json()["request_id"]

    return start


def test_the_run_page_shows_the_runs_input_parameters_and_times(alice, haiku_run):
    request_id = haiku_run("a quiet harbour at dawn")
    page = logged_in(alice).get(reverse("ui:run-detail", args=[request_id]))
    html = page.content.decode()
    assert page.context["inputs"] == [{"label": "Topic", "text": "a quiet harbour at dawn", "block": False}]
    assert page.context["parameters"] == [{"label": "Mood", "text": "calm", "block": False}]
    assert "<dt>Topic</dt><dd>a quiet harbour at dawn</dd>" in html
    run = Run.objects.get(pk=request_id)
    assert f'data-finished-at="{run.finished_at.isoformat()}"' in html
    assert 'id="finished-fact"' in html and 'id="finished-fact" hidden' not in html
    assert '"waiting_user": "Waiting for you"' in page.context["status_labels"]
    assert "from the cache" not in html


def test_structured_values_are_shown_as_blocks(alice, api, showcase_skill, fake_codex):
    fake_codex.script({"message": json.dumps({"ok": True})})
    body = {
        "skill_id": "form-showcase",
        "engine": "codex",
        "input": {"name": "abc", "count": 2, "tags": ["x", "y"]},
        "runtime_options": {"execution_mode": "auto"},
    }
    request_id = api.post("/v1/jobs", body, format="json").json()["request_id"]
    inputs = logged_in(alice).get(reverse("ui:run-detail", args=[request_id])).context["inputs"]
    assert inputs == [
        {"label": "Name", "text": "abc", "block": False},
        {"label": "Count", "text": "2", "block": False},
        {"label": "Tags", "text": '[\n  "x",\n  "y"\n]', "block": True},
    ]


def test_rerun_starts_a_fresh_run_with_the_same_request(alice, haiku_run, fake_codex):
    first = haiku_run("sea")
    client = logged_in(alice)
    response = client.post(reverse("ui:run-rerun", args=[first]))
    again = Run.objects.exclude(pk=first).get()
    assert response.status_code == 302 and response["Location"] == reverse("ui:run-detail", args=[again.pk])
    assert (again.input, again.parameter, again.engine, again.execution_mode) == (
        {"topic": "sea"},
        {"mood": "calm"},
        "codex",
        "auto",
    )
    assert again.runtime_options["no_cache"] is True
    assert not again.cache_hit and again.status == "succeeded"
    assert len(fake_codex.invocations()) == 2  # it really ran again


def test_rerun_that_allows_the_cache_says_where_its_result_came_from(alice, haiku_run, fake_codex):
    first = haiku_run("sea")
    client = logged_in(alice)
    client.post(reverse("ui:run-rerun", args=[first]), {"cache": "allow"})
    again = Run.objects.exclude(pk=first).get()
    assert again.cache_hit and len(fake_codex.invocations()) == 1
    page = client.get(reverse("ui:run-detail", args=[again.pk]))
    assert page.context["cached_from"] == first
    assert "This result came from the cache" in page.content.decode()
    assert reverse("ui:run-detail", args=[first]) in page.content.decode()


def test_rerun_sends_the_same_input_files(alice, install_skill, fake_codex):
    install_skill("word-count")
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 4})})
    client = logged_in(alice)
    upload = io.BytesIO(b"one two\nthree four\n")
    upload.name = "notes.txt"
    client.post(
        reverse("ui:run-new", args=["word-count"]),
        {"input__document": upload, "engine": "codex", "execution_mode": "auto"},
    )
    first = Run.objects.get()
    client.post(reverse("ui:run-rerun", args=[first.pk]))
    again = Run.objects.exclude(pk=first.pk).get()
    assert (again.run_dir / "uploads" / "document").read_bytes() == b"one two\nthree four\n"
    assert again.status == "succeeded" and not again.cache_hit
    page = client.get(reverse("ui:run-detail", args=[again.pk]))
    assert page.context["uploaded_files"] == ["document"]


def test_rerun_of_someone_elses_run_is_not_found(bob, haiku_run):
    first = haiku_run()
    assert logged_in(bob).post(reverse("ui:run-rerun", args=[first])).status_code == 404
    assert logged_in(bob).get(reverse("ui:run-rerun", args=[first])).status_code == 405  # a form posts it
    assert Run.objects.count() == 1


def test_an_artifact_opens_as_a_page_and_downloads_on_request(alice, bob, haiku_run):
    request_id = haiku_run()
    client = logged_in(alice)
    page = client.get(reverse("ui:artifact", args=[request_id, "artifacts/haiku.md"]))
    html = page.content.decode()
    assert page.status_code == 200
    assert '<h1 class="mono">haiku.md</h1>' in html and "<h2>Sea</h2>" in html and html.count("<h1") == 1
    download = reverse("job-artifact", args=[request_id, "artifacts/haiku.md"])
    assert f'href="{download}" download' in html
    assert logged_in(bob).get(reverse("ui:artifact", args=[request_id, "artifacts/haiku.md"])).status_code == 404
    assert client.get(reverse("ui:artifact", args=[request_id, "artifacts/missing.md"])).status_code == 404


def test_an_artifact_of_another_kind_is_downloaded(alice, api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script(
        {"message": json.dumps(HAIKU), "files": {"artifacts/haiku.md": HAIKU_FILE, "artifacts/a.bin": "x"}}
    )
    request_id = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    ).json()["request_id"]
    response = logged_in(alice).get(reverse("ui:artifact", args=[request_id, "artifacts/a.bin"]))
    assert response.status_code == 302
    assert response["Location"] == reverse("job-artifact", args=[request_id, "artifacts/a.bin"])


def test_markdown_headings_go_one_level_down():
    assert render_markdown("# Title\n\n## Part\n\n###### Deep\n") == "<h2>Title</h2>\n<h3>Part</h3>\n<h6>Deep</h6>\n"
