"""Client errors (SPEC §8): coded 4xx for malformed or wrongly typed input, 404 RUN_NOT_FOUND for
unknown runs, and never a 500 for anything a client can send."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.jobs import RUN_ENDPOINTS, detail, error_code, haiku_step, job_body, make_zip, upload

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = 100_000
# (content type, raw body): junk a client can send to any POST endpoint.
JUNK_BODIES = [
    ("application/json", b"{"),
    ("application/json", b""),
    ("application/json", b"null"),
    ("application/json", b"[]"),
    ("application/json", b"42"),
    ("application/json", b'"just a string"'),
    ("application/json", b"\xff\xfe\xfa not utf-8"),
    ("application/json", b'{"skill_id": NaN, "input": Infinity}'),
    ("application/json", b"[" * DEEP + b"]" * DEEP),
    ("application/json", b'{"a":' * 5000 + b"1" + b"}" * 5000),
    (
        "application/json",
        json.dumps(
            {"skill_id": ["haiku-writer"], "engine": {}, "input": [], "parameter": "x", "runtime_options": 3}
        ).encode(),
    ),
    ("application/json", json.dumps({"skill_id": None, "engine": None, "model": None}).encode()),
    ("application/json", json.dumps({"skill_id": "haiku-writer", "input": {"topic": "x" * 100_000}}).encode()),
    (
        "application/json",
        json.dumps({"skill_id": "haiku-writer", "model": "m" * 5000, "input": {"topic": "sea"}}).encode(),
    ),
    ("application/json", json.dumps({"skill_id": "haiku-writer\u0000", "engine": "codex\u0000"}).encode()),
    ("application/json", json.dumps({"interaction_id": 10**40, "response": "x"}).encode()),
    ("application/json", json.dumps({"interaction_id": "one", "response": None, "idempotency_key": ["k"]}).encode()),
    ("application/json", json.dumps({"interaction_id": -1}).encode()),
    ("text/plain", b"skill_id=haiku-writer"),
    ("application/xml", b"<job><skill_id>haiku-writer</skill_id></job>"),
    ("application/x-www-form-urlencoded", b"skill_id=haiku-writer&input=topic&runtime_options=x"),
    ("application/x-www-form-urlencoded", b"%%%=%%%&&=="),
    ("multipart/form-data; boundary=xyz", b'--xyz\r\nContent-Disposition: form-data; name="file"\r\n\r\nbroken'),
    ("multipart/form-data", b"no boundary at all"),
    ("multipart/form-data; boundary=xyz", b"--xyz--\r\n"),
]


@pytest.fixture
def raw(api):
    """The test client reports server errors as 500 responses instead of raising them."""
    api.raise_request_exception = False
    return api


@pytest.fixture
def runs(raw, install_skill, fake_codex):
    """A finished auto run and a finished interactive run of alice."""
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    done = raw.post("/v1/jobs", job_body(), format="json").json()["request_id"]
    assert Run.objects.get(pk=done).status == "succeeded"
    interactive = raw.post(
        "/v1/jobs", job_body(runtime_options={"execution_mode": "interactive"}), format="json"
    ).json()["request_id"]
    assert Run.objects.get(pk=interactive).status == "succeeded"  # soft completion (R-LC2 step 3)
    return {"done": done, "interactive": interactive}


def _post_raw(client, path: str, content_type: str, body: bytes):
    return client.generic("POST", path, body, content_type=content_type)


def _sweep(client, path: str, allowed=range(400, 500)) -> dict:
    """Post every junk body to `path`; return those answered with a 5xx or without an error body."""
    wrong = {}
    for index, (content_type, body) in enumerate(JUNK_BODIES):
        response = _post_raw(client, path, content_type, body)
        label = f"{index}: {content_type} {body[:40]!r}"
        if response.status_code >= 500 or response.status_code not in allowed:
            wrong[label] = response.status_code
        elif response.status_code >= 400 and "detail" not in response.json():
            wrong[label] = f"{response.status_code} without detail"
    return wrong


def test_junk_to_job_create_is_never_500(raw, runs):
    from runs.models import Run

    before = Run.objects.count()
    assert _sweep(raw, "/v1/jobs") == {}
    assert Run.objects.count() == before


def test_junk_to_reply_is_never_500(raw, runs):
    assert _sweep(raw, f"/v1/jobs/{runs['done']}/interaction/reply") == {}


def test_junk_to_upload_is_never_500(raw, runs):
    assert _sweep(raw, f"/v1/jobs/{runs['done']}/upload") == {}


def test_junk_to_cancel_is_never_500(raw, runs):
    """Cancel takes no body: junk is ignored or refused, never a crash."""
    assert _sweep(raw, f"/v1/jobs/{runs['done']}/cancel", allowed=[200, 400, 413, 415]) == {}


def test_junk_to_install_is_never_500(staff_api, runs):
    staff_api.raise_request_exception = False
    assert _sweep(staff_api, "/v1/skill-packages/install") == {}


def test_malformed_json_is_400_malformed_request(raw, runs):
    response = _post_raw(raw, "/v1/jobs", "application/json", b'{"skill_id": "haiku-writer",')
    assert response.status_code == 400
    assert error_code(response) == "MALFORMED_REQUEST"
    response = _post_raw(raw, f"/v1/jobs/{runs['done']}/interaction/reply", "application/json", b"{")
    assert response.status_code == 400
    assert error_code(response) == "MALFORMED_REQUEST"


@pytest.mark.parametrize(
    "body,field",
    [
        ({"skill_id": ["haiku-writer"]}, "skill_id"),
        ({"skill_id": {"id": 1}}, "skill_id"),
        ({"skill_id": "haiku-writer", "input": ["sea"]}, "input"),
        ({"skill_id": "haiku-writer", "input": "sea"}, "input"),
        ({"skill_id": "haiku-writer", "parameter": [1]}, "parameter"),
        ({"skill_id": "haiku-writer", "runtime_options": "auto"}, "runtime_options"),
        ({"skill_id": "haiku-writer", "engine": ["codex"]}, "engine"),
        ({"skill_id": "haiku-writer", "model": {"name": "x"}}, "model"),
        ({}, "skill_id"),
    ],
)
def test_wrong_types_are_400_naming_the_field(raw, runs, body, field):
    if body.get("skill_id") == "haiku-writer" and "input" not in body:
        body = {**body, "input": {"topic": "sea"}}
    response = raw.post("/v1/jobs", body, format="json")
    assert response.status_code == 400, response.content
    assert field in json.dumps(detail(response))


@pytest.mark.parametrize(
    "body",
    [
        {"response": "yes"},  # no interaction_id
        {"interaction_id": "first", "response": "yes"},
        {"interaction_id": 0, "response": "yes"},
        {"interaction_id": 1.5, "response": "yes"},
        {"interaction_id": 1},  # no response
        {"interaction_id": 1, "response": "yes", "idempotency_key": "k" * 500},
    ],
)
def test_invalid_reply_bodies_are_400(raw, runs, body):
    """Validated before anything else: a well-formed reply to the same run is a 409 (not waiting),
    so the 400 is about the body."""
    from runs.models import Run

    rid = runs["interactive"]
    before = Run.objects.get(pk=rid)
    response = raw.post(f"/v1/jobs/{rid}/interaction/reply", body, format="json")
    assert response.status_code == 400, response.content
    after = Run.objects.get(pk=rid)
    assert (after.last_event_seq, after.attempt_number, after.status) == (
        before.last_event_seq,
        before.attempt_number,
        before.status,
    )
    control = raw.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "yes"}, format="json")
    assert control.status_code == 409


def test_unknown_run_is_404_run_not_found_everywhere(raw, runs):
    wrong = {}
    for rid in (str(uuid.UUID(int=0)), str(uuid.uuid4()), "not-a-uuid", "12345", "%20", "a" * 300):
        for method, suffix in RUN_ENDPOINTS:
            path = f"/v1/jobs/{rid}{suffix}"
            if method == "post" and suffix == "/upload":
                response = raw.post(path, {"file": upload("x.zip", make_zip({"document": "x"}))}, format="multipart")
            elif method == "post":
                response = raw.post(path, {"interaction_id": 1, "response": "x"}, format="json")
            else:
                response = raw.get(path)
            if response.status_code != 404 or error_code(response) != "RUN_NOT_FOUND":
                wrong[f"{method} {rid[:20]}{suffix}"] = response.status_code
    assert wrong == {}


def test_bad_event_cursor_is_400_never_500(raw, runs):
    """after_seq must be a non-negative integer the server can use; anything else is a 400."""
    wrong = {}
    for value in ("abc", "-1", "1.5", "\u00b2", "\u0661", "99999999999999999999999999", " 3", "0x10", ""):
        for suffix in ("/events/history", "/events"):
            response = raw.get(f"/v1/jobs/{runs['done']}{suffix}", {"after_seq": value})
            if response.status_code not in (200, 400):
                wrong[f"{suffix}?after_seq={value!r}"] = response.status_code
    assert wrong == {}


def test_bad_last_event_id_header_is_not_500(raw, runs):
    for value in ("²", "99999999999999999999999999", "x"):
        response = raw.get(f"/v1/jobs/{runs['done']}/events/history", HTTP_LAST_EVENT_ID=value)
        assert response.status_code < 500, (value, response.status_code)


def test_junk_list_queries_are_never_500(raw, runs):
    wrong = {}
    for query in (
        {"page": "abc"},
        {"page": "0"},
        {"page": "-3"},
        {"page": "99999999999999999999"},
        {"page_size": "-1"},
        {"page_size": "0"},
        {"page_size": "99999999999999999999"},
        {"page_size": "x"},
        {"status": "nonsense"},
        {"status": "\u0000"},
        {"skill_id": "\u0000"},
        {"skill_id": "x" * 5000},
    ):
        response = raw.get("/v1/jobs", query)
        if response.status_code >= 500:
            wrong[str(query)[:60]] = response.status_code
    assert wrong == {}


def test_junk_artifact_paths_are_404_never_500(raw, runs):
    wrong = {}
    for path in (
        "artifacts/%00",
        "%00",
        "artifacts/haiku.md%00.txt",
        "\u0000/x",  # NUL bytes
        "artifacts/" + "x" * 5000,
        "artifacts/" + "/".join(["d" * 200] * 30),  # names the OS refuses
        "artifacts/..%2f..%2fsecret",
        "artifacts/%ff%fe",
    ):
        response = raw.get(f"/v1/jobs/{runs['done']}/artifacts/{path}")
        if response.status_code != 404:
            wrong[path[:40]] = response.status_code
    assert wrong == {}


def test_junk_skill_and_engine_ids_are_never_500(raw, runs):
    for path in ("/v1/skills/%00", "/v1/skills/" + "s" * 5000, "/v1/engines/%00/models", "/v1/skills/..%2f.."):
        response = raw.get(path)
        assert response.status_code == 404, (path, response.status_code)


def test_junk_to_webhook_create_is_never_500(raw, runs):
    from notifications.models import WebhookEndpoint

    assert _sweep(raw, "/v1/webhooks") == {}
    assert not WebhookEndpoint.objects.filter(run__isnull=True).exists()


@pytest.mark.parametrize(
    "webhook_id",
    [
        "\u00b2",  # a superscript digit: str.isdigit() says yes, int() says no
        "\u0663",  # an Arabic-Indic three
        "99999999999999999999",
        "9223372036854775808",
        "-1",
        "0",
        "1.0",
        "%00",
        "x" * 5000,
        "%ff%fe",
    ],
)
def test_junk_webhook_ids_are_404_never_500(raw, runs, webhook_id):
    """DELETE /v1/webhooks/{id} with an id that is no webhook of the caller: 404 WEBHOOK_NOT_FOUND."""
    response = raw.delete(f"/v1/webhooks/{webhook_id}")
    assert (response.status_code, error_code(response)) == (404, "WEBHOOK_NOT_FOUND")


def test_junk_usage_queries_are_400_never_500(raw, runs):
    wrong = {}
    for query in (
        {"since": "yesterday"},
        {"since": "\u0000"},
        {"since": "2026-13-45T99:99:99Z"},
        {"until": "9" * 5000},
        {"since": "0001-01-01T00:00:00+14:00"},  # before the first representable instant in UTC
        {"until": "9999-12-31T23:59:59.999999-14:00"},  # after the last one
        {"group_by": "owner"},
        {"group_by": "\u0000"},
        {"group_by": ["day", "skill"]},
        {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z", "group_by": "day"},
    ):
        response = raw.get("/v1/usage", query)
        if response.status_code >= 500 or (response.status_code >= 400 and error_code(response) is None):
            wrong[str(query)[:60]] = response.status_code
    assert wrong == {}


def test_unpaired_surrogate_in_input_is_refused_or_runs(raw, runs, fake_codex):
    """A string no encoder can write (a lone UTF-16 surrogate) must not crash the run: either
    admission refuses it with a 400, or the run proceeds like any other."""
    response = _post_raw(
        raw, "/v1/jobs", "application/json", b'{"skill_id": "haiku-writer", "input": {"topic": "sea \\ud800"}}'
    )
    assert response.status_code < 500, response.content
    if response.status_code == 200:
        status = raw.get(f"/v1/jobs/{response.json()['request_id']}").json()
        assert (status["error"] or {}).get("code") != "ORCHESTRATOR_ERROR", status["error"]
    else:
        assert response.status_code == 400


def test_error_envelope_shape(raw, runs):
    """SPEC §8: coded errors are {"detail": {"code", "message"}}."""
    for response in (
        raw.post("/v1/jobs", job_body("nope"), format="json"),
        raw.get(f"/v1/jobs/{uuid.uuid4()}"),
        raw.get(f"/v1/jobs/{runs['done']}/events/history", {"after_seq": "x"}),
        _post_raw(raw, "/v1/jobs", "application/json", b"{"),
    ):
        body = detail(response)
        assert isinstance(body, dict), body
        assert isinstance(body["code"], str) and body["code"].isupper()
        assert isinstance(body["message"], str) and body["message"]


def test_unsupported_method_is_405(raw, runs):
    """R-OP8: 405 METHOD_NOT_ALLOWED as coded JSON, with the allowed methods in `Allow`."""
    for response in (
        raw.delete(f"/v1/jobs/{runs['done']}"),
        raw.put("/v1/jobs", {}, format="json"),
        raw.get(f"/v1/jobs/{runs['done']}/cancel"),
        raw.post("/v1/system/ping"),
        raw.delete("/v1/system/readyz"),
        raw.post("/v1/system/healthz"),
        raw.post("/v1/schema/"),
    ):
        assert response.status_code == 405, (response.request["PATH_INFO"], response.status_code)
        assert response["Content-Type"] == "application/json"
        assert detail(response)["code"] == "METHOD_NOT_ALLOWED"
        assert detail(response)["message"]
        assert "GET" in response["Allow"] or "POST" in response["Allow"]


@pytest.mark.parametrize(
    "path", ["/v1/jobs/", "/v1/nope", "/v1/", "/v1/jobs/x/y/z", "/v1/skills/a/b", "/v1/system/nope"]
)
@pytest.mark.parametrize("authenticated", [True, False])
def test_unknown_paths_under_v1_are_coded_json_404(api, client, path, authenticated):
    """R-OP8: every response under /v1/ is JSON, including paths no route matches."""
    response = (api if authenticated else client).get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = response.json()["detail"]
    assert body["code"] == "NOT_FOUND"
    assert body["message"]


def test_pages_outside_v1_keep_their_html_404(client):
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
