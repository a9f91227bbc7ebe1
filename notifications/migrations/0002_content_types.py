"""The moved models' content types follow them (runs → notifications): the same rows relabelled,
so the permissions on them (and whom they are granted to) and the admin's log entries stay
attached, now as `notifications.<codename>`."""

from django.db import migrations

MOVED = ("webhookendpoint", "webhookdelivery", "webhookattempt")


def relabel(old: str, new: str):
    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        types = ContentType.objects.using(schema_editor.connection.alias)
        for model in MOVED:
            # A row already under the new label (created by a run of the new code) keeps its own.
            if not types.filter(app_label=new, model=model).exists():
                types.filter(app_label=old, model=model).update(app_label=new)
        ContentType.objects.clear_cache()

    return move


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(relabel("runs", "notifications"), relabel("notifications", "runs")),
    ]
