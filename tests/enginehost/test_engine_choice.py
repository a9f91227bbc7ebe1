"""Honest choices on the new-run form (issue 30, item 3): the engines that can run here are
offered, the others shown disabled with their reason; the default model; the cache switch;
required text of spaces alone refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from enginehost.choice import engine_choice, engine_choices
from enginehost.config import VERSION_PROBE_THREADS
from engines.registry import ENGINE_NAMES
from runs.models import Run
from tests.runs.test_pages import logged_in
from tests.support.web_clients import write_skill

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli_dir(tmp_path, settings):
    """The project-local CLI folder (`make engines`), empty: engines are found here or not at all."""
    folder = tmp_path / "cli-bin"
    folder.mkdir()
    settings.SKILLRUNNER_ENGINE_CLI_BIN_DIR = folder
    settings.SKILLRUNNER_ENGINES = {
        name: {"binary": "", "base_url": "", "api_key": "", "model": ""} for name in settings.SKILLRUNNER_ENGINES
    }
    return folder


def install_cli(folder, engine: str) -> None:
    """A CLI that answers `--version` like the real ones do, installed where `make engines` puts them."""
    script = folder / engine
    script.write_text("#!/bin/sh\necho '1.2.3'\n")
    script.chmod(0o755)


def install_meeting_cli(folder, engine: str, meeting: Path, together: int) -> None:
    """A CLI whose `--version` notes when it starts and waits (10 s at most) until `together`
    probes have started: run one after another, each would meet only itself. It notes when it
    ends and how many it met."""
    script = folder / engine
    script.write_text(
        f"#!{sys.executable} -I\n"
        "import pathlib, time\n"
        f"meeting, name = pathlib.Path({str(meeting)!r}), {engine!r}\n"
        "(meeting / f'{name}.started').write_text(repr(time.time()))\n"
        "deadline = time.monotonic() + 10\n"
        f"while len(list(meeting.glob('*.started'))) < {together} and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "met = len(list(meeting.glob('*.started')))\n"
        "(meeting / f'{name}.ended').write_text(f'{time.time()!r} {met}')\n"
        "print('1.2.3')\n"
    )
    script.chmod(0o755)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    return max(sum(start <= moment < end for start, end in intervals) for moment, _ in intervals)


def test_the_forms_engine_clis_answer_their_version_side_by_side_once(cli_dir, install_skill, tmp_path):
    """The first form after a start asked seven Node CLIs for their version one after another
    (over 15 s on a loaded machine); now a few at a time, and the answers are kept."""
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    for engine in ENGINE_NAMES:
        install_meeting_cli(cli_dir, engine, meeting, together=VERSION_PROBE_THREADS)
    root = tmp_path / "skills-src"
    write_skill(root, "every-engine", input_schema={}, parameter_schema={}, engines=ENGINE_NAMES)
    version = install_skill("every-engine", root)

    choices = engine_choices(version)

    assert [choice.engine for choice in choices] == list(ENGINE_NAMES)
    assert all(choice.reason.startswith("not configured") for choice in choices)  # installed: each answered
    ended = {engine: (meeting / f"{engine}.ended").read_text().split() for engine in ENGINE_NAMES}
    met_fewer = [engine for engine, (_, met) in ended.items() if int(met) < VERSION_PROBE_THREADS]
    assert met_fewer == []  # a full pool of probes ran together
    intervals = [
        (float((meeting / f"{engine}.started").read_text()), float(ended[engine][0])) for engine in ENGINE_NAMES
    ]
    assert most_at_once(intervals) <= VERSION_PROBE_THREADS  # bounded: never all seven Node CLIs at once
    engine_choices(version)
    assert len(list(meeting.glob("*.started"))) == len(ENGINE_NAMES)  # the second form asks none of them


def test_an_engine_without_its_cli_is_not_installed(cli_dir, monkeypatch):
    monkeypatch.setenv("PATH", str(cli_dir))
    choice = engine_choice("gemini")
    assert not choice.usable
    assert choice.reason == f"not installed here: its CLI ({'gemini'}) was not found"


def test_an_installed_engine_nobody_configured_is_not_offered(cli_dir):
    install_cli(cli_dir, "gemini")
    choice = engine_choice("gemini")
    assert (choice.usable, choice.reason) == (
        False,
        "not configured: the operator sets SKILLRUNNER_GEMINI_API_KEY (or _BASE_URL)",
    )


@pytest.mark.parametrize("setting", ["api_key", "base_url", "binary"])
def test_an_engine_with_a_key_or_an_endpoint_is_offered(cli_dir, configure_engine, setting):
    install_cli(cli_dir, "gemini")
    values = {"api_key": "k-123", "base_url": "https://provider.example/", "binary": str(cli_dir / "gemini")}
    configure_engine("gemini", **{setting: values[setting]})
    assert engine_choice("gemini").usable and engine_choice("gemini").reason == ""


def test_an_engine_the_sandbox_cannot_confine_is_not_offered(cli_dir, configure_engine, monkeypatch):
    """Installed and configured, but bubblewrap does not work here: its runs would fail at once."""
    install_cli(cli_dir, "gemini")
    configure_engine("gemini", api_key="k-123")
    monkeypatch.setattr("enginehost.choice.sandbox_status", lambda: {"available": False, "detail": "no userns"})
    choice = engine_choice("gemini")
    assert (choice.usable, choice.reason) == (False, "the agent sandbox does not work here: no userns")


def test_the_default_model_is_the_skills_own_else_the_operators(cli_dir, configure_engine, install_skill, tmp_path):
    install_cli(cli_dir, "codex")
    configure_engine("codex", api_key="k-123", model="operator-model")
    assert engine_choice("codex").default_model == "operator-model"
    root = tmp_path / "skills-src"
    folder = write_skill(root, "tuned", input_schema={}, parameter_schema={})
    (folder / "assets" / "codex_config.toml").write_text('model = "skill-model"\n')
    version = install_skill("tuned", root)
    assert engine_choice("codex", version).default_model == "skill-model"
    assert engine_choice("gemini", version).default_model is None


def test_the_form_offers_what_can_run_and_says_why_the_rest_cannot(
    alice, admin_user, cli_dir, configure_engine, showcase_skill
):
    install_cli(cli_dir, "codex")
    install_cli(cli_dir, "gemini")
    configure_engine("codex", api_key="k-123", model="gpt-test")
    # What the operator sets up is for staff (issue 41, item 6); a user learns only that some are not.
    users = logged_in(alice).get(reverse("ui:run-new", args=["form-showcase"])).content.decode()
    assert "SKILLRUNNER_" not in users and "<strong>gemini</strong>" not in users
    assert "of this skill's engines are not set up on this service; ask its operator" in users
    page = logged_in(admin_user).get(reverse("ui:run-new", args=["form-showcase"]))
    html = page.content.decode()
    assert '<option value="codex" selected data-default-model="gpt-test">codex</option>' in html
    assert '<option value="gemini" data-default-model="" disabled>gemini (unavailable)</option>' in html
    assert "<strong>gemini</strong>: not configured: the operator sets SKILLRUNNER_GEMINI_API_KEY" in html
    assert "Leave empty for the default model: gpt-test." in html
    assert 'name="reuse_cached" aria-describedby="id_reuse_cached_helptext" id="id_reuse_cached" checked' in html


def test_required_fields_are_marked_and_skill_cards_say_which_engines_run(
    alice, cli_dir, configure_engine, install_skill
):
    install_skill("haiku-writer")
    install_cli(cli_dir, "codex")
    configure_engine("codex", api_key="k-123")
    client = logged_in(alice)
    form = client.get(reverse("ui:run-new", args=["haiku-writer"])).content.decode()
    assert '<label for="id_input__topic" class="required">Topic</label>' in form
    assert '<label for="id_model">Model</label>' in form  # optional: no mark
    assert "Fields marked" in form and "are required." in form
    cards = client.get(reverse("ui:choose-skill")).content.decode()
    assert '<dt>Runs on</dt><dd class="engines-ready">codex</dd>' in cards
    assert "gemini" not in cards  # the engines that cannot run here are not listed as if they could


def test_an_unavailable_engine_posted_anyway_is_refused(alice, cli_dir, configure_engine, showcase_skill):
    install_cli(cli_dir, "gemini")
    form = {"input__name": "abc", "input__count": "1", "engine": "gemini", "execution_mode": "auto"}
    page = logged_in(alice).post(reverse("ui:run-new", args=["form-showcase"]), form)
    assert (
        "gemini cannot run here: not configured" in page.content.decode()
        and "(ENGINE_UNAVAILABLE)" in page.content.decode()
    )
    assert not Run.objects.exists()


def test_required_text_of_spaces_alone_is_refused(alice, install_skill, fake_codex):
    install_skill("haiku-writer")
    client = logged_in(alice)
    url = reverse("ui:run-new", args=["haiku-writer"])
    page = client.post(url, {"input__topic": "   ", "engine": "codex", "execution_mode": "auto"})
    assert "Enter some text: spaces alone are not an answer." in page.content.decode()
    assert not Run.objects.exists()


def test_the_cache_switch_decides_whether_an_earlier_result_may_answer(alice, install_skill, fake_codex):
    install_skill("haiku-writer")
    haiku = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/h.md"}
    fake_codex.script({"message": json.dumps(haiku), "files": {"artifacts/h.md": "a\nb\nc\n"}})
    client = logged_in(alice)
    url = reverse("ui:run-new", args=["haiku-writer"])
    form = {"input__topic": "sea", "engine": "codex", "execution_mode": "auto"}
    client.post(url, {**form, "reuse_cached": "on"})
    client.post(url, {**form, "reuse_cached": "on"})
    client.post(url, form)
    first, cached, fresh = Run.objects.order_by("created_at")
    assert first.status == "succeeded"
    assert (first.cache_hit, cached.cache_hit, fresh.cache_hit) == (False, True, False)
    assert fresh.runtime_options["no_cache"] is True
    assert len(fake_codex.invocations()) == 2


def test_the_run_page_names_the_model_a_run_without_one_used(alice, api, install_skill, fake_codex, configure_engine):
    from enginehost.choice import run_model

    install_skill("haiku-writer")
    configure_engine("codex", model="operator-model")
    fake_codex.script({"fail": "no"})
    body = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}
    default = Run.objects.get(pk=api.post("/v1/jobs", body, format="json").json()["request_id"])
    chosen = Run.objects.get(pk=api.post("/v1/jobs", {**body, "model": "gpt-5.5"}, format="json").json()["request_id"])
    assert (run_model(default), run_model(chosen)) == ("operator-model", "gpt-5.5")
    page = logged_in(alice).get(reverse("ui:run-detail", args=[default.pk])).content.decode()
    assert 'codex <span class="muted">(default: operator-model)</span>' in page
