"""GET /v1/jobs/{id} and GET /v1/jobs/{id}/result with an API key are answered from one raw
statement (runs.api.TokenReadView, runs.selectors.status_read_by_token). Their answers must be the
full path's, byte for byte, and whatever it cannot answer must reach the full path unchanged."""

from __future__ import annotations

import contextlib
import gc
import json
import secrets
import threading
import weakref
from datetime import timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import TOKEN_PREFIX, ApiToken, _digest
from runs import selectors
from runs.models import Run
from runs.usage import record_turn_usage
from tests.support.clients import client_for
from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


@contextlib.contextmanager
def full_path_only():
    """The answer the full path gives: the fast path off for the `with` block only (its own
    patch, so the test's other patches, such as manual_dispatch's, stay)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(selectors, "status_read_by_token", lambda key, request_id, **options: None)
        yield


def answer(client, url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body; the body of an HTML page (DRF's browsable API, which holds a
    fresh CSRF token each time) only as its kind."""
    if "HTTP_AUTHORIZATION" in headers:
        client = APIClient()  # a client's own credentials would override the header
    response = client.get(url, **headers)
    html = response.headers["Content-Type"].startswith("text/html")
    return response.status_code, dict(response.headers), b"<an HTML page>" if html else response.content


def assert_fast_and_equal_to_full(client, url, django_assert_num_queries, **headers):
    client.get(url, **headers)  # stamps the token's last use, which only the full path does
    with django_assert_num_queries(1):
        fast = answer(client, url, **headers)
    with full_path_only():
        assert answer(client, url, **headers) == fast
    return fast


def test_a_queued_run(api, manual_dispatch, django_assert_num_queries):
    request_id = create_job(api)["request_id"]
    status, headers, _ = assert_fast_and_equal_to_full(api, f"/v1/jobs/{request_id}", django_assert_num_queries)
    assert status == 200 and headers["Content-Type"] == "application/json" and headers["Vary"] == "Accept"


def test_a_run_with_error_warnings_deadline_and_turns(api, manual_dispatch, django_assert_num_queries):
    request_id = create_job(api)["request_id"]
    Run.objects.filter(pk=request_id).update(
        status="failed",
        error={"code": "ENGINE_FAILED", "message": "exit 2 — «non-ASCII»", "extra": "not rendered"},
        warnings=[{"code": "DEPENDENCY_SETUP_FAILED", "message": "pip: no network"}],
        wait_deadline_at=timezone.now() + timedelta(minutes=5),
        cache_hit=True,
        awaiting_upload=True,
    )
    run = Run.objects.get(pk=request_id)
    record_turn_usage(run, 1, {"input_tokens": 120, "output_tokens": 30, "cost_usd": 0.25}, 900)
    record_turn_usage(run, 2, None, None)
    record_turn_usage(run, 3, {"reasoning_tokens": 7}, 15)
    _, _, body = assert_fast_and_equal_to_full(api, f"/v1/jobs/{request_id}", django_assert_num_queries)
    assert b'"attempt":3' in body and b"\xc2\xab" in body  # every turn, in order; UTF-8 as DRF renders it


def test_staff_see_any_run(api, staff_api, manual_dispatch, django_assert_num_queries):
    request_id = create_job(api)["request_id"]
    status, _, _ = assert_fast_and_equal_to_full(staff_api, f"/v1/jobs/{request_id}", django_assert_num_queries)
    assert status == 200


@pytest.mark.parametrize("accept", ["*/*", "application/json"])
def test_the_usual_accept_headers_are_answered_fast(accept, api, manual_dispatch, django_assert_num_queries):
    request_id = create_job(api)["request_id"]
    url = f"/v1/jobs/{request_id}"
    assert_fast_and_equal_to_full(api, url, django_assert_num_queries, HTTP_ACCEPT=accept)


RESULT = {"status": "succeeded", "data": {"haiku": ["«sea»", "b", "c"]}, "artifacts": [], "error": None}


def test_a_finished_runs_result(api, manual_dispatch, django_assert_num_queries):
    request_id = create_job(api)["request_id"]
    Run.objects.filter(pk=request_id).update(status="succeeded", result=RESULT)
    url = f"/v1/jobs/{request_id}/result"
    status, _, body = assert_fast_and_equal_to_full(api, url, django_assert_num_queries)
    assert status == 200 and json.loads(body) == {"request_id": request_id, "result": RESULT}


@pytest.mark.parametrize(("owner", "expected_status"), [("alice", 409), ("bob", 404)])
def test_a_result_the_fast_path_cannot_give_is_the_full_paths_answer(owner, expected_status, api, bob, manual_dispatch):
    """An unfinished run's result is a 409; someone else's run is not there."""
    client = api if owner == "alice" else client_for(bob)
    url = f"/v1/jobs/{create_job(client)['request_id']}/result"
    if owner == "bob":
        Run.objects.filter(owner=bob).update(status="succeeded", result=RESULT)
    api.get(url)  # the token's last use is stamped: the fast path would answer if it could
    got = answer(api, url)
    with full_path_only():
        assert answer(api, url) == got
    assert got[0] == expected_status


def test_a_poll_sees_waiting_user_as_soon_as_the_asking_turns_end_commits(
    api, manual_dispatch, django_capture_on_commit_callbacks, django_assert_num_queries
):
    """Latency (c) of docs/benchmarks.md (issue #43): the status poll after an asking turn's end
    answers waiting_user from the row that end wrote, in its one statement. Nothing run after the
    commit (the listeners' wake-up, the dispatch, webhook offers) stands between them, and no
    answer read while the run was running is served again."""
    from engines.types import TurnResult
    from runs.services import claim_turn
    from runs.turn_end import end_turn

    request_id = create_job(api, runtime_options={"execution_mode": "interactive"})["request_id"]
    worker = "host:1:w"
    run = claim_turn(request_id, 1, worker)
    assert run is not None
    url = f"/v1/jobs/{request_id}"
    api.get(url)  # stamps the token's last use: the fast path answers from now on
    with django_assert_num_queries(1):
        assert api.get(url).json()["status"] == "running"
    asked = TurnResult(outcome="ask_user", assistant_text="Which season?", session_handle="thread-1", exit_code=0)
    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        end_turn(run, worker, asked, duration_ms=5, can_continue=True, logs_with_keys=[], answer_redacted=False)
    assert after_commit  # registered, and left unrun
    with django_assert_num_queries(1):
        body = api.get(url).json()
    assert (body["status"], body["pending_interaction_id"]) == ("waiting_user", 1)


def _revoke(client) -> None:
    ApiToken.objects.filter(user=client.user).update(revoked_at=timezone.now())


def _expire(client) -> None:
    ApiToken.objects.filter(user=client.user).update(expires_at=timezone.now())


def _deactivate(client) -> None:
    type(client.user).objects.filter(pk=client.user.pk).update(is_active=False)


NO_SUCH_RUN = "00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    ("case", "change", "path", "headers", "expected_status"),
    [
        ("someone else's run", None, "{run}", {"HTTP_AUTHORIZATION": "bob"}, 404),
        ("not a run id", None, "{run}-x", {}, 404),
        ("no such run", None, NO_SUCH_RUN, {}, 404),
        ("a revoked token", _revoke, "{run}", {}, 401),
        ("an expired token", _expire, "{run}", {}, 401),
        ("an inactive user", _deactivate, "{run}", {}, 401),
        ("a malformed key", None, "{run}", {"HTTP_AUTHORIZATION": "Token sr_short"}, 401),
        ("another scheme", None, "{run}", {"HTTP_AUTHORIZATION": "Bearer sr_x"}, 401),
        ("an HTML client", None, "{run}", {"HTTP_ACCEPT": "text/html"}, 200),
        ("a format override", None, "{run}?format=json", {}, 200),
    ],
)
def test_what_the_fast_path_leaves_alone_gets_the_full_answer(
    case, change, path, headers, expected_status, api, bob, manual_dispatch
):
    url = "/v1/jobs/" + path.format(run=create_job(api)["request_id"])
    if headers.get("HTTP_AUTHORIZATION") == "bob":
        headers = {"HTTP_AUTHORIZATION": f"Token {client_for(bob).token_key}"}
    api.get(url)  # the token's last use is stamped: the fast path would answer if it could
    if change is not None:
        change(api)
    got = answer(api, url, **headers)
    with full_path_only():
        assert answer(api, url, **headers) == got, case
    assert got[0] == expected_status, case


def test_a_token_due_for_its_stamp_goes_the_full_way_once(api, manual_dispatch, django_assert_num_queries):
    url = f"/v1/jobs/{create_job(api)['request_id']}"
    long_ago = timezone.now() - timedelta(minutes=5)
    ApiToken.objects.filter(user=api.user).update(last_used_at=long_ago)
    assert api.get(url).status_code == 200
    assert ApiToken.objects.get(user=api.user).last_used_at > long_ago
    with django_assert_num_queries(1):
        assert api.get(url).status_code == 200


def test_tokens_sharing_a_lookup_are_told_apart_by_their_hash(api, bob, manual_dispatch, django_assert_num_queries):
    """Two keys may share the 8-character lookup: each row's hash decides, in constant time."""
    alices_run = create_job(api)["request_id"]
    lookup = ApiToken.objects.get(user=api.user).lookup
    bobs_key = f"{TOKEN_PREFIX}{lookup}{secrets.token_urlsafe(32)}"
    ApiToken.objects.create(user=bob, lookup=lookup, key_hash=_digest(bobs_key), last_used_at=timezone.now())
    api.get(f"/v1/jobs/{alices_run}")
    with django_assert_num_queries(1):
        assert api.get(f"/v1/jobs/{alices_run}").json()["request_id"] == alices_run
    bobs = APIClient()
    bobs.credentials(HTTP_AUTHORIZATION=f"Token {bobs_key}")
    bobs_run = create_job(bobs)["request_id"]
    with django_assert_num_queries(1):
        assert bobs.get(f"/v1/jobs/{bobs_run}").json()["request_id"] == bobs_run
    response = bobs.get(f"/v1/jobs/{alices_run}")
    assert response.status_code == 404 and response.json()["detail"]["code"] == "RUN_NOT_FOUND"


def test_a_database_error_on_the_fast_path_is_answered_by_the_full_path(api, manual_dispatch, monkeypatch):
    """Had the database gone, the full path would answer 503 in the API's envelope."""
    url = f"/v1/jobs/{create_job(api)['request_id']}"

    def away(key, request_id, **options):
        raise OperationalError("connection lost")

    monkeypatch.setattr(selectors, "status_read_by_token", away)
    assert api.get(url).status_code == 200


@pytest.mark.django_db(transaction=True)  # the pooled connection the requests use, not a test transaction's
def test_on_postgresql_the_statement_is_prepared_once_per_connection(api, manual_dispatch):
    """Server-side parameters and prepared statements (settings): the status statement is planned
    once per connection, not at every poll (issue #16)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has no server-side statements")
    request_id = create_job(api)["request_id"]
    api.get(f"/v1/jobs/{request_id}")  # stamps the key's last use: the fast path answers from now on

    # The status statements by their own column alias: other tests' statements on this pooled
    # connection (token lookups, the result read's variant) may be prepared too.
    def prepared() -> list[str]:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%read_key_hash%"])
        return sorted(statement for (statement,) in cursor.fetchall())

    with connection.cursor() as cursor:  # psycopg prepares a statement at its 5th use
        before = prepared()
        for _ in range(6):
            assert selectors.status_read_by_token(api.token_key, request_id) is not None
        after = prepared()
        assert after and len(after) - len(before) <= 1
        for _ in range(6):
            assert selectors.status_read_by_token(api.token_key, request_id) is not None
        assert prepared() == after  # planned once: later reads use the prepared statement


def test_the_status_reads_converters_keep_no_threads_connection_alive():
    """They are the backend's methods: kept beside the connection, they kept every thread's alive."""
    used: list[weakref.ref] = []

    def read_there() -> None:
        database = connections[DEFAULT_DB_ALIAS]
        used.append(weakref.ref(database))
        assert selectors._run_converters(database, True)  # the run's JSON and times are converted
        database.close()

    thread = threading.Thread(target=read_there)
    thread.start()
    thread.join()
    gc.collect()  # the connection and its converters refer to each other
    assert used[0]() is None
