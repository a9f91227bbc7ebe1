from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "API access"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from . import schema  # noqa: F401  (registers the OpenAPI extension)
        from .connections import end_session_connections

        user_logged_out.connect(end_session_connections, dispatch_uid="accounts.end_session_connections")
