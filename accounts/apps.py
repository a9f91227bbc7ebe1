from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "API access"

    def ready(self) -> None:
        from . import schema  # noqa: F401  (registers the OpenAPI extension)
