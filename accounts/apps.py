from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "API access"

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_save, pre_save

        from .connections import end_session_connections, end_sessions_on_password_change, note_password_change

        user_logged_out.connect(end_session_connections, dispatch_uid="accounts.end_session_connections")
        user_model = settings.AUTH_USER_MODEL
        pre_save.connect(note_password_change, sender=user_model, dispatch_uid="accounts.note_password_change")
        post_save.connect(
            end_sessions_on_password_change, sender=user_model, dispatch_uid="accounts.end_sessions_on_password_change"
        )
