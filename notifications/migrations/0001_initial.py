"""The webhook models, until now in `runs` (its 0005_notifications created their tables, and its
0015_notifications_app removed them from its state): this app takes them over in its state only,
keeping their tables, rows, index and constraints as they are."""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("runs", "0015_notifications_app"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="WebhookEndpoint",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("url", models.URLField(max_length=2048)),
                        ("events", models.JSONField(default=list)),
                        ("secret", models.CharField(editable=False, max_length=128)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="webhook_endpoints",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                help_text="set for a run's callback_url, which receives all events of that run only",
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="callback_endpoints",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_webhookendpoint",
                        "ordering": ["-created_at"],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookDelivery",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "event",
                            models.CharField(
                                choices=[
                                    ("run.waiting_user", "Waiting User"),
                                    ("run.succeeded", "Succeeded"),
                                    ("run.failed", "Failed"),
                                    ("run.canceled", "Canceled"),
                                ],
                                db_index=True,
                                max_length=32,
                            ),
                        ),
                        ("delivery_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ("payload", models.JSONField()),
                        (
                            "state",
                            models.CharField(
                                choices=[("pending", "Pending"), ("delivered", "Delivered"), ("failed", "Failed")],
                                db_index=True,
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("attempt_count", models.PositiveIntegerField(default=0)),
                        ("next_attempt_at", models.DateTimeField(db_index=True)),
                        ("leased_until", models.DateTimeField(blank=True, null=True)),
                        ("last_status_code", models.PositiveIntegerField(blank=True, null=True)),
                        ("last_error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("delivered_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "endpoint",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="deliveries",
                                to="notifications.webhookendpoint",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_webhookdelivery",
                        "verbose_name_plural": "webhook deliveries",
                        "ordering": ["-created_at"],
                        "indexes": [
                            models.Index(fields=["state", "next_attempt_at"], name="runs_webhoo_state_4de54d_idx")
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookAttempt",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("number", models.PositiveIntegerField()),
                        ("started_at", models.DateTimeField()),
                        ("duration_ms", models.PositiveIntegerField()),
                        ("status_code", models.PositiveIntegerField(blank=True, null=True)),
                        ("error", models.TextField(blank=True)),
                        (
                            "delivery",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="attempts",
                                to="notifications.webhookdelivery",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_webhookattempt",
                        "ordering": ["delivery", "number"],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
