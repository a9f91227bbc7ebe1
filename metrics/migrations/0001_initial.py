from bisect import bisect_left

from django.db import migrations, models

# metrics.receivers.TURN_DURATION_BUCKETS when this was written: a migration keeps its own copy.
BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0, 21600.0)


def count_past_turns(apps, schema_editor):
    """The turns recorded before the histogram was kept, counted once."""
    TurnUsage = apps.get_model("runs", "TurnUsage")
    TurnDurations = apps.get_model("metrics", "TurnDurations")
    totals: dict[tuple[str, int], list[int]] = {}
    turns = TurnUsage.objects.filter(duration_ms__isnull=False).values_list("run__engine", "duration_ms")
    for engine, duration_ms in turns.iterator():
        total = totals.setdefault((engine, bisect_left(BUCKETS, duration_ms / 1000)), [0, 0])
        total[0] += 1
        total[1] += duration_ms
    TurnDurations.objects.bulk_create(
        TurnDurations(engine=engine, bucket=bucket, turns=count, duration_ms=duration_ms)
        for (engine, bucket), (count, duration_ms) in totals.items()
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [("runs", "0017_metrics_indexes")]

    operations = [
        migrations.CreateModel(
            name="TurnDurations",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("engine", models.CharField(max_length=32)),
                ("bucket", models.PositiveSmallIntegerField()),
                ("turns", models.PositiveBigIntegerField(default=0)),
                ("duration_ms", models.PositiveBigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("engine", "bucket"), name="unique_turn_durations_bucket")
                ],
            },
        ),
        migrations.RunPython(count_past_turns, migrations.RunPython.noop),
    ]
