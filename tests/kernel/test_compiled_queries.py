"""kernel.compiled.CompiledQuery: a queryset compiled once per connection and key, its rows as
the queryset gives them, and no connection kept alive once its thread is done with it;
kernel.compiled.one_or_none: a unique key's row, read without an ORDER BY."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.test.utils import CaptureQueriesContext

from kernel.compiled import CompiledQuery, one_or_none

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


def test_its_rows_are_the_querysets_compiled_once_per_connection_and_key():
    get_user_model().objects.create(username="alice")
    built: list[bool] = []
    read = CompiledQuery(lambda active: built.append(active) or users(active))
    assert read.rows(True) == [list(row) for row in users(True)]  # the times converted, as Django does
    assert read.named_rows(True) == list(users(True).values("username", "date_joined"))
    assert read.rows(False) == []
    assert built == [True, False]
    in_a_thread(lambda: read.rows(True))
    assert built == [True, False, True]  # the thread's connection compiled its own


def test_a_threads_connection_is_not_kept_alive():
    read = CompiledQuery(users)
    used: list[weakref.ref] = []
    in_a_thread(lambda: used.append(weakref.ref(connections[DEFAULT_DB_ALIAS])) or read.rows(True))
    gc.collect()  # the connection and its compilers refer to each other
    assert used[0]() is None


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
