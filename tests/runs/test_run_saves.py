"""A run's save writes the columns that changed since it was read or last saved (issue #43): the
JSON columns and `updated_at` always, the others only when they differ. Nothing set on the run
is left unwritten, whatever saved it last, and a column another writer changed meanwhile is not
written back over."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


@pytest.fixture
def run(api, manual_dispatch):
    from runs.models import Run

    return Run.objects.get(pk=create_job(api)["request_id"])


def written_columns(captured: CaptureQueriesContext) -> set[str]:
    (update,) = [query["sql"] for query in captured.captured_queries if query["sql"].startswith("UPDATE")]
    assignments = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return set(re.findall(r'"(\w+)" = ', assignments))


def stored(run):
    from runs.models import Run

    return Run.objects.get(pk=run.pk)


def test_a_save_writes_what_changed_the_json_columns_and_updated_at(run):
    run.claimed_by = "host:1:w"
    run.heartbeat_at = run.created_at
    with CaptureQueriesContext(connection) as captured:
        run.save()
    json_columns = {"input", "parameter", "runtime_options", "admission_request", "error", "warnings", "result"}
    assert written_columns(captured) == {"claimed_by", "heartbeat_at", "updated_at", *json_columns}
    assert (stored(run).claimed_by, stored(run).heartbeat_at) == ("host:1:w", run.created_at)


def test_a_json_column_changed_in_place_is_saved(run):
    run.warnings.append({"code": "W", "message": "changed in place"})
    run.save()
    assert stored(run).warnings == [{"code": "W", "message": "changed in place"}]


def test_a_change_left_out_of_an_explicit_update_fields_is_written_by_the_next_save(run):
    run.claimed_by = "host:1:w"
    run.model = "gpt-x"
    run.save(update_fields=["claimed_by", "updated_at"])
    assert (stored(run).claimed_by, stored(run).model) == ("host:1:w", "")
    run.save()
    assert stored(run).model == "gpt-x"


def test_each_save_compares_with_what_the_last_one_stored(run):
    run.model = "gpt-x"
    run.save()
    run.model = ""  # back to what it was read as: a change all the same
    run.save()
    assert stored(run).model == ""


def test_a_column_another_writer_changed_is_not_written_back_over(run):
    from runs.models import Run

    Run.objects.filter(pk=run.pk).update(session_handle="thread-9")
    run.claimed_by = "host:1:w"
    run.save()
    assert (stored(run).session_handle, stored(run).claimed_by) == ("thread-9", "host:1:w")


def test_a_run_read_in_part_saves_as_django_does_without_reading_the_rest(run):
    from runs.models import Run

    partial = Run.objects.only("claimed_by").get(pk=run.pk)
    partial.claimed_by = "host:1:w"
    with CaptureQueriesContext(connection) as captured:
        partial.save()
    assert len(captured.captured_queries) == 1  # the update: no deferred column loaded to compare
    assert stored(run).claimed_by == "host:1:w"


def test_a_new_run_saved_again_writes_only_its_changes(run, api):
    from runs.models import Run

    new = Run.objects.get(pk=run.pk)
    new.pk = None  # as a copy would be made: inserted whole
    new._state.adding = True
    new.save()
    new.claimed_by = "host:1:w"
    with CaptureQueriesContext(connection) as captured:
        new.save()
    assert "claimed_by" in written_columns(captured) and "model" not in written_columns(captured)
    assert Run.objects.get(pk=new.pk).claimed_by == "host:1:w"


def test_a_run_read_and_inserted_by_force_is_inserted_whole(run):
    import uuid

    from runs.models import Run

    copy = Run.objects.get(pk=run.pk)
    copy.pk = uuid.uuid4()
    copy.save(force_insert=True)
    assert Run.objects.get(pk=copy.pk).input == run.input


def test_a_save_of_a_run_no_longer_stored_fails_instead_of_writing_nothing(run):
    from django.db import DatabaseError

    from runs.models import Run

    Run.objects.filter(pk=run.pk).delete()
    run.claimed_by = "host:1:w"
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        run.save()


def test_a_new_run_is_one_insert_of_every_column(run):
    from runs.models import Run

    new = Run(owner=run.owner, skill=run.skill, skill_version=run.skill_version, engine="codex", input={"topic": "t"})
    with CaptureQueriesContext(connection) as captured:
        new.save()
    (insert,) = [query["sql"] for query in captured.captured_queries]
    columns = insert.split("(", 1)[1].split(")", 1)[0]
    assert insert.startswith('INSERT INTO "runs_run"') and columns.count('"') == 2 * len(Run._meta.concrete_fields)
    stored_run = Run.objects.get(pk=new.pk)
    assert (stored_run.input, stored_run.created_at, new._state.adding) == ({"topic": "t"}, new.created_at, False)
    new.claimed_by = "host:1:w"
    new.save()  # remembered as inserted: an update of what changed
    assert stored(new).claimed_by == "host:1:w"
