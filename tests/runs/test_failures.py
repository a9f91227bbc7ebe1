"""How an auto run fails (R-LC1, R-LC12, R-OU1, R-TP2): every failure is `failed` with a stable
error code, in the status, the result and the event log alike."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.jobs import HAIKU_DATA, create_job, haiku_step, processes_in, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _finished(api, rid: str) -> tuple[dict, dict]:
    status = api.get(f"/v1/jobs/{rid}").json()
    result = api.get(f"/v1/jobs/{rid}/result")
    assert result.status_code == 200, (status, result.content)
    return status, result.json()["result"]


def _assert_failed(api, rid: str, code: str) -> tuple[dict, dict]:
    status, result = _finished(api, rid)
    assert status["status"] == "failed", status
    assert status["error"]["code"] == code, status["error"]
    assert status["error"]["message"]
    assert result["status"] == "failed"
    assert result["data"] is None
    assert result["error"]["code"] == code
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    final = [e for e in events if e["kind"] == "status"][-1]["payload"]
    assert final["to"] == "failed"
    assert final["error"]["code"] == code
    return status, result


def test_schema_invalid_output_fails(api, fake_codex):
    bad = {k: v for k, v in HAIKU_DATA.items() if k != "haiku"}
    fake_codex.script(haiku_step(message=json.dumps(bad)))
    rid = create_job(api)["request_id"]
    status, _ = _assert_failed(api, rid, "OUTPUT_SCHEMA_INVALID")
    assert "haiku" in status["error"]["message"]


def test_wrong_types_in_output_fail(api, fake_codex):
    fake_codex.script(haiku_step(message=json.dumps({**HAIKU_DATA, "haiku": "one line only"})))
    _assert_failed(api, create_job(api)["request_id"], "OUTPUT_SCHEMA_INVALID")


def test_message_without_json_fails_output_missing(api, fake_codex):
    """R-LC1: auto mode never waits; a message without JSON is a failed run."""
    fake_codex.script(haiku_step(message="I wrote the haiku, it is lovely. Shall I write another one?"))
    rid = create_job(api)["request_id"]
    status, _ = _assert_failed(api, rid, "OUTPUT_MISSING")
    assert status["pending_interaction_id"] is None


def test_no_agent_message_at_all_fails_output_missing(api, fake_codex):
    fake_codex.script({"files": {"artifacts/haiku.md": "x"}})
    _assert_failed(api, create_job(api)["request_id"], "OUTPUT_MISSING")


def test_ask_user_envelope_in_auto_mode_is_not_a_result(api, fake_codex):
    """R-LC1: auto never enters waiting_user; an envelope is not data."""
    envelope = {"ask_user": {"interaction_id": 1, "prompt": "Which season?"}}
    fake_codex.script(haiku_step(message=json.dumps(envelope)))
    rid = create_job(api)["request_id"]
    status, _ = _finished(api, rid)
    assert status["status"] == "failed"
    assert status["error"]["code"] in ("OUTPUT_MISSING", "OUTPUT_SCHEMA_INVALID")


def test_missing_required_artifact_fails_naming_the_file(api, fake_codex):
    """R-OU1: a required artifact property whose file is missing fails the run, naming the file."""
    fake_codex.script({"message": json.dumps(HAIKU_DATA)})  # no file written
    rid = create_job(api)["request_id"]
    status, result = _assert_failed(api, rid, "ARTIFACT_MISSING")
    assert "haiku.md" in status["error"]["message"]
    assert "haiku.md" in result["error"]["message"]


def test_missing_artifact_of_an_upstream_layout_skill(api, install_skill, fake_codex):
    install_skill("no-artifact")
    fake_codex.script({"message": json.dumps({"report": "artifacts/report.md"})})
    rid = create_job(api, "no-artifact")["request_id"]
    status, _ = _assert_failed(api, rid, "ARTIFACT_MISSING")
    assert "report.md" in status["error"]["message"]


def test_artifact_written_elsewhere_in_the_run_dir_is_collected(api, fake_codex):
    """An output file the agent wrote at the skill's own path is moved into artifacts/ (R-PA2 safety net)."""
    fake_codex.script(
        {"files": {"haiku.md": "a\nb\nc\n"}, "message": json.dumps({**HAIKU_DATA, "haiku_file": "haiku.md"})}
    )
    rid = create_job(api)["request_id"]
    status, result = _finished(api, rid)
    assert status["status"] == "succeeded", status
    assert result["artifacts"] == ["artifacts/haiku.md"]


def test_non_zero_exit_fails_engine_failed(api, fake_codex):
    """R-LC1: only exit 0 can succeed, even with a perfect answer."""
    fake_codex.script(haiku_step(exit=3, stderr="fatal: something broke\n"))
    rid = create_job(api)["request_id"]
    status, _ = _assert_failed(api, rid, "ENGINE_FAILED")
    assert "3" in status["error"]["message"] or "something broke" in status["error"]["message"]


def test_turn_failed_event_fails_engine_failed(api, fake_codex):
    fake_codex.script({"fail": "stream disconnected before completion: model overloaded"})
    rid = create_job(api)["request_id"]
    status, _ = _assert_failed(api, rid, "ENGINE_FAILED")
    assert "model overloaded" in status["error"]["message"]


def test_hard_timeout_kills_the_whole_process_group(api, probing_codex, settings):
    """R-LC12: past hard_timeout_seconds the engine's process group is killed (SIGTERM, then
    SIGKILL) and the run fails with TIMEOUT; no process of the group survives."""
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    probing_codex.fake.script(haiku_step(sleep=60))
    started = time.monotonic()
    rid = create_job(api, runtime_options={"hard_timeout_seconds": 1})["request_id"]
    elapsed = time.monotonic() - started
    status, _ = _assert_failed(api, rid, "TIMEOUT")
    assert elapsed < 15, elapsed
    assert probing_codex.spawns(), "the engine never started"
    assert wait_until(lambda: not processes_in(settings.DATA_DIR), timeout=3), "an engine process survived"


def test_engine_ignoring_sigterm_is_killed_after_the_grace_period(api, settings, tmp_path, configure_engine):
    """R-LC12: SIGTERM first, SIGKILL after SKILLRUNNER_KILL_GRACE_SECONDS; an engine that ignores
    SIGTERM cannot outlive its timeout by more than the grace."""
    from tests.support.jobs import write_executable

    (tmp_path / "engine").mkdir()
    binary = write_executable(
        tmp_path / "engine" / "codex",
        """#!/bin/sh
case "$*" in *--help*|*--version*) echo "codex-cli 0.0.0"; exit 0;; esac
trap '' TERM
echo '{{"type":"thread.started","thread_id":"t-1"}}'
sleep 60
""",
    )
    configure_engine("codex", binary=str(binary))
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 0.5
    started = time.monotonic()
    rid = create_job(api, runtime_options={"hard_timeout_seconds": 1})["request_id"]
    elapsed = time.monotonic() - started
    _assert_failed(api, rid, "TIMEOUT")
    assert elapsed < 4.0, f"the turn took {elapsed:.1f} s: the configured grace was not used"
    assert wait_until(lambda: not processes_in(settings.DATA_DIR), timeout=3), "the engine survived"


def test_missing_binary_fails_engine_spawn_failed(api, fake_codex, configure_engine, tmp_path):
    configure_engine("codex", binary=str(tmp_path / "no" / "such" / "codex"))
    rid = create_job(api)["request_id"]
    _assert_failed(api, rid, "ENGINE_SPAWN_FAILED")


def test_non_executable_binary_fails_engine_spawn_failed(api, configure_engine, tmp_path):
    binary = tmp_path / "codex"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o644)
    configure_engine("codex", binary=str(binary))
    _assert_failed(api, create_job(api)["request_id"], "ENGINE_SPAWN_FAILED")


def test_fenced_json_is_repaired_with_a_warning(api, fake_codex):
    """R-TP2: JSON only found in a fenced block → repair_level deterministic_generic and the
    warning OUTPUT_REPAIRED_GENERIC; the run still succeeds."""
    message = "Here is the haiku you asked for:\n\n```json\n" + json.dumps(HAIKU_DATA, indent=2) + "\n```\nEnjoy!"
    fake_codex.script(haiku_step(message=message))
    rid = create_job(api)["request_id"]
    status, result = _finished(api, rid)
    assert status["status"] == "succeeded", status
    assert result["data"] == HAIKU_DATA
    assert result["repair_level"] == "deterministic_generic"
    assert "OUTPUT_REPAIRED_GENERIC" in [w["code"] for w in result["validation_warnings"]]
    assert "OUTPUT_REPAIRED_GENERIC" in [w["code"] for w in status["warnings"]]
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    assert any(e["kind"] == "warning" and e["payload"]["code"] == "OUTPUT_REPAIRED_GENERIC" for e in events)


def test_json_embedded_in_prose_is_repaired(api, fake_codex):
    fake_codex.script(haiku_step(message="Done. " + json.dumps(HAIKU_DATA) + " That's all."))
    status, result = _finished(api, create_job(api)["request_id"])
    assert status["status"] == "succeeded"
    assert result["repair_level"] == "deterministic_generic"


def test_clean_json_needs_no_repair(api, fake_codex):
    """R-TP2 step 1: a message that parses as JSON as a whole (JSON allows surrounding
    whitespace) is no repair and carries no warning."""
    fake_codex.script(haiku_step(message="\n" + json.dumps(HAIKU_DATA) + "\n"))
    status, result = _finished(api, create_job(api)["request_id"])
    assert status["status"] == "succeeded"
    assert result["repair_level"] == "none"
    assert result["validation_warnings"] == []


def test_failed_run_keeps_logs_for_diagnosis(api, fake_codex):
    fake_codex.script({"fail": "quota exceeded", "stderr": "warning: retrying\n"})
    rid = create_job(api)["request_id"]
    logs = api.get(f"/v1/jobs/{rid}/logs").json()
    assert "turn.failed" in logs["stdout"]
    assert "retrying" in logs["stderr"]


def test_a_run_that_could_not_be_created_leaves_no_folder(api, monkeypatch, settings):
    """The run folder is made before the run commits (a worker may claim it at once); when the
    run is not created after all, its folder goes too: nothing half-written is left."""
    from runs.models import Run
    from runs.services import admission

    def database_gone(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(admission, "transition", database_gone)
    with pytest.raises(RuntimeError):
        api.post("/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "x"}}, format="json")
    assert not Run.objects.exists()
    runs = settings.DATA_DIR / "runs"
    assert not runs.exists() or not any(runs.iterdir())
