from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"

    def ready(self) -> None:
        from accounts.settings_sections import Section, register

        from .receivers import connect

        connect()
        register(
            Section(
                anchor="webhooks",
                title="Webhooks",
                template="notifications/_settings_webhooks.html",
                context="notifications.views.settings_context",
            )
        )
