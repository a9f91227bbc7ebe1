from django.db import migrations


def create_lock_row(apps, schema_editor):
    apps.get_model("runs", "DispatchLock").objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(create_lock_row, migrations.RunPython.noop)]
