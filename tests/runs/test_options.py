"""runs.options.resolve_options (R-AD4): whitelist, strict types, aliases, skill defaults underneath."""

from __future__ import annotations

import pytest

from kernel.errors import ApplicationError
from runs.options import resolve_options


def _resolve(requested, defaults=None):
    options, warnings = resolve_options(requested, defaults or {})
    return options.as_dict(), warnings


def _error(requested, defaults=None) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        resolve_options(requested, defaults or {})
    assert info.value.status_code == 400
    return info.value


def test_defaults(settings):
    settings.SKILLRUNNER_DEFAULT_SESSION_TIMEOUT = 1200
    settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT = 1200
    for requested in (None, {}):
        options, warnings = _resolve(requested)
        assert options == {
            "execution_mode": "auto",
            "interactive_require_user_reply": True,
            "session_timeout_sec": 1200,
            "hard_timeout_seconds": 1200,
            "no_cache": False,
            "max_repair_rounds": 2,
        }
        assert warnings == []


def test_server_defaults_come_from_settings(settings):
    settings.SKILLRUNNER_DEFAULT_SESSION_TIMEOUT = 15
    settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT = 25
    options, _ = _resolve({})
    assert (options["session_timeout_sec"], options["hard_timeout_seconds"]) == (15, 25)


@pytest.mark.parametrize(
    "requested,key",
    [
        ({"bogus": 1}, "bogus"),
        ({"execution_mode": "AUTO"}, "execution_mode"),
        ({"execution_mode": ""}, "execution_mode"),
        ({"interactive_require_user_reply": 0}, "interactive_require_user_reply"),
        ({"interactive_require_user_reply": None}, "interactive_require_user_reply"),
        ({"interactive_auto_reply": "yes"}, "interactive_auto_reply"),
        ({"no_cache": 1}, "no_cache"),
        ({"session_timeout_sec": 0}, "session_timeout_sec"),
        ({"session_timeout_sec": False}, "session_timeout_sec"),
        ({"session_timeout_sec": 2.0}, "session_timeout_sec"),
        ({"interactive_reply_timeout_sec": -1}, "interactive_reply_timeout_sec"),
        ({"hard_timeout_seconds": "5"}, "hard_timeout_seconds"),
        ({"max_repair_rounds": -1}, "max_repair_rounds"),
        ({"max_repair_rounds": "2"}, "max_repair_rounds"),
        ({"max_repair_rounds": True}, "max_repair_rounds"),
        ({"max_repair_rounds": 1.5}, "max_repair_rounds"),
    ],
)
def test_invalid_values_name_their_key(requested, key):
    error = _error(requested)
    assert error.code == "RUNTIME_OPTION_INVALID"
    assert key in error.message
    assert error.extra.get("key") == key


def test_hard_timeout_has_an_upper_bound(settings):
    settings.SKILLRUNNER_MAX_HARD_TIMEOUT = 100
    assert _resolve({"hard_timeout_seconds": 100})[0]["hard_timeout_seconds"] == 100
    assert "hard_timeout_seconds" in _error({"hard_timeout_seconds": 101}).message


@pytest.mark.parametrize("key", ["session_timeout_sec", "interactive_reply_timeout_sec"])
def test_session_timeout_has_an_upper_bound_R_FS1(settings, key):
    """A long wait holds a slot (sticky runs), so the session timeout is bounded too."""
    settings.SKILLRUNNER_MAX_SESSION_TIMEOUT = 100
    assert _resolve({key: 100})[0]["session_timeout_sec"] == 100
    error = _error({key: 101})
    assert error.code == "RUNTIME_OPTION_INVALID" and error.extra["key"] == key
    assert error.message == f"runtime_options.{key}: must be at most 100"


def test_repair_rounds_default_to_two_and_are_bounded_by_the_operator(settings):
    """R-RP1: max_repair_rounds defaults to 2, 0 turns repair off, the operator caps it."""
    settings.SKILLRUNNER_MAX_REPAIR_ROUNDS = 3
    assert _resolve({})[0]["max_repair_rounds"] == 2
    assert _resolve({"max_repair_rounds": 0})[0]["max_repair_rounds"] == 0
    assert _resolve({"max_repair_rounds": 3})[0]["max_repair_rounds"] == 3
    assert _error({"max_repair_rounds": 4}).message == (
        "runtime_options.max_repair_rounds: must be an integer from 0 (no repair) to 3"
    )
    settings.SKILLRUNNER_MAX_REPAIR_ROUNDS = 1
    assert _resolve({})[0]["max_repair_rounds"] == 1  # the default never exceeds the cap


def test_a_skill_may_set_the_default_repair_rounds():
    assert _resolve({}, {"max_repair_rounds": 0})[0]["max_repair_rounds"] == 0
    assert _resolve({"max_repair_rounds": 1}, {"max_repair_rounds": 0})[0]["max_repair_rounds"] == 1
    options, warnings = _resolve({}, {"max_repair_rounds": "many"})
    assert options["max_repair_rounds"] == 2
    assert [w["code"] for w in warnings] == ["SKILL_RUNTIME_DEFAULT_OPTION_IGNORED"]


@pytest.mark.parametrize("requested", [[], "x", 5, True])
def test_options_must_be_an_object(requested):
    assert _error(requested).code == "RUNTIME_OPTION_INVALID"


def test_aliases():
    assert _resolve({"interactive_auto_reply": True})[0]["interactive_require_user_reply"] is False
    assert _resolve({"interactive_auto_reply": False})[0]["interactive_require_user_reply"] is True
    assert _resolve({"interactive_reply_timeout_sec": 5})[0]["session_timeout_sec"] == 5
    options, _ = _resolve(
        {
            "interactive_auto_reply": True,
            "interactive_require_user_reply": False,
            "interactive_reply_timeout_sec": 5,
            "session_timeout_sec": 5,
        }
    )
    assert (options["interactive_require_user_reply"], options["session_timeout_sec"]) == (False, 5)
    assert "interactive_auto_reply" not in options and "interactive_reply_timeout_sec" not in options


@pytest.mark.parametrize(
    "requested",
    [
        {"interactive_auto_reply": True, "interactive_require_user_reply": True},
        {"interactive_reply_timeout_sec": 5, "session_timeout_sec": 6},
    ],
)
def test_contradicting_aliases(requested):
    error = _error(requested)
    assert error.code == "RUNTIME_OPTION_CONFLICT"


def test_skill_defaults_sit_under_the_request():
    defaults = {"hard_timeout_seconds": 2400, "execution_mode": "interactive", "interactive_auto_reply": True}
    options, warnings = _resolve({}, defaults)
    assert options["hard_timeout_seconds"] == 2400
    assert options["execution_mode"] == "interactive"
    assert options["interactive_require_user_reply"] is False
    assert warnings == []
    options, _ = _resolve(
        {"hard_timeout_seconds": 7, "execution_mode": "auto", "interactive_require_user_reply": True}, defaults
    )
    assert (options["hard_timeout_seconds"], options["execution_mode"], options["interactive_require_user_reply"]) == (
        7,
        "auto",
        True,
    )


def test_request_alias_overrides_skill_default_canonical_key():
    """A request's interactive_auto_reply beats a skill default given under the seed's name."""
    options, _ = _resolve({"interactive_auto_reply": True}, {"interactive_require_user_reply": True})
    assert options["interactive_require_user_reply"] is False


def test_invalid_skill_defaults_are_dropped_with_warnings():
    options, warnings = _resolve({}, {"hard_timeout_seconds": 0, "verbose": 2, "session_timeout_sec": 30})
    assert options["hard_timeout_seconds"] != 0
    assert options["session_timeout_sec"] == 30
    assert [w["code"] for w in warnings] == ["SKILL_RUNTIME_DEFAULT_OPTION_IGNORED"] * 2
    assert any("verbose" in w["message"] for w in warnings)


def test_request_is_not_mutated():
    requested = {"interactive_auto_reply": True, "interactive_reply_timeout_sec": 9}
    _resolve(requested)
    assert requested == {"interactive_auto_reply": True, "interactive_reply_timeout_sec": 9}
