from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"

    def ready(self) -> None:
        from accounts import settings_page

        from .receivers import connect
        from .views import SETTINGS_SECTION

        connect()
        settings_page.register(SETTINGS_SECTION)
