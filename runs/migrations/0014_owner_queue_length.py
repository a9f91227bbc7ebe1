from django.conf import settings
from django.db import migrations, models
from django.db.models import Count


def count_ready_runs(apps, schema_editor):
    """Each owner's ready runs at the upgrade, so the queue's length is right from the start."""
    Run = apps.get_model("runs", "Run")
    OwnerQueue = apps.get_model("runs", "OwnerQueue")
    ready = Run.objects.filter(status="queued", awaiting_upload=False).order_by()
    for row in ready.values("owner_id").annotate(count=Count("pk")):
        OwnerQueue.objects.filter(owner_id=row["owner_id"]).update(ready_count=row["count"])


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_status_labels"),
        ("skills", "0003_temporary_skills"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="ownerqueue",
            name="ready_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name="run",
            name="cache_key",
            field=models.CharField(blank=True, help_text="set on cacheable auto runs", max_length=64),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["owner", "cache_key"], name="runs_run_cache_by_owner"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "queued")), fields=["owner"], name="runs_run_queued_by_owner"
            ),
        ),
        migrations.RunPython(count_ready_runs, migrations.RunPython.noop),
    ]
