"""A question's email is now a row of `notifications` (its 0004 copied every mark there): the mark
leaves this app's state. Its column stays, nullable and unused, so that processes of the previous
release, which read and write it, keep working while a rolling upgrade replaces them; a later
release drops it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_worker_draining"),
        ("notifications", "0004_question_email_outbox"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveField(model_name="interaction", name="emailed_at")],
            database_operations=[],
        ),
    ]
