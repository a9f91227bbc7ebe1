"""An auto run from POST /v1/jobs to its result (R-LC1, R-OU1, R-OU2, R-UI1, SPEC §8).

Turns run inline (django-q2 sync mode), so the run is finished when POST /v1/jobs returns.
"""

from __future__ import annotations

import io
import json
import re
import uuid
import zipfile
from datetime import datetime

import pytest

from tests.support.clients import read_event_stream
from tests.support.jobs import HAIKU_DATA, HAIKU_TEXT, create_job, detail, error_code, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)

STATUS_FIELDS = {
    "request_id",
    "status",
    "skill_id",
    "engine",
    "execution_mode",
    "interactive_profile",
    "attempt_number",
    "created_at",
    "updated_at",
    "warnings",
    "error",
    "pending_interaction_id",
    "interaction_count",
    "auto_decision_count",
    "recovery_state",
}


@pytest.fixture
def succeeded(api, install_skill, fake_codex) -> str:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    return create_job(api)["request_id"]


def _iso(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None, value
    return parsed


def test_status_of_a_succeeded_run(api, succeeded):
    response = api.get(f"/v1/jobs/{succeeded}")
    assert response.status_code == 200
    status = response.json()
    assert STATUS_FIELDS <= set(status), STATUS_FIELDS - set(status)
    assert status["request_id"] == succeeded
    assert status["status"] == "succeeded"
    assert status["execution_mode"] == "auto"
    assert status["interactive_profile"] == "resumable"
    assert status["attempt_number"] == 1
    assert status["error"] is None
    assert status["warnings"] == []
    assert status["pending_interaction_id"] is None
    assert status["interaction_count"] == 0
    assert status["auto_decision_count"] == 0
    assert _iso(status["updated_at"]) >= _iso(status["created_at"])


def test_result_envelope(api, succeeded):
    """R-OU2: status, data (schema-valid output), artifacts relative to the run dir, repair level,
    warnings, error."""
    response = api.get(f"/v1/jobs/{succeeded}/result")
    assert response.status_code == 200
    body = response.json()
    assert body["request_id"] == succeeded
    assert body["result"] == {
        "status": "success",
        "data": HAIKU_DATA,
        "artifacts": ["artifacts/haiku.md"],
        "repair_level": "none",
        "validation_warnings": [],
        "error": None,
    }


def test_auto_mode_needs_no_done_marker_and_strips_one(api, install_skill, fake_codex):
    """R-LC1 + R-TP3: auto needs no marker; a marker that is there is stripped before validation
    (haiku-writer's output schema forbids additional properties)."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(message=json.dumps({**HAIKU_DATA, "__SKILL_DONE__": True})))
    rid = create_job(api)["request_id"]
    result = api.get(f"/v1/jobs/{rid}/result").json()["result"]
    assert result["status"] == "success", result
    assert "__SKILL_DONE__" not in result["data"]


def test_artifact_listing_and_download(api, succeeded):
    listing = api.get(f"/v1/jobs/{succeeded}/artifacts")
    assert listing.status_code == 200
    assert listing.json() == {"request_id": succeeded, "artifacts": ["artifacts/haiku.md"]}
    for path in ("artifacts/haiku.md", "haiku.md"):
        response = api.get(f"/v1/jobs/{succeeded}/artifacts/{path}")
        assert response.status_code == 200, path
        assert b"".join(response.streaming_content).decode() == HAIKU_TEXT
        assert "attachment" in response["Content-Disposition"]


@pytest.mark.parametrize(
    "path",
    [
        "artifacts/nothing.md",
        "../result/result.json",
        "artifacts/../logs/attempt-1.prompt.txt",
        "%2e%2e/%2e%2e/etc/passwd",
        "artifacts/",
        ".codex/skills/haiku-writer/SKILL.md",
    ],
)
def test_artifact_download_never_leaves_the_artifacts_dir(api, succeeded, path):
    response = api.get(f"/v1/jobs/{succeeded}/artifacts/{path}")
    assert response.status_code == 404, (path, response.status_code)


def test_bundle_holds_result_and_artifacts(api, succeeded):
    response = api.get(f"/v1/jobs/{succeeded}/bundle")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as bundle:
        names = sorted(bundle.namelist())
        assert "artifacts/haiku.md" in names
        result_names = [n for n in names if n.endswith("result.json")]
        assert len(result_names) == 1
        assert json.loads(bundle.read(result_names[0])) == api.get(f"/v1/jobs/{succeeded}/result").json()["result"]
        assert bundle.read("artifacts/haiku.md").decode() == HAIKU_TEXT
        assert not any(n.startswith((".codex", "logs", "uploads")) for n in names), names


def test_result_and_bundle_are_409_before_the_run_ends(api, install_skill, fake_codex, manual_dispatch):
    """SPEC §8: /result is terminal only (409 before)."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "queued"
    for suffix in ("/result", "/bundle"):
        response = api.get(f"/v1/jobs/{rid}{suffix}")
        assert response.status_code == 409, suffix
        assert error_code(response)
    assert api.get(f"/v1/jobs/{rid}/artifacts").json()["artifacts"] == []
    manual_dispatch.run_inline(rid)
    assert api.get(f"/v1/jobs/{rid}/result").status_code == 200


def test_result_is_409_while_running(api, install_skill, fake_codex, manual_dispatch):
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(sleep=1.0))
    rid = create_job(api)["request_id"]
    thread = manual_dispatch.run_in_thread(rid)
    from tests.support.jobs import wait_until

    assert wait_until(lambda: api.get(f"/v1/jobs/{rid}").json()["status"] == "running", timeout=5)
    assert api.get(f"/v1/jobs/{rid}/result").status_code == 409
    thread.join(timeout=10)
    assert api.get(f"/v1/jobs/{rid}/result").status_code == 200


def test_logs_show_prompt_and_output_with_secrets_redacted(api, install_skill, fake_codex, configure_engine):
    """SPEC §8 /logs: prompt, stdout, stderr, with the configured engine key and key-like strings redacted."""
    secret = "zq-provider-credential-7781-abcdef"
    configure_engine("codex", api_key=secret)
    install_skill("haiku-writer")
    fake_codex.script(
        haiku_step(stderr=f"debug: using credential {secret}\nOPENAI_API_KEY=sk-live-0123456789abcdefghij\n")
    )
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    response = api.get(f"/v1/jobs/{rid}/logs")
    assert response.status_code == 200
    logs = response.json()
    assert {"request_id", "prompt", "stdout", "stderr"} <= set(logs)
    assert "haiku-writer" in logs["prompt"] and '"sea"' in logs["prompt"]  # R-EN6
    assert "thread.started" in logs["stdout"]
    assert "debug: using credential" in logs["stderr"]
    assert secret not in response.content.decode()
    assert "sk-live-0123456789abcdefghij" not in response.content.decode()
    assert "[REDACTED]" in logs["stderr"]
    bundle = b"".join(api.get(f"/v1/jobs/{rid}/bundle").streaming_content)
    assert secret.encode() not in bundle


def test_prompt_lists_inputs_parameters_and_run_dir(api, install_skill, fake_codex):
    """R-EN6: the first-turn prompt names the skill, lists input and parameter values and the run dir."""
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api, parameter={"mood": "playful"})["request_id"]
    prompt = fake_codex.invocations()[0]["prompt"]
    assert "haiku-writer" in prompt
    assert '"sea"' in prompt and '"playful"' in prompt
    assert str(Run.objects.get(pk=rid).run_dir.resolve()) in prompt


def test_event_history_is_ordered_and_cursorable(api, succeeded):
    """R-UI1: seq 1, 2, 3 … per run; after_seq returns only later events."""
    response = api.get(f"/v1/jobs/{succeeded}/events/history?after_seq=0")
    assert response.status_code == 200
    body = response.json()
    events = body["events"]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    assert body["last_seq"] == seqs[-1]
    statuses = [e["payload"]["to"] for e in events if e["kind"] == "status"]
    assert statuses == ["queued", "running", "succeeded"]
    kinds = [e["kind"] for e in events]
    assert "assistant_message" in kinds
    results = [e["payload"] for e in events if e["kind"] == "result"]
    assert results == [api.get(f"/v1/jobs/{succeeded}/result").json()["result"]]
    for event in events:
        _iso(event["ts"])
    later = api.get(f"/v1/jobs/{succeeded}/events/history", {"after_seq": 2}).json()
    assert [e["seq"] for e in later["events"]] == seqs[2:]
    assert later["events"] == events[2:]
    done = api.get(f"/v1/jobs/{succeeded}/events/history", {"after_seq": seqs[-1]}).json()
    assert done["events"] == []
    assert done["last_seq"] == seqs[-1]


@pytest.mark.parametrize("accept", [None, "*/*", "text/event-stream", "text/event-stream, application/json;q=0.5"])
def test_event_stream_replays_the_log_and_ends(api, succeeded, accept):
    """SPEC §8 /events: the same events as server-sent events, ending once the run is terminal;
    R-OP8: whatever Accept an SSE client sends (EventSource sends text/event-stream)."""
    history = api.get(f"/v1/jobs/{succeeded}/events/history?after_seq=0").json()["events"]
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    response = api.get(f"/v1/jobs/{succeeded}/events", {"after_seq": 1}, **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    text = read_event_stream(response)
    ids = [int(i) for i in re.findall(r"^id: (\d+)$", text, re.MULTILINE)]
    assert ids == [e["seq"] for e in history[1:]]
    frames = [json.loads(d) for d in re.findall(r"^data: (\{.*\})$", text, re.MULTILINE) if d != "{}"]
    assert [f["seq"] for f in frames] == ids
    assert "event: end" in text


def test_event_stream_errors_are_json_whatever_the_accept_header(api):
    """R-OP8: an SSE client asking for an unknown run gets the coded JSON 404, not a 406."""
    response = api.get(f"/v1/jobs/{uuid.uuid4()}/events", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"]["code"] == "RUN_NOT_FOUND"


def test_job_list_filters(api, succeeded):
    listed = api.get("/v1/jobs").json()
    assert [r["request_id"] for r in listed["results"]] == [succeeded]
    assert api.get("/v1/jobs", {"status": "succeeded"}).json()["results"][0]["request_id"] == succeeded
    assert api.get("/v1/jobs", {"status": "failed"}).json()["results"] == []
    assert api.get("/v1/jobs", {"skill_id": "haiku-writer"}).json()["results"][0]["request_id"] == succeeded
    assert api.get("/v1/jobs", {"skill_id": "other"}).json()["results"] == []
    bad = api.get("/v1/jobs", {"status": "finished"})
    assert bad.status_code == 400
    assert detail(bad)["code"]


def test_job_list_is_paginated(api, install_skill, fake_codex, manual_dispatch):
    install_skill("haiku-writer")
    created = [create_job(api)["request_id"] for _ in range(5)]
    page = api.get("/v1/jobs", {"page_size": 2}).json()
    assert page["count"] == 5
    assert len(page["results"]) == 2
    assert page["next"]
    everything = []
    for number in (1, 2, 3):
        everything += [r["request_id"] for r in api.get("/v1/jobs", {"page_size": 2, "page": number}).json()["results"]]
    assert sorted(everything) == sorted(created)
    assert everything == created[::-1]  # newest first


def test_interaction_endpoints_on_an_auto_run(api, succeeded):
    """SPEC §8: pending is 400 for auto runs; R-LC5: a reply to a run that is not interactive is 400;
    the history of an auto run is empty."""
    pending = api.get(f"/v1/jobs/{succeeded}/interaction/pending")
    assert pending.status_code == 400
    assert error_code(pending)
    reply = api.post(f"/v1/jobs/{succeeded}/interaction/reply", {"interaction_id": 1, "response": "yes"}, format="json")
    assert reply.status_code == 400
    assert error_code(reply)
    history = api.get(f"/v1/jobs/{succeeded}/interaction/history")
    assert history.status_code == 200
    assert history.json()["interactions"] == []


def test_request_id_is_a_uuid(api, succeeded):
    assert str(uuid.UUID(succeeded)) == succeeded


def test_run_dir_layout(api, succeeded, settings):
    """The artifact lives under the run's artifacts/ and the engine worked in the run dir."""
    from runs.models import Run

    run = Run.objects.get(pk=succeeded)
    assert (run.run_dir / "artifacts" / "haiku.md").read_text() == HAIKU_TEXT
    assert run.run_dir.is_relative_to(settings.DATA_DIR)
