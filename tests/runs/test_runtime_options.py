"""runtime_options through POST /v1/jobs (R-AD4): whitelist, strict types, aliases, defaults.

Inside one transaction nothing is dispatched, so the effective options are read off the queued run.
"""

from __future__ import annotations

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import clone_skill, detail, job_body

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _effective(api, options):
    from runs.models import Run

    response = api.post("/v1/jobs", job_body(runtime_options=options), format="json")
    assert response.status_code == 200, response.content
    return Run.objects.get(pk=response.json()["request_id"]).runtime_options


def _refused(api, options):
    from runs.models import Run

    before = Run.objects.count()
    response = api.post("/v1/jobs", job_body(runtime_options=options), format="json")
    assert response.status_code == 400, (options, response.content)
    assert Run.objects.count() == before
    return detail(response)


def test_defaults(api, settings):
    """R-AD4 defaults: require_user_reply true, session timeout 1200, hard timeout 1200, no_cache false."""
    options = _effective(api, {})
    assert options["execution_mode"] == "auto"
    assert options["interactive_require_user_reply"] is True
    assert options["session_timeout_sec"] == 1200
    assert options["hard_timeout_seconds"] == 1200
    assert options["no_cache"] is False
    assert options["max_repair_rounds"] == 2  # R-RP1


def test_server_default_session_timeout_is_configurable(api, settings):
    settings.SKILLRUNNER_DEFAULT_SESSION_TIMEOUT = 77
    settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT = 33
    options = _effective(api, {})
    assert options["session_timeout_sec"] == 77
    assert options["hard_timeout_seconds"] == 33


def test_explicit_values_are_kept(api):
    options = _effective(
        api,
        {
            "execution_mode": "interactive",
            "interactive_require_user_reply": False,
            "session_timeout_sec": 30,
            "hard_timeout_seconds": 45,
            "no_cache": True,
            "max_repair_rounds": 0,
            "max_tokens": 5000,
        },
    )
    assert options == {
        "execution_mode": "interactive",
        "interactive_require_user_reply": False,
        "session_timeout_sec": 30,
        "hard_timeout_seconds": 45,
        "no_cache": True,
        "max_repair_rounds": 0,
        "max_tokens": 5000,
    }


@pytest.mark.parametrize(
    "options,key",
    [
        ({"verbose": 1}, "verbose"),
        ({"debug": True}, "debug"),
        ({"no_cache": True, "workspace": "x"}, "workspace"),
        ({"execution_mode": "manual"}, "execution_mode"),
        ({"execution_mode": 1}, "execution_mode"),
        ({"execution_mode": None}, "execution_mode"),
        ({"interactive_require_user_reply": "yes"}, "interactive_require_user_reply"),
        ({"interactive_require_user_reply": 1}, "interactive_require_user_reply"),
        ({"interactive_auto_reply": "false"}, "interactive_auto_reply"),
        ({"no_cache": "true"}, "no_cache"),
        ({"session_timeout_sec": 0}, "session_timeout_sec"),
        ({"session_timeout_sec": -5}, "session_timeout_sec"),
        ({"session_timeout_sec": "60"}, "session_timeout_sec"),
        ({"session_timeout_sec": 1.5}, "session_timeout_sec"),
        ({"session_timeout_sec": True}, "session_timeout_sec"),
        ({"interactive_reply_timeout_sec": 0}, "interactive_reply_timeout_sec"),
        ({"hard_timeout_seconds": 0}, "hard_timeout_seconds"),
        ({"hard_timeout_seconds": None}, "hard_timeout_seconds"),
        ({"hard_timeout_seconds": [10]}, "hard_timeout_seconds"),
        ({"hard_timeout_seconds": 10**30}, "hard_timeout_seconds"),
        ({"max_repair_rounds": -1}, "max_repair_rounds"),
        ({"max_repair_rounds": "2"}, "max_repair_rounds"),
        ({"max_repair_rounds": 10**6}, "max_repair_rounds"),
    ],
)
def test_unknown_keys_and_wrong_types_are_400_naming_the_key(api, options, key):
    """R-AD4: unknown keys or wrong types → 400 naming the key."""
    body = _refused(api, options)
    assert isinstance(body, dict) and body.get("code"), body
    assert key in body["message"], body


def test_auto_reply_alias_maps_to_require_user_reply(api):
    """R-AD4: interactive_auto_reply = not interactive_require_user_reply."""
    assert _effective(api, {"interactive_auto_reply": True})["interactive_require_user_reply"] is False
    assert _effective(api, {"interactive_auto_reply": False})["interactive_require_user_reply"] is True


def test_reply_timeout_alias_maps_to_session_timeout(api):
    assert _effective(api, {"interactive_reply_timeout_sec": 42})["session_timeout_sec"] == 42


def test_agreeing_pairs_are_accepted(api):
    options = _effective(
        api,
        {
            "interactive_auto_reply": True,
            "interactive_require_user_reply": False,
            "interactive_reply_timeout_sec": 9,
            "session_timeout_sec": 9,
        },
    )
    assert options["interactive_require_user_reply"] is False
    assert options["session_timeout_sec"] == 9


@pytest.mark.parametrize(
    "options",
    [
        {"interactive_auto_reply": True, "interactive_require_user_reply": True},
        {"interactive_auto_reply": False, "interactive_require_user_reply": False},
        {"interactive_reply_timeout_sec": 10, "session_timeout_sec": 20},
    ],
)
def test_contradicting_pairs_are_400(api, options):
    body = _refused(api, options)
    assert body["code"]


@pytest.mark.parametrize("value", [[], "auto", 3, True])
def test_runtime_options_must_be_an_object(api, value):
    from runs.models import Run

    response = api.post("/v1/jobs", {**job_body(), "runtime_options": value}, format="json")
    assert response.status_code == 400
    assert "runtime_options" in str(detail(response))
    assert Run.objects.count() == 0


def test_skill_default_options_apply_under_request_values(api, install_skill, tmp_path):
    """runner.json runtime.default_options sit under the request's options (R-SK2)."""
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path / "pkgs",
        skill_id="slow-haiku",
        manifest={"runtime": {"default_options": {"hard_timeout_seconds": 2400, "session_timeout_sec": 60}}},
    )
    install_skill("slow-haiku", root=folder.parent)
    from runs.models import Run

    def effective(options):
        response = api.post(
            "/v1/jobs", job_body("slow-haiku", input={"topic": "sea"}, runtime_options=options), format="json"
        )
        assert response.status_code == 200, response.content
        return Run.objects.get(pk=response.json()["request_id"]).runtime_options

    assert effective({})["hard_timeout_seconds"] == 2400
    assert effective({})["session_timeout_sec"] == 60
    assert effective({"hard_timeout_seconds": 5})["hard_timeout_seconds"] == 5


def test_bad_skill_default_is_ignored_with_a_warning(api, install_skill, tmp_path):
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path / "pkgs",
        skill_id="odd-haiku",
        manifest={
            "runtime": {"default_options": {"hard_timeout_seconds": -1, "verbose": 2, "session_timeout_sec": 60}}
        },
    )
    install_skill("odd-haiku", root=folder.parent)
    response = api.post("/v1/jobs", job_body("odd-haiku", input={"topic": "sea"}), format="json")
    assert response.status_code == 200, response.content
    status = api.get(f"/v1/jobs/{response.json()['request_id']}").json()
    codes = [w["code"] for w in status["warnings"]]
    assert codes.count("SKILL_RUNTIME_DEFAULT_OPTION_IGNORED") == 2
    from runs.models import Run

    options = Run.objects.get(pk=status["request_id"]).runtime_options
    assert options["hard_timeout_seconds"] == 1200
    assert options["session_timeout_sec"] == 60
