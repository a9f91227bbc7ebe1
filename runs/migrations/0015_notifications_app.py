"""The webhook models moved to their own app, `notifications`, which adopts their tables as they
are (its 0001_initial): removed from this app's state only, nothing in the database changes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_owner_queue_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="WebhookAttempt"),
                migrations.DeleteModel(name="WebhookDelivery"),
                migrations.DeleteModel(name="WebhookEndpoint"),
            ],
            database_operations=[],
        ),
    ]
