"""API tokens get a name and an optional expiry: existing tokens are named "Token 1", "Token 2", …
in the order each user created them, and never expire."""

from django.db import migrations, models


def name_existing_tokens(apps, schema_editor):
    ApiToken = apps.get_model("accounts", "ApiToken")
    numbers: dict[int, int] = {}
    for token in ApiToken.objects.order_by("user_id", "created_at", "pk").only("pk", "user_id"):
        numbers[token.user_id] = numbers.get(token.user_id, 0) + 1
        ApiToken.objects.filter(pk=token.pk).update(name=f"Token {numbers[token.user_id]}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0004_spendlimit")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="name",
            field=models.CharField(default="", max_length=100),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(
                blank=True, null=True, help_text="refused from then on, as if revoked; empty: never"
            ),
        ),
        migrations.RunPython(name_existing_tokens, migrations.RunPython.noop),
    ]
