"""Question emails become an outbox (QuestionEmail rows, sent at least once) instead of a mark on
the question made before the email was enqueued. A question already emailed stays emailed: its
row is written sent, at the time of the old mark (runs' 0019 then drops the mark from its state)."""

import django.db.models.deletion
from django.db import migrations, models


def rows_for_emailed_questions(apps, schema_editor):
    Interaction = apps.get_model("runs", "Interaction")
    QuestionEmail = apps.get_model("notifications", "QuestionEmail")
    alias = schema_editor.connection.alias
    emailed = Interaction.objects.using(alias).filter(emailed_at__isnull=False).values_list("pk", "emailed_at")
    batch = []
    for pk, emailed_at in emailed.iterator(chunk_size=2000):
        batch.append(
            QuestionEmail(
                interaction_id=pk, state="sent", sent_at=emailed_at, next_attempt_at=emailed_at, attempt_count=1
            )
        )
        if len(batch) == 2000:
            QuestionEmail.objects.using(alias).bulk_create(batch)
            batch = []
    QuestionEmail.objects.using(alias).bulk_create(batch)


def marks_from_sent_rows(apps, schema_editor):
    Interaction = apps.get_model("runs", "Interaction")
    QuestionEmail = apps.get_model("notifications", "QuestionEmail")
    alias = schema_editor.connection.alias
    for pk, sent_at in QuestionEmail.objects.using(alias).filter(state="sent").values_list("interaction_id", "sent_at"):
        Interaction.objects.using(alias).filter(pk=pk).update(emailed_at=sent_at)


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0003_webhook_deleted_at"),
        ("runs", "0016_relay_spend_and_security_events"),
    ]

    operations = [
        migrations.CreateModel(
            name="QuestionEmail",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("attempt_count", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(db_index=True)),
                ("leased_until", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("sent", "Sent"),
                            ("skipped", "Skipped"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                (
                    "interaction",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="question_email",
                        to="runs.interaction",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [models.Index(fields=["state", "next_attempt_at"], name="notificatio_state_805e65_idx")],
            },
        ),
        migrations.RunPython(rows_for_emailed_questions, marks_from_sent_rows),
    ]
