"""GET /v1/jobs/{id} renders runs through runs.serializers.status_payload, which must give exactly
what RunStatusOutput's declared fields (the OpenAPI schema) would, in every state a run can be in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from runs.models import Run
from runs.selectors import status_read
from runs.serializers import RunStatusOutput, status_payload
from runs.usage import record_turn_usage
from tests.support.jobs import create_job
from upstream.serializers import status_fields

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def rendered_by_the_fields(run: Run) -> dict:
    return serializers.ModelSerializer.to_representation(RunStatusOutput(run), run)


def test_a_queued_run(api, manual_dispatch):
    run = Run.objects.get(pk=create_job(api)["request_id"])
    assert status_payload(status_read(run)) == rendered_by_the_fields(run)
    # The one run's status adds upstream's optional fields (R-UP10) to the service's own.
    assert api.get(f"/v1/jobs/{run.pk}").json() == {**status_payload(status_read(run)), **status_fields(run)}


def test_a_run_with_error_warnings_deadline_and_usage(api, manual_dispatch):
    request_id = create_job(api)["request_id"]
    Run.objects.filter(pk=request_id).update(
        status="failed",
        error={"code": "ENGINE_FAILED", "message": "exit 2", "extra": "not rendered"},
        warnings=[{"code": "DEPENDENCY_SETUP_FAILED", "message": "pip: no network"}],
        wait_deadline_at=timezone.now() + timedelta(minutes=5),
        pending_interaction_id=3,
        interaction_count=3,
        attempt_number=2,
    )
    run = Run.objects.get(pk=request_id)
    record_turn_usage(run, 1, {"input_tokens": 120, "output_tokens": 30, "cost_usd": 0.25}, 900)
    record_turn_usage(run, 2, None, None)
    run = Run.objects.get(pk=request_id)
    payload = status_payload(status_read(run))
    assert payload == rendered_by_the_fields(run)
    assert payload["error"] == {"code": "ENGINE_FAILED", "message": "exit 2"}
    assert payload["wait_deadline_at"].endswith("Z") and payload["usage"]["input_tokens"] == 120
    listed = api.get("/v1/jobs").json()["results"][0]
    assert api.get(f"/v1/jobs/{request_id}").json() == {**listed, **status_fields(run)}


def test_the_payload_has_exactly_the_declared_fields(api, manual_dispatch):
    run = Run.objects.get(pk=create_job(api)["request_id"])
    assert list(status_payload(status_read(run))) == list(RunStatusOutput().fields)


def test_the_list_reads_usage_for_the_whole_page_at_once(api, manual_dispatch):
    """GET /v1/jobs prefetches turn usage; one run read alone does not (runs.selectors)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_of_the_list() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert api.get("/v1/jobs").status_code == 200
        return len(queries)

    create_job(api)
    one = queries_of_the_list()
    for _ in range(3):
        create_job(api)
    assert queries_of_the_list() == one
