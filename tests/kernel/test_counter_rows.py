"""kernel.counters.add_to_row: one statement makes a counter row or adds to it."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kernel.counters import add_to_row
from metrics.models import TurnDurations
from runs.models import TokenSpend

pytestmark = pytest.mark.django_db


def test_the_first_amounts_make_the_row_and_later_ones_add_to_it():
    with CaptureQueriesContext(connection) as statements:
        add_to_row(TurnDurations, {"engine": "codex", "bucket": 2}, turns=1, duration_ms=1800)
        add_to_row(TurnDurations, {"engine": "codex", "bucket": 2}, turns=1, duration_ms=2200)
    add_to_row(TurnDurations, {"engine": "codex", "bucket": 3}, turns=1, duration_ms=4000)
    add_to_row(TurnDurations, {"engine": "gemini", "bucket": 2}, turns=2, duration_ms=3000)
    rows = TurnDurations.objects.order_by("engine", "bucket").values_list("engine", "bucket", "turns", "duration_ms")
    assert list(rows) == [("codex", 2, 2, 4000), ("codex", 3, 1, 4000), ("gemini", 2, 2, 3000)]
    assert len(statements) == 2  # one each, whether the row was there or not


def test_a_key_of_a_foreign_key_and_a_day(django_user_model):
    alice, bob = (django_user_model.objects.create(username=name) for name in ("alice", "bob"))
    today, yesterday = datetime.date(2026, 12, 6), datetime.date(2026, 12, 5)
    for owner, day, tokens in ((alice, today, 100), (alice, today, 50), (alice, yesterday, 7), (bob, today, 1)):
        add_to_row(TokenSpend, {"owner_id": owner.pk, "day": day}, tokens=tokens)
    spent = {(row.owner_id, row.day): row.tokens for row in TokenSpend.objects.all()}
    assert spent == {(alice.pk, today): 150, (alice.pk, yesterday): 7, (bob.pk, today): 1}
