"""`/logs` is paginated and streamed (R-FS2): the JSON answer holds at most a capped head of each
log, with the whole size; `?stream=` serves a whole log (or a `Range` of it) a chunk at a time."""

from __future__ import annotations

import hashlib
import time
import tracemalloc

import pytest

from tests.support.jobs import create_job, error_code, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)

LINE = "agent output line 0123456789 ABCDEFGHIJ\n"  # 40 bytes
LINES = 150_000  # 6 MB of shell output, echoed in the engine's JSON events on stdout
CAP = 1024 * 1024


@pytest.fixture
def loud_run(api, install_skill, fake_codex, settings) -> str:
    settings.SKILLRUNNER_LOG_TEXT_MAX_BYTES = CAP
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(shell=f"yes '{LINE.strip()}' | head -n {LINES}"))
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    return rid


def _log_bytes(rid: str, stream: str) -> bytes:
    from runs.models import Run

    return (Run.objects.get(pk=rid).records_dir / "logs" / f"attempt-1.{stream}.txt").read_bytes()


def test_a_5_mb_stdout_is_capped_in_json_with_its_size_R_FS2(api, loud_run):
    stdout = _log_bytes(loud_run, "stdout")
    assert len(stdout) > 5 * 1024 * 1024
    tracemalloc.start()
    try:
        started = time.monotonic()
        response = api.get(f"/v1/jobs/{loud_run}/logs")
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 200
    logs = response.json()
    assert peak < 12 * CAP, peak  # a few copies of the capped text, not of the whole log
    assert elapsed < 5, elapsed
    assert len(response.content) < 2 * CAP
    assert logs["attempt_number"] == 1
    assert logs["stdout_truncated"] is True and logs["stdout_bytes"] == len(stdout)
    assert stdout.decode().startswith(logs["stdout"]) and CAP - 4 < len(logs["stdout"].encode()) <= CAP
    assert "thread.started" in logs["stdout"]
    # Small logs come whole, as before.
    assert logs["prompt_truncated"] is False and logs["prompt"] == _log_bytes(loud_run, "prompt").decode()
    assert "haiku-writer" in logs["prompt"]
    assert logs["attempts"] == [
        {
            "attempt_number": 1,
            "prompt_bytes": logs["prompt_bytes"],
            "stdout_bytes": len(stdout),
            "stderr_bytes": logs["stderr_bytes"],
        }
    ]


def test_the_whole_log_streams_in_bounded_chunks_R_FS2(api, loud_run):
    stdout = _log_bytes(loud_run, "stdout")
    response = api.get(f"/v1/jobs/{loud_run}/logs", {"attempt": 1, "stream": "stdout"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Length"] == str(len(stdout)) and response["Accept-Ranges"] == "bytes"
    received, digest = 0, hashlib.sha256()
    tracemalloc.start()
    try:
        for chunk in response.streaming_content:
            assert len(chunk) <= 64 * 1024
            received += len(chunk)
            digest.update(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received == len(stdout) and digest.digest() == hashlib.sha256(stdout).digest()
    assert peak < CAP, peak


def test_a_range_of_the_log_answers_206_R_FS2(api, loud_run):
    stdout = _log_bytes(loud_run, "stdout")
    url, query = f"/v1/jobs/{loud_run}/logs", {"stream": "stdout"}  # the latest attempt
    tail = api.get(url, query, HTTP_RANGE="bytes=-100")
    assert tail.status_code == 206 and b"".join(tail.streaming_content) == stdout[-100:]
    assert tail["Content-Range"] == f"bytes {len(stdout) - 100}-{len(stdout) - 1}/{len(stdout)}"
    middle = api.get(url, query, HTTP_RANGE="bytes=10-19")
    assert middle.status_code == 206 and b"".join(middle.streaming_content) == stdout[10:20]
    rest = api.get(url, query, HTTP_RANGE=f"bytes={len(stdout) - 5}-")
    assert b"".join(rest.streaming_content) == stdout[-5:]
    past = api.get(url, query, HTTP_RANGE=f"bytes={len(stdout)}-")
    assert past.status_code == 416 and error_code(past) == "RANGE_NOT_SATISFIABLE"
    assert past["Content-Range"] == f"bytes */{len(stdout)}"
    for ignored in ("lines=1-2", "bytes=5-1", "bytes=1-2,4-5", "bytes=x-"):
        whole = api.get(url, query, HTTP_RANGE=ignored)
        assert whole.status_code == 200 and whole["Content-Length"] == str(len(stdout)), ignored


@pytest.fixture
def small_run(api, install_skill, fake_codex) -> str:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(stderr="a warning\n"))
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    return rid


@pytest.mark.parametrize(
    "query, status, code",
    [
        ({"attempt": "0"}, 400, "INVALID_ATTEMPT"),
        ({"attempt": "-1"}, 400, "INVALID_ATTEMPT"),
        ({"attempt": "1.5"}, 400, "INVALID_ATTEMPT"),
        ({"attempt": "one"}, 400, "INVALID_ATTEMPT"),
        ({"attempt": "１"}, 400, "INVALID_ATTEMPT"),  # a fullwidth digit
        ({"attempt": "9" * 40}, 400, "INVALID_ATTEMPT"),
        ({"attempt": ""}, 400, "INVALID_ATTEMPT"),
        ({"attempt": "2"}, 404, "ATTEMPT_NOT_FOUND"),
        ({"attempt": "2", "stream": "stdout"}, 404, "ATTEMPT_NOT_FOUND"),
        ({"stream": "secret_key"}, 400, "INVALID_LOG_STREAM"),
        ({"stream": ""}, 400, "INVALID_LOG_STREAM"),
        ({"attempt": "1", "stream": "../../x"}, 400, "INVALID_LOG_STREAM"),
    ],
)
def test_bad_log_queries_get_coded_errors(api, small_run, query, status, code):
    response = api.get(f"/v1/jobs/{small_run}/logs", query)
    assert (response.status_code, error_code(response)) == (status, code)


def test_a_stream_is_its_log_and_small_logs_are_whole_in_json(api, small_run):
    logs = api.get(f"/v1/jobs/{small_run}/logs", {"attempt": 1}).json()
    assert logs["stderr"] == "a warning\n" and logs["stderr_bytes"] == 10 and logs["stderr_truncated"] is False
    for stream in ("prompt", "stdout", "stderr"):
        response = api.get(f"/v1/jobs/{small_run}/logs", {"attempt": 1, "stream": stream}, HTTP_ACCEPT="text/plain")
        assert response.status_code == 200
        assert b"".join(response.streaming_content).decode() == logs[stream], stream


def test_another_users_log_stream_is_404(bob_api, small_run):
    response = bob_api.get(f"/v1/jobs/{small_run}/logs", {"attempt": 1, "stream": "stdout"})
    assert (response.status_code, error_code(response)) == (404, "RUN_NOT_FOUND")


def test_a_run_without_logs_yet_has_an_empty_answer(api, install_skill, manual_dispatch):
    install_skill("haiku-writer")
    rid = create_job(api)["request_id"]
    logs = api.get(f"/v1/jobs/{rid}/logs").json()
    assert logs["attempt_number"] is None and logs["attempts"] == []
    assert (logs["prompt"], logs["stdout"], logs["stderr"], logs["stdout_bytes"]) == ("", "", "", 0)
    response = api.get(f"/v1/jobs/{rid}/logs", {"stream": "stdout"})
    assert (response.status_code, error_code(response)) == (404, "ATTEMPT_NOT_FOUND")
