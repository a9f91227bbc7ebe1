"""kernel.compiled.CompiledQuery: a queryset compiled once per process and key, its rows as the
queryset gives them on every thread's connection, and no connection kept alive once its thread is
done with it; kernel.compiled.PreparedQuery: compiled once per process, each call's values in place, and a
builder refused whose statement holds more than its values; kernel.compiled.one_or_none: a
unique key's row, read without an ORDER BY."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import ApiToken
from kernel.compiled import CompiledQuery, PreparedQuery, one_or_none

pytestmark = pytest.mark.django_db(transaction=True)


def users(active: bool):
    return get_user_model().objects.filter(is_active=active).order_by("pk").values_list("username", "date_joined")


def in_a_thread(work) -> None:
    """`work` in a thread of its own, which closes its connection when done, as the service's do."""

    def then_close() -> None:
        work()
        connections[DEFAULT_DB_ALIAS].close()

    thread = threading.Thread(target=then_close)
    thread.start()
    thread.join()


def test_its_rows_are_the_querysets_compiled_once_per_process_and_key():
    get_user_model().objects.create(username="alice")
    built: list[bool] = []
    read = CompiledQuery(lambda active: built.append(active) or users(active))
    assert read.rows(True) == [list(row) for row in users(True)]  # the times converted, as Django does
    assert read.named_rows(True) == list(users(True).values("username", "date_joined"))
    assert read.rows(False) == []
    assert built == [True, False]
    read_there: list[list[list[object]]] = []
    in_a_thread(lambda: read_there.append(read.rows(True)))
    assert read_there == [read.rows(True)]  # converted on the thread's connection
    assert built == [True, False]  # not compiled again for it


def test_a_threads_connection_is_not_kept_alive():
    read = CompiledQuery(users)
    prepared = PreparedQuery(lambda pk: get_user_model().objects.filter(pk=pk), get_user_model()._meta.pk)
    used: list[weakref.ref] = []

    def compile_there() -> None:
        used.append(weakref.ref(connections[DEFAULT_DB_ALIAS]))
        read.rows(True)
        prepared.instances(1)

    in_a_thread(compile_there)  # compiled on the thread's connection, kept after it
    gc.collect()  # the connection and its converters refer to each other
    assert used[0]() is None
    assert read.rows(True) == [] and prepared.instances(1) == []


def test_one_or_none_reads_a_unique_keys_row_without_ordering_it():
    alice = get_user_model().objects.create(username="alice")
    by_name = get_user_model().objects.filter(username="alice")
    with CaptureQueriesContext(connection) as statements:
        assert one_or_none(by_name) == alice
        assert one_or_none(by_name.values_list("pk", flat=True)) == alice.pk
        assert one_or_none(get_user_model().objects.filter(username="bob")) is None
        by_name.first()  # the ordering one_or_none leaves out
    reads = [statement["sql"] for statement in statements.captured_queries]
    assert ["ORDER BY" in sql for sql in reads] == [False, False, False, True]
    assert all(sql.endswith("LIMIT 1") for sql in reads)


def tokens_named(name, user_id):
    return ApiToken.objects.filter(name=name, user_id=user_id, revoked_at__isnull=True).select_related("user")


def test_a_prepared_query_runs_each_calls_values_in_the_statement_compiled_once_per_process():
    alice, bob = (get_user_model().objects.create(username=name) for name in ("alice", "bob"))
    for user in (alice, bob):
        ApiToken.issue(user, "nightly")
    built: list[bool] = []
    prepared = PreparedQuery(
        lambda name, user_id: built.append(True) or tokens_named(name, user_id),
        ApiToken._meta.get_field("name"),
        ApiToken._meta.get_field("user"),
    )
    for user in (alice, bob, alice):
        tokens = prepared.instances("nightly", user.pk)
        assert tokens == list(tokens_named("nightly", user.pk)) and len(tokens) == 1
        with CaptureQueriesContext(connection) as statements:
            assert tokens[0].user == user  # select_related's row in place: no query
        assert not statements.captured_queries
    assert prepared.instances("daily", alice.pk) == [] and prepared.one("daily", alice.pk) is None
    assert len(built) == 2  # once, with two sets of markers
    names = PreparedQuery(
        lambda pk: built.append(True) or get_user_model().objects.filter(pk=pk).values_list("username"),
        get_user_model()._meta.pk,
    )
    assert names.rows(bob.pk) == [["bob"]]
    after = PreparedQuery(
        lambda limit, pk: get_user_model().objects.filter(pk__gt=pk).order_by("pk").values_list("username")[:limit],
        get_user_model()._meta.pk,
    )
    assert after.rows(0, key=(1,)) == [["alice"]] and after.rows(0, key=(2,)) == [["alice"], ["bob"]]
    assert after.rows(alice.pk, key=(1,)) == [["bob"]]  # a key's statement, with this call's value
    read_there: list[list[list[str]]] = []
    in_a_thread(lambda: read_there.append(names.rows(alice.pk)))  # another connection
    assert read_there == [[["alice"]]]
    assert len(built) == 4  # names' two, none more for the thread's connection


def test_a_prepared_query_refuses_what_would_change_its_statement():
    user = get_user_model().objects.create(username="alice")
    by_name = PreparedQuery(
        lambda name: get_user_model().objects.filter(username=name), get_user_model()._meta.get_field("username")
    )
    with pytest.raises(ValueError, match="None"):
        by_name.instances(None)  # IS NULL, another statement
    timed = PreparedQuery(
        lambda name: get_user_model().objects.filter(username=name, date_joined__lte=timezone.now()),
        get_user_model()._meta.get_field("username"),
    )
    with pytest.raises(ValueError, match="more than the markers"):
        timed.instances("alice")  # the clock compiled in: each run's statement would be the first one's
    assert by_name.one("alice") == user


def test_a_written_insert_takes_columns_only_and_no_rows_is_no_statement():
    from kernel.compiled import WrittenInsert
    from runs.models import Run, RunEvent

    with pytest.raises(TypeError, match="not a column"):
        WrittenInsert(Run, "owner", "events")  # a reverse relation
    with CaptureQueriesContext(connection) as captured:
        WrittenInsert(RunEvent, "run", "seq", "kind", "payload", "created_at").insert([])
    assert captured.captured_queries == []


def test_a_written_update_writes_the_fields_named_sets_auto_now_and_counts_the_rows():
    from kernel.compiled import WrittenUpdate
    from runs.models import OwnerQueue
    from skills.models import Skill

    user = get_user_model().objects.create(username="written-update")
    place = OwnerQueue.objects.create(owner=user, ready_count=1)
    place.ready_count, place.oldest_ready_at = 5, timezone.now()
    update = WrittenUpdate(OwnerQueue)
    with CaptureQueriesContext(connection) as captured:
        assert update.update(place, ["ready_count"]) == 1
    (statement,) = [query["sql"] for query in captured.captured_queries]
    assert statement.startswith('UPDATE "runs_ownerqueue" SET "ready_count" = 5 WHERE "owner_id" = ')
    stored = OwnerQueue.objects.get(pk=place.pk)
    assert (stored.ready_count, stored.oldest_ready_at) == (5, None)  # only what was named

    skill = Skill.objects.create(skill_id="written-update")
    before = skill.updated_at
    assert WrittenUpdate(Skill).update(skill, ["updated_at"]) == 1
    assert skill.updated_at > before and Skill.objects.get(pk=skill.pk).updated_at == skill.updated_at
    OwnerQueue.objects.filter(pk=place.pk).delete()
    assert update.update(place, ["ready_count"]) == 0


def test_a_written_update_with_conditions_changes_the_row_only_while_they_hold():
    from kernel.compiled import WrittenUpdate
    from runs.models import OwnerQueue

    user = get_user_model().objects.create(username="written-update-conditions")
    OwnerQueue.objects.create(owner=user, ready_count=2)
    served = timezone.now()
    while_two = WrittenUpdate(OwnerQueue, "ready_count")
    assert while_two.set((user.pk, 3), last_served_at=served) == 0  # the count is 2
    assert OwnerQueue.objects.get(owner=user).last_served_at != served
    assert while_two.set((user.pk, 2), last_served_at=served, ready_count=1) == 1
    assert (OwnerQueue.objects.get(owner=user).last_served_at, OwnerQueue.objects.get(owner=user).ready_count) == (
        served,
        1,
    )
