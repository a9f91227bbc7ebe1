"""The watcher's tail of the event table (live.watcher.EventTail): an event whose id was taken
before, but committed after, one the tail has read still wakes its run's listeners when the
channel-layer wake-up was lost too (PostgreSQL takes ids at insert, not at commit)."""

from __future__ import annotations

from live.watcher import EventTail, _events_since
from runs.models import Run, RunEvent


def test_ids_skipped_are_looked_for_until_they_come():
    tail = EventTail(100)
    tail.read([102, 105], now=0.0)
    assert (tail.last_id, tail.looked_for(1.0)) == (105, [101, 103, 104])
    tail.read([101, 104], now=2.0)
    assert (tail.last_id, tail.looked_for(3.0)) == (105, [103])


def test_an_id_never_used_is_looked_for_only_a_while():
    tail = EventTail(10)
    tail.read([12], now=0.0)
    assert tail.looked_for(EventTail.MISSING_SECONDS - 1) == [11]
    assert tail.looked_for(EventTail.MISSING_SECONDS + 1) == []


def test_a_long_run_of_skipped_ids_is_bounded():
    tail = EventTail(0)
    tail.read([10 * EventTail.MISSING_AT_MOST], now=0.0)
    assert len(tail.looked_for(1.0)) == EventTail.MISSING_AT_MOST


def test_the_tail_reads_a_late_commit_it_had_passed(db, alice):
    run = Run.objects.create(owner=alice, engine="codex", input={})
    first, second = (RunEvent.objects.create(run=run, seq=seq, kind="status") for seq in (1, 2))
    # As the tail saw the table while `first` was not committed yet: `second` only.
    tail = EventTail(first.id - 1)
    tail.read([second.id], now=0.0)
    rows = _events_since(tail.last_id, tail.looked_for(1.0))
    assert [row[0] for row in rows] == [first.id]
