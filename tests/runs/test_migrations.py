"""Data migrations carry what the database held at the upgrade."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(target: tuple[str, str]):
    """The project's state at `target` (applied), as historical models."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    executor.loader.build_graph()
    return executor.loader.project_state([target]).apps


def test_the_queue_length_is_counted_at_the_upgrade_R_SC1(django_user_model):
    before = _migrate(("runs", "0013_status_labels"))
    User, Run, OwnerQueue = (
        before.get_model(*name) for name in (("auth", "User"), ("runs", "Run"), ("runs", "OwnerQueue"))
    )
    alice, bob = User.objects.create(username="alice"), User.objects.create(username="bob")
    fields = {"engine": "codex", "execution_mode": "auto", "interactive_profile": "resumable", "input": {}}
    for owner, status, awaiting_upload in [
        (alice, "queued", False),
        (alice, "queued", False),
        (alice, "queued", True),  # waits for its upload: not ready
        (alice, "succeeded", False),
        (bob, "queued", False),
    ]:
        Run.objects.create(owner=owner, status=status, awaiting_upload=awaiting_upload, **fields)
    OwnerQueue.objects.create(owner=alice)
    OwnerQueue.objects.create(owner=bob)

    after = _migrate(("runs", "0014_owner_queue_length"))
    counts = dict(after.get_model("runs", "OwnerQueue").objects.values_list("owner__username", "ready_count"))
    assert counts == {"alice": 2, "bob": 1}
    _migrate(("runs", MigrationExecutor(connection).loader.graph.leaf_nodes("runs")[0][1]))
