"""The hourly retention and temporary-folder schedules, made once here instead of at every worker
start: django-q2's schedule names are not unique, and workers starting together on PostgreSQL each
created one (`update_or_create` locks nothing when no row exists yet). Rows an earlier start made,
duplicates included, are replaced."""

from django.db import migrations

SCHEDULES = {
    "skillrunner-run-retention": "runs.retention.remove_expired_runs",
    "skillrunner-temporary-folders": "runs.sweeps.sweep",
}


def create_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=SCHEDULES).delete()
    for name, func in SCHEDULES.items():
        Schedule.objects.create(name=name, func=func, schedule_type="H", repeats=-1)


def remove_schedules(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name__in=SCHEDULES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0019_interaction_emailed_at_moved"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedules, remove_schedules)]
