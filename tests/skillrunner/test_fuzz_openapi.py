"""Property-based fuzzing of the whole API from its own OpenAPI document (SPEC §8 "Never 500 for
anything a client can send"), with schemathesis, in-process against the Django WSGI app.

Every operation gets schema-conforming and schema-violating requests, with path ids that are
random, a finished run's and a waiting run's (and for webhooks, a registered one's), authenticated
as staff (who may reach every endpoint), with rate limits out of the way and DNS answered locally. Any 5xx is collected with a curl line to replay it. Bounded: a fixed number of
examples per operation, derandomized so CI sees the same requests every time (set
SKILLRUNNER_FUZZ_SEED to explore others, SKILLRUNNER_FUZZ_EXAMPLES for more)."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from tests.support.throttling import forget_throttling

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

EXAMPLES = int(os.environ.get("SKILLRUNNER_FUZZ_EXAMPLES", "12"))
SEED = os.environ.get("SKILLRUNNER_FUZZ_SEED")
HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}
HAIKU_STEP = {"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "message": json.dumps(HAIKU)}


@pytest.fixture
def runs(staff_api, api, install_skill, fake_codex):
    for name in ("haiku-writer", "trip-planner", "word-count"):
        install_skill(name)
    fake_codex.script(HAIKU_STEP)
    done = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    ).json()["request_id"]
    fake_codex.script({"message": "Where to?"}, HAIKU_STEP)
    waiting = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    ).json()["request_id"]
    assert api.get(f"/v1/jobs/{done}").json()["status"] == "succeeded"
    assert api.get(f"/v1/jobs/{waiting}").json()["status"] == "waiting_user"
    fake_codex.script(HAIKU_STEP)
    return {"done": done, "waiting": waiting}


@pytest.fixture
def offline_dns(monkeypatch):
    """Webhook URLs resolve without the network: every name a public address, after the same IDNA
    encoding the real resolver does (which refuses some names with UnicodeError)."""

    def getaddrinfo(host, port, *args, **kwargs):
        host.encode("idna")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    monkeypatch.setattr("notifications.destinations.socket.getaddrinfo", getaddrinfo)


@pytest.fixture
def webhook(admin_user, offline_dns) -> str:
    from notifications.services import register_endpoint

    return str(register_endpoint(owner=admin_user, url="https://hooks.example.com/x", events=["run.failed"]).pk)


@pytest.fixture
def no_rate_limits(monkeypatch):
    """Thousands of requests a minute: past the limits every write would only be a 429."""
    from rest_framework.throttling import SimpleRateThrottle

    from kernel.throttles import REPLY_SCOPE, RUN_CREATE_SCOPE, SETTINGS_SCOPE, SKILL_INSTALL_SCOPE

    scopes = (REPLY_SCOPE, RUN_CREATE_SCOPE, SETTINGS_SCOPE, SKILL_INSTALL_SCOPE)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", dict.fromkeys(scopes, "100000/min"))


@pytest.fixture
def empty_cache(admin_user):
    """Throttle counters live in the cache: start clean and leave nothing for later tests (only
    the fuzzing user's keys: the cache may be a shared Redis)."""
    forget_throttling(admin_user)
    yield
    forget_throttling(admin_user)


# A path segment is never empty, so a path parameter that takes any non-empty string has no
# invalid value a request could carry.
ANY_SEGMENT = ({"type": "string"}, {"type": "string", "pattern": "^(?s:.+)$"})


def has_invalid_requests(operation) -> bool:
    """Whether a request of `operation` can break its schema: it takes a body, a parameter outside
    the path, or a path parameter narrower than any segment. For the others schemathesis generates
    thousands of negative examples, sends none and gives up (Unsatisfiable): that took two thirds
    of this test's time."""
    raw = operation.definition.raw
    parameters = raw.get("parameters", [])
    return "requestBody" in raw or any(p["in"] != "path" or p.get("schema") not in ANY_SEGMENT for p in parameters)


def test_no_request_generated_from_the_openapi_document_gets_a_5xx(
    staff_api, runs, webhook, no_rate_limits, empty_cache
):
    import hypothesis
    import schemathesis
    from django.core.wsgi import get_wsgi_application
    from hypothesis import HealthCheck, Phase, given
    from schemathesis import GenerationMode

    document = staff_api.get("/v1/schema/", {"format": "json"}).json()
    schema = schemathesis.openapi.from_dict(document)
    schema.app = get_wsgi_application()
    auth = {"Authorization": f"Token {staff_api.token_key}"}
    failures: list[str] = []
    unsatisfiable: list[str] = []
    calls = {"count": 0}
    started = time.monotonic()

    def explore(operation, mode, path_parameters):
        strategy = operation.as_strategy(generation_mode=mode, headers=auth, path_parameters=path_parameters)

        @hypothesis.settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=SEED is None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        @given(case=strategy)
        def check(case):
            calls["count"] += 1
            try:
                response = case.call(headers=auth)
                status = response.status_code
            except Exception as exc:  # the app raised through the transport: that is a 500 too
                status, response = 500, exc
            if status >= 500:
                failures.append(
                    f"{operation.label} [{mode.value}] -> {status}\n    {case.as_curl_command(headers=auth)}"
                )

        if SEED is not None:
            check = hypothesis.seed(int(SEED))(check)
        try:
            check()
        except hypothesis.errors.Unsatisfiable:
            # Nothing of this operation can be made invalid (e.g. a GET without parameters once
            # its path id is fixed): there is no negative case to send.
            assert mode == GenerationMode.NEGATIVE, operation.label
            unsatisfiable.append(f"{operation.label} {path_parameters}")

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [o.label for o in operations]
    labels = {operation.label for operation in operations}
    newer = {"GET /v1/usage", "GET /v1/webhooks", "POST /v1/webhooks", "DELETE /v1/webhooks/{webhook_id}"}
    assert newer <= labels, newer - labels
    for operation in operations:
        has_run = "{request_id}" in operation.path
        variants: list[dict[str, str] | None] = [None]
        if "{webhook_id}" in operation.path:
            variants += [{"webhook_id": webhook}]  # deleted by the first case that reaches it
        if has_run:
            variants += [{"request_id": runs["done"]}]
            if not operation.path.endswith("/events"):  # a live stream of a waiting run never ends
                variants += [{"request_id": runs["waiting"]}]
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if has_invalid_requests(operation) else [])
        if len(modes) == 1:
            unsatisfiable.append(f"{operation.label} (nothing to break)")
        for mode in modes:
            for path_parameters in variants:
                explore(operation, mode, path_parameters)

    elapsed = time.monotonic() - started
    assert calls["count"] > 200, (calls, unsatisfiable)
    print(f"fuzz: {calls['count']} requests in {elapsed:.0f}s; no negative case for {unsatisfiable}")
    assert failures == [], f"{len(failures)} of {calls['count']} requests got a 5xx in {elapsed:.0f}s:\n" + "\n".join(
        failures[:20]
    )
